# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
"""The vmap core of the 0.14.0 line: a vmap scope rebuilt as a batched graph, one batching rule per op (JAX's batching rules, laid out
like gradient.py's one gradient rule per op).

0.14's scheduler works on CALL/STAGE, and `UOp.call` refuses a RANGE that leaks out of a call, so the VMAPIN/VMAPOUT bracket never
reaches it: `Tensor.vmapout` hands the per-example graph inside the bracket to `batch_scope`, which rebuilds every value that depends on
the scope's RANGEs over the whole batch (the batch axes in front, one per RANGE, in the VMAPOUT's order) and then puts those axes where
the VMAPOUT's varg says. The scheduler sees the graph a user would have written for the batch by hand, so vmap's kernels are
hand-batched's. Nested scopes lower inside out: an inner VMAPOUT rebuilds its scope and leaves the outer scope's VMAPINs for the outer
VMAPOUT. Why this design and not a range that crosses CALLs: docs/internals.md, "The vmap core on 0.14".
"""
from __future__ import annotations
import contextlib
from dataclasses import dataclass, field
from tinygrad.uop import Ops, GroupOp
from tinygrad.uop.ops import UOp, PatternMatcher, UPat, sint, ssimplify, graph_rewrite, rewrite_group, TRACK_MATCH_STATS, range_start
from tinygrad.dtype import dtypes
from tinygrad.helpers import DEBUG_RANGEIFY
from tinygrad.transform_state import KEPT
from tinygrad.structure_template import Structure, Template, KeptTemplates, TEMPLATE_CHECK, BUILT_FROM, check_hit, is_constant, make_template, \
  built_by

def _size(r:UOp) -> sint: return ssimplify(r.src[0])

@dataclass(frozen=True)
class BatchCtx:
  """what a rule gets: the scope's RANGEs the node depends on (its batch axes, in front) and its srcs, each batched src with those axes
  in front (a size-1 axis for one it doesn't depend on), an unbatched src as it is (`batched[i]` False)"""
  dims: tuple[UOp, ...]
  src: tuple[UOp, ...]
  batched: tuple[bool, ...]
  @property
  def k(self) -> int: return len(self.dims)
  @property
  def sizes(self) -> tuple[sint, ...]: return tuple(_size(r) for r in self.dims)
  def full(self, i:int) -> UOp:
    """src i over the whole batch: its size-1 batch axes (or, unbatched, new ones in front) expanded to the batch's sizes"""
    s = self.src[i]
    return s.expand(self.sizes + s.shape[self.k:]) if self.batched[i] else s._mop(Ops.EXPAND, self.sizes)
  def ranked(self, i:int, ndim:int) -> UOp:
    """batched src i with size-1 axes after the batch axes up to `ndim` per-example axes, so implicit broadcasting lines the per-example
    axes up on the right (an unbatched src lines up by itself)"""
    s = self.src[i]
    if not self.batched[i] or (pad:=ndim - (len(s.shape) - self.k)) <= 0: return s
    return s.reshape(s.shape[:self.k] + (1,)*pad + s.shape[self.k:])

def _reduced_in_front(ctx:BatchCtx, n:int) -> UOp:
  """batched src 0 with its first n per-example axes (the ones a REDUCE reduces) moved in front of the batch axes"""
  return ctx.src[0].permute(tuple(range(ctx.k, ctx.k+n)) + tuple(range(ctx.k)) + tuple(range(ctx.k+n, len(ctx.src[0].shape))))

def _batch_of_batch_axes(ctx:BatchCtx, ret:UOp, n:int) -> UOp:
  """a value that put n new axes in front of the per-example shape (EXPAND, STACK): those n axes moved behind the batch axes"""
  return ret.permute(tuple(range(n, n+ctx.k)) + tuple(range(n)) + tuple(range(n+ctx.k, len(ret.shape))))

def _not_batchable(ret:UOp, why:str): raise NotImplementedError(f"vmap: {ret.op} inside a vmapped function {why}")

def scope_left_open(x:UOp):
  """a VMAPIN reached the scheduler, its scope never batched. realize() keeps a value inside a scope lazy, so it is under a REDUCE that
  ended the scope's RANGE inside the scope (UOp.reduce over a vmap RANGE: the 0.12 line's idiom for a sum over the examples), which
  nothing on 0.14 batches, or a schedule asked of a value inside a scope"""
  rngs = ", ".join(a.render() for a in x.src[1:] if a.op is Ops.RANGE)
  raise NotImplementedError(f"vmap: a VMAPIN over {rngs} reached the scheduler without its VMAPOUT. A REDUCE over a vmap RANGE inside its "
                            "scope (UOp.reduce over it) isn't supported on tinygrad 0.14: vmapout the per-example value and sum the batch over "
                            "its axis. A value inside a scope is one example: vmapout gives the batch")

# the batching rules, one per op (JAX's primitive_batchers): rule(ctx, ret) is ret over the batch, with ctx.dims's axes in front
pm_batch = PatternMatcher([
  # elementwise: the same op on the batched srcs, which broadcast against the unbatched ones on the per-example axes
  (UPat(GroupOp.Elementwise, name="ret"), lambda ctx, ret: ret.replace(src=tuple(ctx.ranked(i, len(ret.shape)) for i in range(len(ret.src))))),
  (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY), name="ret"), lambda ctx, ret: ret.replace(src=ctx.src)),
  # movement ops: the same movement of the per-example axes, the batch axes left alone
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: ctx.src[0].reshape(ctx.sizes + ret.marg)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: ctx.src[0].permute(tuple(range(ctx.k)) + tuple(ctx.k+a for a in ret.marg))),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: ctx.src[0]._mop(Ops.FLIP, (False,)*ctx.k + tuple(ret.marg))),
  (UPat((Ops.PAD, Ops.SHRINK), name="ret"), lambda ctx, ret: ctx.src[0]._mop(ret.op, tuple((0, s) for s in ctx.sizes) + tuple(ret.marg))),
  # EXPAND puts its new axes in front of the shape, and STACK its stacked axis: behind the batch axes here
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: _batch_of_batch_axes(ctx, ctx.src[0]._mop(Ops.EXPAND, ret.marg), len(ret.marg))),
  (UPat(Ops.STACK, name="ret"), lambda ctx, ret:
    _batch_of_batch_axes(ctx, UOp(Ops.STACK, ret.dtype, tuple(ctx.full(i) for i in range(len(ret.src)))), 1)),
  # REDUCE reduces the leading arg[1] axes: those go in front of the batch axes. arg[2] counts the batch axes in front of its output, so
  # the scheduler keeps a scalar an example in its consumer's kernel, as it does for one example (schedule/indexing.py)
  (UPat(Ops.REDUCE, name="ret"), lambda ctx, ret: UOp(Ops.REDUCE, ret.dtype, (_reduced_in_front(ctx, ret.arg[1]),),
                                                      ret.arg[:2] + (len(ctx.dims) + (ret.arg[2] if len(ret.arg) > 2 else 0),))),
  # a write of a per-example value into a buffer with no data of its own (clone: AFTER(empty, STORE(empty, value))) is the value: each
  # example gets its own (Tensor.assign and __setitem__ refuse a buffer with data, and set items functionally inside a scope)
  (UPat(Ops.STORE, src=(UPat(), UPat()), name="ret"), lambda ctx, ret: ctx.src[1] if not ctx.batched[0] else None),
  (UPat(Ops.AFTER, src=(UPat(), UPat(Ops.STORE)), name="ret"), lambda ctx, ret: ctx.src[1] if not ctx.batched[0] else None),
  # what a vmap scope can't hold on 0.14 yet: calls, and values on several devices
  (UPat((Ops.CALL, Ops.FUNCTION, Ops.GETTUPLE, Ops.CUSTOM_FUNCTION, Ops.MSELECT, Ops.MSTACK, Ops.UNSHARD, Ops.ALLREDUCE), name="ret"),
   lambda ctx, ret: _not_batchable(ret, "isn't supported on tinygrad 0.14 yet")),
])

def _enter(x:UOp, dx:tuple[UOp, ...], vmapin:UOp, ranges:tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...]]:
  """a VMAPIN of x (batched over dx) over the scope of `ranges`: the axes it maps with them move in front, its other RANGEs (an enclosing
  scope's) stay a VMAPIN for that scope"""
  varg = vmapin.src[1:]
  dims = tuple(r for r in ranges if r in dx or r in varg)
  perm = [dx.index(r) if r in dx else len(dx)+varg.index(r) for r in dims] + [len(dx)+i for i,a in enumerate(varg) if a not in ranges]
  ret, rest = x.permute(tuple(perm)), tuple(a for a in varg if a not in ranges)
  if any(a.op is Ops.RANGE for a in rest): ret = ret.vmapin((KEPT,)*len(dims) + rest)
  return ret, dims

def _aligned(b:UOp, d:tuple[UOp, ...], dims:tuple[UOp, ...]) -> UOp:
  """b, batched over d (a subsequence of dims), with an axis per RANGE of dims in front: size 1 for the ones it doesn't depend on"""
  return b if d == dims else b.reshape(tuple(_size(r) if r in d else 1 for r in dims) + b.shape[len(d):])

@dataclass
class ScopeOutputs(Structure):
  """what a scope's outputs batched so far share: the rules' batch of each node, and the structure walked (each node's place in it, the
  key, the leaves: a Structure) and the templates' nodes rebuilt. Outside shared_batching() each output starts afresh"""
  done: dict[UOp, tuple[UOp, tuple[UOp, ...]]] = field(default_factory=dict)
  rebuilt: dict[UOp, UOp] = field(default_factory=dict)
  scoped: dict[UOp, bool] = field(default_factory=dict)   # per node looked at, whether it is in the scope (_scoped)
  walkable: bool = True   # False after a walk gave up: the outputs after it take the rules
  # the outputs walked so far that one gradient template built on the same leaves: (their place among its results, varg), the leaves,
  # and those whose walk was the kept one (_walk), whose nodes `index` lacks; seq None once an output that template didn't build is walked
  seq: tuple|None = ()
  built: tuple[UOp, ...]|None = None
  short: list[tuple[UOp, tuple[UOp, ...]]] = field(default_factory=list)

# per scope (its RANGEs), what the batch_scope calls inside shared_batching() share: a node's batch is the same for every output of it
_shared: list[dict[tuple[UOp, ...], ScopeOutputs]] = []
@contextlib.contextmanager
def shared_batching():
  """the outputs of one vmapped function, batched one at a time inside, walk and rebuild what they share once (a gradient's outputs share
  most of their graph: bench W6's three per-example gradients)"""
  _shared.append({})
  try: yield
  finally: _shared.pop()

def batch_scope(y:UOp, varg:tuple[UOp, ...]) -> UOp:
  """the batch of y, one example of the scope whose RANGEs are in varg, with its axes where varg says (VMAPOUT's semantics)"""
  ranges = tuple(a for a in varg if a.op is Ops.RANGE)
  outs = _shared[-1].setdefault(ranges, ScopeOutputs()) if _shared else ScopeOutputs()
  if TRACK_MATCH_STATS >= 2 or DEBUG_RANGEIFY or not _walk(y, varg, outs): ret = _batched(y, varg, outs.done)
  elif (t:=_templates.get(key:=tuple(outs.key))) is not None:
    outs.rebuilt.update(zip(t.placeholders, outs.leaves))
    ret = t.rebuild(outs.rebuilt)
    if TEMPLATE_CHECK: check_hit([ret], [_batched(y, varg, {})], "a vmap scope's batch")
    ret.__dict__[BUILT_FROM] = (t, outs.leaves)   # all the scope's leaves once its outputs are batched: the list grows with them
  else:
    ret = _batched(y, varg, outs.done)
    if key not in _templates: _templates.keep(key, make_template([ret], outs.leaves))
  if TRACK_MATCH_STATS >= 2: _trace_scope(UOp(Ops.VMAPOUT, y.dtype, (y, *varg)), ret)
  return ret

# *** a scope whose structure was batched before: an eager call of a vmapped function batches the same per-example graph again, on new
# inputs and a new RANGE, and its rules build every node anew (~20 us a node, 2.7 ms of bench W4's 3.5 ms eager call). The batch is a
# function of the scope's structure and of its leaves (what it reads from outside: inputs, closed-over values, an enclosing scope's
# RANGEs), so it is kept per structure with a placeholder for each leaf (tinygrad/structure_template.py), and a scope batched before
# puts its leaves in their place. None: the batch reads a leaf's insides (besides constants), which would stay the first call's

_templates = KeptTemplates(4096)

# where recursive_property keeps a node's UOp.ranges, and the ops whose UOp.ended_ranges may drop some of their srcs' ranges
_RANGES_KEPT, _MAY_END = UOp.__dict__["_ranges"].nm, frozenset(range_start) | {Ops.AFTER, Ops.UNSHARD}
def _scoped(y:UOp, ranges:tuple[UOp, ...]|None, scoped:dict[UOp, bool]) -> bool:
  """whether y is in the scope of `ranges`, any(r in y.ranges for r in ranges) (ranges None: in any RANGE's, bool(y.ranges)), with the
  same for its nodes in `scoped`. Found from the srcs', as UOp.ranges is, but without its dict a node for each node an eager call made
  anew (~1 us each); a node that has its ranges, or whose ranges drop some of its srcs' (UOp.ended_ranges), asks them"""
  stack = [(y, False)]
  while stack:
    u, srcs_done = stack.pop()
    if u in scoped: continue
    if srcs_done: scoped[u] = (u.op is Ops.RANGE if ranges is None else u in ranges) or any(scoped[s] for s in u.src)
    elif _RANGES_KEPT in u.__dict__ or (u.op in _MAY_END and u.ended_ranges):
      scoped[u] = bool(u.ranges) if ranges is None else any(r in u.ranges for r in ranges)
    else:
      stack.append((u, True))
      stack.extend((s, False) for s in u.src)
  return scoped[y]

def _walk_scope(y:UOp, varg:tuple[UOp, ...], outs:ScopeOutputs) -> bool:
  """y's part of the scope's structure, added to the key of the outputs walked before it (the nodes new to the walk: its own RANGEs by
  their place in varg, its leaves by op, dtype and shape, a constant (a CONST, a shape's STACK of them) as itself, then y's place and
  varg) and its leaves to theirs; False where it isn't kept (a leaf without a shape or on several devices)"""
  if not outs.walkable: return False
  ranges = tuple(a for a in varg if a.op is Ops.RANGE)
  scoped = outs.scoped
  def in_scope(u:UOp) -> bool:
    if (ret:=scoped.get(u)) is None: ret = _scoped(u, ranges, scoped)
    return ret
  index, key, leaves = outs.index, outs.key, outs.leaves
  def leaf(u:UOp) -> bool:
    if is_constant(u): entry = u
    elif u._shape is None or isinstance(u.device, tuple): return False
    else:
      entry = (u.op, u.dtype, u._shape, u.arg[1:] if u.op is Ops.RANGE else None)
      leaves.append(u)
    key.append(entry)
    index[u] = len(index)
    return True
  # the toposort of the scope's nodes not walked before: a src outside the scope is a leaf, listed where it is first read. The gate's
  # nodes are the scope's (it is asked of each node once), the others are its leaves
  inside: set[UOp] = set()
  def gate(u:UOp) -> bool:
    if u in index or not in_scope(u): return False
    inside.add(u)
    return True
  for u in ([y] if not in_scope(y) else y.toposort(gate=gate)):
    if u in index: continue
    if u not in inside:
      if not leaf(u): break
      continue
    for s in u.src:
      if s not in index and not leaf(s): break
    else:
      if u in ranges: key.append((ranges.index(u), u.src[0]))
      else: key.append((u.op, u.dtype, u.arg, u.tag, tuple([index[s] for s in u.src])))
      index[u] = len(index)
      continue
    break
  else:
    key.append((index[y], tuple((ranges.index(a), a.src, a.arg[1:]) if a.op is Ops.RANGE else None for a in varg)))
    return True
  outs.walkable = False
  return False

# *** the walk of a graph a gradient template built: a per-example gradient (bench W6) is the same template's on new leaves every call,
# so _walk_scope finds the same (its key, and its leaves at the same places in the graph) as it did for the same template's results
# walked in the same order with the same varg: that is kept, and the leaves are found again by their paths from the output

_walks = KeptTemplates(4096)

def _step(y:UOp, varg:tuple[UOp, ...], outs:ScopeOutputs) -> tuple[tuple, Template, tuple[UOp, ...]]|None:
  """the key of y's walk as the outputs walked before it (one template's results on the same leaves) leave it, with the template
  and leaves; None where it isn't such a result, or a RANGE of varg isn't one of its leaves"""
  if outs.seq is None or (b:=built_by(y)) is None or (outs.built is not None and b[1] is not outs.built): return None
  vcode = []
  for a in varg:
    if a.op is not Ops.RANGE: vcode.append(a)
    elif (j:=next((j for j,l in enumerate(b[1]) if l is a), None)) is None: return None
    else: vcode.append(j)
  return (id(b[0]), outs.seq + ((b[2], tuple(vcode)),)), b[0], b[1]

def _paths(y:UOp, leaves:list[UOp]) -> tuple[tuple[int, ...], ...]|None:
  """a path of src places from y to each of `leaves` (breadth first: the shortest)"""
  want, found, seen, todo = set(leaves), {}, {y}, [(y, ())]
  for u, p in todo:
    if u in want: found.setdefault(u, p)
    for j,s in enumerate(u.src):
      if s not in seen: seen.add(s); todo.append((s, p+(j,)))
  return tuple(found[u] for u in leaves) if len(found) == len(want) else None

def _follow(y:UOp, path:tuple[int, ...]) -> UOp:
  for j in path: y = y.src[j]
  return y

def _walk(y:UOp, varg:tuple[UOp, ...], outs:ScopeOutputs) -> bool:
  """_walk_scope, or what it found before for y's graph (_step's key): its key's entries, and its leaves by their paths from y"""
  if not outs.walkable: return False
  step = _step(y, varg, outs)
  # kept only while every output before took it too: an output walked the long way left its nodes in `index`, which a replay would lose
  if step is not None and len(outs.short) == len(outs.seq) and (kept:=_walks.get(step[0])) is not None and kept[0] is step[1]:
    outs.key.extend(kept[1])
    outs.leaves.extend([_follow(y, p) for p in kept[2]])
    outs.seq, outs.built = step[0][1], step[2]
    outs.short.append((y, varg))
    if TEMPLATE_CHECK:   # what the walk finds
      ref = ScopeOutputs()
      for yy, vv in outs.short: _walk_scope(yy, vv, ref)
      if ref.key != outs.key or len(ref.leaves) != len(outs.leaves) or any(a is not b for a,b in zip(ref.leaves, outs.leaves)):
        raise AssertionError("a vmap scope's walk kept for its outputs' template isn't the walk's")
    return True
  if outs.short:   # the outputs before took the kept walk: walk them, for the nodes (index) this one's walk skips
    outs.index.clear(); outs.key.clear(); outs.leaves.clear()   # in place: a batch built before holds the leaves list (BUILT_FROM)
    for yy, vv in outs.short: _walk_scope(yy, vv, outs)
    outs.short.clear()
  n_key, n_leaves = len(outs.key), len(outs.leaves)
  if not _walk_scope(y, varg, outs): return False
  if step is None: outs.seq = None
  else:
    outs.seq, outs.built = step[0][1], step[2]
    if step[0] not in _walks and (paths:=_paths(y, outs.leaves[n_leaves:])) is not None:
      _walks.keep(step[0], (step[1], tuple(outs.key[n_key:]), paths))
  return True

# VIZ: each scope is a graph of its own, "vmap scope rm1=1000", whose step "batch scope" starts from the bracket (the per-example graph
# between its VMAPINs and a VMAPOUT, vargs and all) and rewrites the VMAPOUT to the batched graph: the scope dissolves there
pm_dissolve = PatternMatcher([(UPat(Ops.VMAPOUT, name="b"), lambda ctx, b: ctx.get(b))])
def _scope_name(bracket:UOp, batched:UOp, ret) -> str: return "vmap scope " + varg_str(bracket.src[1:])
@rewrite_group(_scope_name)
def _trace_scope(bracket:UOp, batched:UOp) -> UOp: return graph_rewrite(bracket, pm_dissolve, ctx={bracket: batched}, name="batch scope")

def _batched(y:UOp, varg:tuple[UOp, ...], done:dict[UOp, tuple[UOp, tuple[UOp, ...]]]) -> UOp:
  """y over the batch by the rules, one node at a time (done: the nodes of the scope batched before, for the scope's other outputs)"""
  ranges = tuple(a for a in varg if a.op is Ops.RANGE)
  def in_scope(u:UOp) -> bool: return any(r in u.ranges for r in ranges)
  for u in (scope:=y.toposort(gate=in_scope)):
    if u.op is Ops.RANGE or u in done: continue
    if u.op is Ops.VMAPIN:
      done[u] = _enter(*done.get(u.src[0], (u.src[0], ())), u, ranges)
      continue
    dims = tuple(r for r in ranges if any(r in d for s in u.src if s in done for d in [done[s][1]]))
    ctx = BatchCtx(dims, tuple(_aligned(*done[s], dims) if s in done else s for s in u.src), tuple(s in done for s in u.src))
    if (ret:=pm_batch.rewrite(u, ctx)) is None: _not_batchable(u, "has no batching rule")
    done[u] = (ret, dims)
  b, dims = done.get(y, (y, ()))
  full = BatchCtx(ranges, (_aligned(b, dims, ranges),), (True,)).full(0)   # every RANGE of the scope, also where y doesn't depend on it
  inner = iter(range(len(ranges), len(ranges)+len(y.shape)))
  ret = _permute_into_elementwise(full.permute(tuple(ranges.index(a) if a.op is Ops.RANGE else next(inner) for a in varg)), {},
                                  {b for b,_ in done.values()} - {b for u,(b,_) in done.items() if u.op is Ops.VMAPIN})
  if DEBUG_RANGEIFY: _print_scope(y, varg, {u: done[u] for u in scope if u in done}, ret)
  return ret

def _permute_into_elementwise(u:UOp, memo:dict[UOp, UOp], batched:set[UOp]) -> UOp:
  """u, a scope's batch, with a PERMUTE on top of elementwise ops moved into their sources. 0.14's realize leaves movement ops on top as
  a view of a buffer written in the order below them: a gradient through a matmul's transposed weight is such a PERMUTE, and the batch
  was written transposed (bench W6's per-example weight gradients: rows of 16, not 32, on a GPU 261 against hand-batched's 77 us).
  Only the ops the rules built (`batched`) are rebuilt: an input (a VMAPIN's batch can be the input itself) or a closed-over value stays
  the very UOp it is, which jvp's seed and gradient's target are found by"""
  if u.op is not Ops.PERMUTE or (e:=u.src[0]).op not in GroupOp.ALU|{Ops.CAST} or e not in batched: return u
  if (ret:=memo.get(u)) is None:   # per PERMUTE: a src that is a PERMUTE itself gets both in one
    # 0.14's elementwise ops broadcast their srcs as numpy does: size-1 axes stay size 1 in the permute, missing ones are added first
    def permuted(s:UOp) -> UOp: return s if s.shape == () else s.reshape((1,)*(len(u.shape)-len(s.shape)) + s.shape).permute(u.arg)
    ret = memo[u] = e.replace(src=tuple(_permute_into_elementwise(permuted(s), memo, batched) for s in e.src))
  return ret

def varg_str(varg:tuple[UOp, ...]) -> str:
  """a varg as VIZ and DEBUG_RANGEIFY print it, `(rm1048576=1000, 0)`: a RANGE as its name = size, a kept axis as 0"""
  return "(" + ", ".join(f"{a.render()}={a.vmax+1}" if a.op is Ops.RANGE else "0" for a in varg) + ")"

def _print_scope(y:UOp, varg:tuple[UOp, ...], done:dict[UOp, tuple[UOp, tuple[UOp, ...]]], ret:UOp) -> None:
  """DEBUG_RANGEIFY on 0.14: no scope reaches rangeify, so each VMAPOUT prints what it batched, inputs first: every node of the scope,
  its shape for one example, the scope RANGEs it depends on (its batch axes, in front) and its shape over the batch. Rangeify's own
  output then shows the batched graph like any other"""
  print("*"*26, f"vmap scope {varg_str(varg)}: {len(done)} nodes batched (tinygrad/batching.py)")
  for u,(b,dims) in done.items():
    print(f"     {str(u.op):20s} {str(u.shape):20s} {'['+']['.join(r.render() for r in dims)+']' if dims else '[]':24s} -> {b.shape}")
  print(f"     {'Ops.VMAPOUT':20s} {str(y.shape):20s} {varg_str(varg):24s} -> {ret.shape}")

# *** what Tensor.vmapin / Tensor.vmapout check at the call, so bad vargs are named there rather than deep in a rewrite ***

def _check_varg(varg, fn:str) -> tuple[UOp, ...]:
  if not isinstance(varg, (tuple, list)) or not all(isinstance(a, UOp) for a in varg): raise TypeError(f"{fn} varg must be a tuple of UOps, got {varg!r}")
  if bad:=[a for a in varg if a.dtype is not dtypes.weakint or not (a.op is Ops.RANGE or (a.op is Ops.CONST and a.arg == 0))]:
    raise ValueError(f"{fn} varg entries must be a RANGE or UOp.const(dtypes.weakint, 0), got {bad[0].op} {bad[0].dtype} arg={bad[0].arg}")
  if len(rngs:=[a for a in varg if a.op is Ops.RANGE]) != len(set(rngs)):
    raise ValueError("vmapin can't map two axes with one RANGE" if fn == "vmapin" else "vmapout can't put one RANGE on two axes")
  return tuple(varg)

def check_vmapin(x:UOp, varg) -> tuple[UOp, ...]:
  """the varg of x.vmapin(varg), checked: an entry per axis, each RANGE of its axis's size and new to x"""
  if len(varg:=_check_varg(varg, "vmapin")) != len(x.shape): raise ValueError(f"vmapin varg needs {len(x.shape)} entries for shape {x.shape}, got {len(varg)}")
  for i,(a,s) in enumerate(zip(varg, x.shape)):
    if a.op is not Ops.RANGE: continue
    if _size(a) != s: raise ValueError(f"vmapin RANGE of size {_size(a)} can't map axis {i} of size {s}")
    if a in x.ranges: raise ValueError(f"vmapin RANGE {a.arg} already maps an enclosing vmap scope, nested scopes need their own RANGE")
  return varg

def check_vmapout(y:UOp, varg) -> tuple[UOp, ...]:
  """the varg of y.vmapout(varg), checked: a CONST(0) per axis of y"""
  varg = _check_varg(varg, "vmapout")
  if (n:=len([a for a in varg if a.op is Ops.CONST])) != len(y.shape):
    raise ValueError(f"vmapout varg needs {len(y.shape)} UOp.const(dtypes.weakint, 0) entries for inner shape {y.shape}, got {n}")
  return varg

def _closed_build(t:Template, leaves:list[UOp], seen:dict[UOp, bool]) -> bool:
  """whether a scope template's build on `leaves` (BUILT_FROM) is in no RANGE: none of the leaves it read is, and the template, its
  placeholders in none, is in none (kept with the template). Its graph isn't walked (bench W6's realize: 0.04 ms)"""
  if any(_scoped(l, None, seen) for l in leaves[:len(t.placeholders)]): return False
  if "closed" not in t.memo:
    memo = dict.fromkeys(t.placeholders, False)
    t.memo["closed"] = not any(_scoped(b, None, memo) for b in t.built if b is not None)
  return t.memo["closed"]

def open_vmap_ranges(u:UOp, seen:dict[UOp, bool]|None=None) -> list[UOp]:
  """the RANGEs of the vmap scopes u is inside: a value there is one example, not a batch"""
  # a realize asks it of every graph: most are in no RANGE, found without UOp.ranges of every node (bench W6's batch: 0.07 ms)
  if seen is None: seen = {}   # what _scoped found of other graphs before
  if (b:=u.__dict__.get(BUILT_FROM)) is not None and _closed_build(*b, seen):
    if TEMPLATE_CHECK and _scoped(u, None, {}): raise AssertionError("a vmap scope's batch from a template is in a RANGE")
    seen[u] = False
    return []
  if not _scoped(u, None, seen): return []
  return [a for x in u.toposort() if x.op is Ops.VMAPIN for a in x.src[1:] if a in u.ranges] if u.ranges else []
