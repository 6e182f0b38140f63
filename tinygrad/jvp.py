"""Forward-mode AD over the UOp graph: the tangent of every node from the tangents of its srcs, one rule per op (the dual of gradient.py).

`jvp_uops` (UOps) and `jvp_tensors` (Tensors) push tangents given for some nodes of a graph forward to its outputs; `jvp(fn, primals,
tangents)` is the JAX-style transform. Inputs are matched by identity of their UOp, so they may be unrealized graphs, and nothing is
realized: a tangent is just more graph, which composes with vmap (a tangent inside a vmap scope stays inside it) and with gradient.
"""
from __future__ import annotations
import contextlib, math
from typing import Any, Callable, Sequence
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, Ops, GroupOp
from tinygrad.fork_line import LINE_012
if LINE_012: from tinygrad.gradient import prod_of_others   # 0.12 (its fix-gradient-prod-zero topic)
else: from tinygrad.mixin.gradient import prod_of_others    # 0.14 (the same topic there)
from tinygrad.tensor import Tensor
from tinygrad.transform_state import TRANSFORMS, on_device
from tinygrad.device import Device
from tinygrad.vmap import _from_numpy
from tinygrad.pytree import tree_leaves, tree_leaves_as, tree_unflatten, tree_map_skip_none, tree_structure, same_structure

# a zero tangent is None: rules skip the terms it would give, so the parts of a graph the inputs don't reach build no tangent graph
def _add_tangents(*ts:UOp|None) -> UOp|None:
  """the sum of the nonzero tangents of ts (None: all are zero)"""
  return None if not (nz:=[t for t in ts if t is not None]) else nz[0] if len(nz) == 1 else sum(nz[1:], nz[0])
def _scale_tangent(t:UOp|None, f:UOp) -> UOp|None: return None if t is None else t * f
def _instantiate_zeros(t:UOp|None, like:UOp) -> UOp:
  """t, or for a zero tangent, zeros like `like` (JAX's instantiate_zeros): for ops that need both tangents"""
  return like.const_like(0) if t is None else t

def _no_tangent(op:Ops, why:str): raise NotImplementedError(f"no tangent for {op}: {why}")

def reduce_tangent(t:UOp, ret:UOp, op:Ops, red:Callable[..., UOp]) -> UOp:
  """the tangent of ret = the `op` reduce of x, where `red(u, op=ADD)` reduces a UOp of x's shape with `op` over the axes ret reduces"""
  x = ret.src[0]
  def like_x(u:UOp) -> UOp: return u if u.shape == x.shape else u.expand(x.shape)
  if op is Ops.ADD: return red(t)
  if op is Ops.MAX:
    # the tangent at the max, split evenly between ties (like gradient.py, so jvp and vjp stay each other's transpose)
    mask = x.eq(like_x(ret)).cast(t.dtype)
    return red(mask * t) / red(mask)
  if op is Ops.MUL: return red(t * prod_of_others(x, lambda u, op: like_x(red(u, op))))
  _no_tangent(ret.op, f"reduce {op} is not differentiable")

# *** the tangent rules, one per op (JAX's primitive_jvps): rule(ctx, ret) is the tangent of the node ret from ctx, the tangents of its
# srcs (None: zero). A rule is only called when one of them is nonzero ***

# piecewise constant or integer/bool valued ops. A bitcast's tangent is zero too, as JAX's and gradient.py's (which gives None)
def _zero_jvp(ctx, ret): return None
# linear and structural ops: the same op, with ret's arg and other srcs, on the tangent. VMAPIN/VMAPOUT keep their vargs: the tangent of
# a value inside a scope is inside the same scope
def _linear_jvp(ctx, ret):
  if ctx[0] is None: return None
  # a tangent made of constants has no device, and Tensor.contiguous leaves such a value as it is
  if ret.op is Ops.CONTIGUOUS and ctx[0].device is None: return ctx[0]
  return UOp(ret.op, ctx[0].dtype, (ctx[0],)+ret.src[1:], ret.arg)
def _cast_jvp(ctx, ret): return ctx[0].cast(ret.dtype) if dtypes.is_float(ret.dtype) else None
def _neg_jvp(ctx, ret): return -ctx[0]
def _reciprocal_jvp(ctx, ret): return -ctx[0] * ret * ret
def _sqrt_jvp(ctx, ret): return ctx[0] / (ret*2)
def _exp2_jvp(ctx, ret): return ctx[0] * ret * math.log(2)
def _log2_jvp(ctx, ret): return ctx[0] / (ret.src[0] * math.log(2))
def _sin_jvp(ctx, ret): return ctx[0] * (math.pi/2 - ret.src[0]).sin()
def _add_jvp(ctx, ret): return _add_tangents(*ctx)
def _sub_jvp(ctx, ret): return _add_tangents(ctx[0], None if ctx[1] is None else -ctx[1])
def _mul_jvp(ctx, ret): return _add_tangents(_scale_tangent(ctx[0], ret.src[1]), _scale_tangent(ctx[1], ret.src[0]))
def _fdiv_jvp(ctx, ret): return _add_tangents(ctx[0], _scale_tangent(ctx[1], -ret)) / ret.src[1]
def _max_jvp(ctx, ret):
  # the same split on ties as gradient.py
  (x, y), (tx, ty) = ret.src, (_instantiate_zeros(t, ret) for t in ctx)
  return (x > y).where(tx, (x < y).where(ty, (tx + ty) * 0.5))
def _pow_jvp(ctx, ret):
  # the partial derivatives of gradient.py, including its choices at b == 0
  b, e = ret.src
  return _add_tangents(None if ctx[0] is None else ctx[0] * (b.eq(0)&e.eq(0)).where(e, e*b.pow(e-1)),
    None if ctx[1] is None else ctx[1] * b.eq(0).where((e<0).where(ret.const_like(-math.inf), 0), ret*b.log2()*math.log(2.0)))
def _where_jvp(ctx, ret):
  # the condition has no tangent: select the tangents with it
  if ctx[1] is None and ctx[2] is None: return None
  return ret.src[0].where(_instantiate_zeros(ctx[1], ret), _instantiate_zeros(ctx[2], ret))
def _reduce_axis_jvp(ctx, ret): return reduce_tangent(ctx[0], ret, ret.arg[0], lambda u, op=Ops.ADD: u.r(op, ret.arg[1]))
def _reduce_jvp(ctx, ret):
  # 0.14: REDUCE reduces its leading arg[1] axes. 0.12: a REDUCE over RANGEs, what compute_gradient sums a per-example gradient with at
  # the end of a vmap scope
  if isinstance(ret.arg, tuple): return reduce_tangent(ctx[0], ret, ret.arg[0], lambda u, op=Ops.ADD: UOp(Ops.REDUCE, u.dtype, (u,), (op, ret.arg[1])))
  return reduce_tangent(ctx[0], ret, ret.arg, lambda u, op=Ops.ADD: u.reduce(*ret.src[1:], arg=op))
def _stack_jvp(ctx, ret): return UOp(ret.op, ret.dtype, tuple(_instantiate_zeros(t, s) for t,s in zip(ctx, ret.src)), ret.arg)
# 0.14's multi-device ops: UNSHARD (a value and its DEVICE ranges), MSELECT (one device's), MSTACK (per-device values, like STACK) and a
# sum over devices are linear
def _allreduce_jvp(ctx, ret): return _linear_jvp(ctx, ret) if ret.arg[0] is Ops.ADD else _no_tangent(ret.op, f"allreduce {ret.arg[0]}")
# 0.14's assign (clone, `+=` on a Tensor made in fn) is AFTER(target, STORE(target, value)): the value's tangent overwrites the target's
def _store_jvp(ctx, ret): return ctx[1]
def _after_jvp(ctx, ret): return ctx[1] if len(ret.src) == 2 and ret.src[1].op in (Ops.STORE, Ops.CALL) else ctx[0]
# a custom kernel (AFTER(output buffer, CALL)) is differentiable when whoever made it left a rule for its CALL (scan's one kernel)
def _call_jvp(ctx, ret):
  if (rule:=TRANSFORMS.call_tangents.get(ret)) is None: _no_tangent(ret.op, "a kernel call that left no tangent rule")
  return rule(ctx, ret)
# an assign is its value (clone, `+=` on a Tensor made in fn): the target's old tangent is overwritten with the value's
def _assign_jvp(ctx, ret): return ctx[1]
def _multi_jvp(ctx, ret): return UOp(Ops.MULTI, ret.dtype, tuple(_instantiate_zeros(t, s) for t,s in zip(ctx, ret.src)), ret.arg)

def _ops(*names:str) -> list[Ops]:
  """the ops of these names this line has (0.12 and 0.14 name some differently: IDIV/MOD are CDIV/CMOD/FLOORDIV/FLOORMOD on 0.14, which
  has no REDUCE_AXIS, ASSIGN or MULTI and adds STACK and MULACC to the tensor graph)"""
  return [op for n in names if (op:=getattr(Ops, n, None)) is not None]

# the table, as JAX's primitive_jvps: the tangent rule of each op
primitive_jvps: dict[Ops, Callable[[tuple[UOp|None, ...], UOp], UOp|None]] = {
  **dict.fromkeys(_ops("CMPLT", "CMPNE", "CMPEQ", "IDIV", "MOD", "CDIV", "CMOD", "FLOORDIV", "FLOORMOD", "AND", "OR", "XOR", "SHL", "SHR",
                       "THREEFRY", "TRUNC", "DETACH", "BITCAST"), _zero_jvp),
  **dict.fromkeys((*GroupOp.Movement, *GroupOp.VMap, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.COPY), _linear_jvp),
  Ops.CAST: _cast_jvp,
  Ops.NEG: _neg_jvp, Ops.RECIPROCAL: _reciprocal_jvp, Ops.SQRT: _sqrt_jvp, Ops.EXP2: _exp2_jvp, Ops.LOG2: _log2_jvp, Ops.SIN: _sin_jvp,
  Ops.ADD: _add_jvp, Ops.SUB: _sub_jvp, Ops.MUL: _mul_jvp, Ops.FDIV: _fdiv_jvp, Ops.MAX: _max_jvp, Ops.POW: _pow_jvp, Ops.WHERE: _where_jvp,
  Ops.REDUCE: _reduce_jvp,
  **{op: rule for names, rule in ((("REDUCE_AXIS",), _reduce_axis_jvp), (("ASSIGN",), _assign_jvp), (("MULTI",), _multi_jvp),
                                  (("STACK", "MSTACK"), _stack_jvp), (("UNSHARD", "MSELECT"), _linear_jvp), (("ALLREDUCE",), _allreduce_jvp))
                            for op in _ops(*names)},
  **({Ops.STORE: _store_jvp, Ops.AFTER: _after_jvp, Ops.CALL: _call_jvp} if not LINE_012 else {}),
}

def tangent_of(u:UOp, src_tangents:tuple[UOp|None, ...]) -> UOp|None:
  """the tangent of u from those of its srcs (None: zero), by u's rule in primitive_jvps"""
  if (rule:=primitive_jvps.get(u.op)) is None:
    raise NotImplementedError(f"no tangent rule for {u.op}: it depends on an input with a nonzero tangent\n\nin {str(u)[:1000]}...")
  # 0.14's elementwise ops broadcast their srcs (aligned on the right): a tangent of only a smaller src is broadcast to the op's shape
  if (t:=rule(src_tangents, u)) is not None and u.op in GroupOp.Elementwise and t.shape != u.shape: return t.expand(u.shape)
  return t

def jvp_uops(outputs:list[UOp], inputs:list[UOp], tangents:list[UOp|None]) -> list[UOp]:
  """
  The tangents of `outputs` when the nodes `inputs` move along `tangents` (None: not at all): forward mode over the graph. An input is
  a node of the graph, matched by identity, and its tangent replaces whatever tangent it would get from nodes below it. An input given
  twice moves by the sum of its tangents. An output that doesn't depend on a moving input gets a tangent of zeros.
  """
  if len(inputs) != len(tangents): raise ValueError(f"jvp got {len(inputs)} inputs but {len(tangents)} tangents")
  seeds: dict[UOp, UOp] = {}
  for x,t in zip(inputs, tangents):
    if t is not None: seeds[x] = seeds[x] + t if x in seeds else t
  tangent: dict[UOp, UOp|None] = dict(seeds)
  memo: dict = {}
  def walk(us:list[UOp]) -> list[UOp|None]:
    # forward in topological order: a node has a tangent when one of its srcs has one, the rest of the graph is skipped. A value with a
    # rule of its own (TRANSFORMS.value_tangents) is asked first: its graph need not reach the inputs (a batched kernel in a vmap scope)
    for u in UOp.sink(*us).toposort(lambda u: u not in seeds):
      if u in tangent: continue
      if (rule:=TRANSFORMS.value_tangents.get(u)) is not None: tangent[u] = rule(walk, memo)
      elif u.op is not Ops.SINK and (src_tangents:=tuple(tangent.get(s) for s in u.src)) != (None,)*len(u.src):
        tangent[u] = tangent_of(u, src_tangents)
    return [tangent.get(u) for u in us]
  walk(outputs)
  return [o.const_like(0) if (t:=tangent.get(o)) is None else t for o in outputs]

# *** Tensors ***

def _check_tangents(primals:Sequence[Tensor], tangents:Sequence[Tensor|None], what:str):
  """a tangent (or None, zero) for every primal, a Tensor like its primal, which is a float Tensor"""
  if len(primals) != len(tangents): raise ValueError(f"{what} got {len(primals)} primals but {len(tangents)} tangents")
  for i,(x,t) in enumerate(zip(primals, tangents)):
    if not isinstance(x, Tensor): raise TypeError(f"{what} primal {i} must be a Tensor, got {type(x).__name__}")
    if t is None: continue
    if not isinstance(t, Tensor): raise TypeError(f"{what} tangent {i} must be a Tensor (or None for zero), got {type(t).__name__}")
    if t.shape != x.shape: raise ValueError(f"{what} tangent {i} has shape {t.shape}, but its primal has shape {x.shape}")
    # a dtype that doesn't match is a TypeError, a shape a ValueError, as in JAX
    if not dtypes.is_float(x.dtype): raise TypeError(f"{what} primal {i} has dtype {x.dtype}: only floating point primals have tangents")
    if t.dtype != x.dtype: raise TypeError(f"{what} tangent {i} has dtype {t.dtype}, but its primal has dtype {x.dtype}")
    if t.device != x.device and t.device is not None: raise ValueError(f"{what} tangent {i} is on {t.device}, but its primal is on {x.device}")

def jvp_tensors(outputs:Sequence[Tensor], inputs:Sequence[Tensor], tangents:Sequence[Tensor|None]) -> list[Tensor]:
  """
  The tangents of `outputs` when `inputs` move along `tangents` (None: zero): `inputs` are Tensors the outputs were computed from
  (realized or not), matched by their UOp. Nothing is realized.

  ```python exec="true" source="above" session="tensor" result="python"
  from tinygrad.jvp import jvp_tensors
  x = Tensor([1.0, 2.0, 3.0])
  y = (x * x).sum()
  print(jvp_tensors((y,), (x,), (Tensor([1.0, 0.0, 0.0]),))[0].item())  # dy/dx0 = 2*x0
  ```
  """
  _check_tangents(inputs, tangents, "jvp")
  ts = jvp_uops([o.uop for o in outputs], [x.uop for x in inputs], [None if t is None else t.uop for t in tangents])
  return [Tensor(t, device=o.device) for o,t in zip(outputs, ts)]

# how many traces are open now: a fresh copy on 0.14 is named by the depth it is made at and its position among its trace's arguments
_open_traces: list[None] = []

def fresh_copy(x:Tensor, i:int) -> Tensor:
  """x times a 1 nothing else has: a Tensor of x's value whose UOp nothing else has, so a transform can tell the argument it
  differentiates from the same Tensor closed over (JAX's tracers). The scheduler folds the multiply away. On 0.12 the 1 is a unique
  const, which keys like an input buffer in the schedule cache; 0.14 has no unique consts, there it is a Variable fixed at 1 named by
  where the copy is made (this trace's depth, the copy's position), so repeat calls build the same graph and hit the cache all the
  same, and the transform puts x back in what it returns (`untraced`), so no later call's copy can meet it"""
  if LINE_012: return x * Tensor(1, device=x.device, dtype=x.dtype, _force_unique=True)
  one = UOp.variable(f"jvp_copy_{len(_open_traces)}_{i}", 1, 1)
  return x._apply_uop(lambda u: u * one.cast(u.dtype))

def _one_of(c:Tensor) -> UOp:
  """the 1 a fresh copy is x times: the last unique CONST of its graph (0.12, one's srcs come after all of x's), or its Variable (0.14)"""
  if LINE_012: return [u for u in c.uop.toposort() if u.op is Ops.CONST and any(s.op is Ops.UNIQUE for s in u.src)][-1]
  return c.uop.src[1].src[0]

def untraced(tree, copies:list[Tensor]):
  """tree's Tensors with each fresh copy in `copies` replaced by its Tensor (0.14; on 0.12 the unique consts stay, folded later)"""
  if LINE_012 or not copies: return tree
  back = {c.uop: c.uop.src[0] for c in copies}
  return tree_map_skip_none(lambda t: Tensor(t.uop.substitute(back), device=t.device) if isinstance(t, Tensor) else t, tree)

@contextlib.contextmanager
def tracing(copies:list[Tensor]):
  """while fn runs on fresh copies: a Tensor computed from one is traced (TRANSFORMS.tracers), realize leaves it lazy and setitem
  into it is functional, so fn's `.realize()` or `y[i] = v` doesn't cut its outputs from the arguments"""
  ones = {_one_of(c) for c in copies} - TRANSFORMS.tracers
  TRANSFORMS.tracers |= ones
  _open_traces.append(None)
  try: yield
  finally:
    TRANSFORMS.tracers -= ones
    _open_traces.pop()

def _constant_as_tensor(y):
  """a Python number, numpy array or numpy scalar fn returned as a Tensor (JAX's outputs are arrays), anything else as it is"""
  return Tensor(y) if isinstance(y:=_from_numpy(y), (bool, int, float)) else y

def jvp(fn:Callable, primals:tuple|list, tangents:tuple|list, has_aux:bool=False) -> tuple:
  """
  JAX's `jvp`: `fn(*primals)` and its directional derivative along `tangents`, as `(primals_out, tangents_out)`. `fn` takes Tensors
  and returns a Tensor or a tuple/list/dict of them (nested); `tangents_out` has the same structure. Nothing is realized. With `has_aux`,
  fn returns `(output, aux)` and jvp `(primals_out, tangents_out, aux)`, aux not differentiated (JAX's has_aux).

  As in JAX, `fn` gets fresh copies of the primals: a Tensor it closes over is a constant, even when it is (or was computed from) a
  primal, and the same Tensor may be passed as two primals (each moves along its own tangent).

  ```python exec="true" source="above" session="tensor" result="python"
  from tinygrad.jvp import jvp
  y, dy = jvp(lambda x: x.sin(), (Tensor([0.0, 1.0]),), (Tensor([1.0, 1.0]),))
  print(y.numpy(), dy.numpy())  # sin(x), cos(x)
  ```
  """
  if not callable(fn): raise TypeError(f"jvp expects a function, got {fn!r}")
  if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
    raise TypeError(f"jvp primals and tangents must be tuples or lists, got {type(primals).__name__} and {type(tangents).__name__}")
  # an argument may be a pytree (tuples, lists, dicts) of Tensors: its tangent has the same structure (a TypeError, as JAX's)
  if len(primals) != len(tangents):
    raise TypeError(f"jvp got {len(primals)} primals but {len(tangents)} tangents: primals and tangents must have the same structure")
  if (bad:=next((i for i,(x,t) in enumerate(zip(primals, tangents)) if not same_structure(x, t)), None)) is not None:
    raise TypeError(f"jvp primal {bad} and its tangent have different structures: {tree_structure(primals[bad])} and "
                    f"{tree_structure(tangents[bad])}")
  # a dict's tangents pair with its primals by key, whatever order each was written in (as JAX's)
  flat_primals, flat_tangents = tree_leaves(list(primals)), tree_leaves_as(list(tangents), list(primals))
  _check_tangents(flat_primals, flat_tangents, "jvp")
  fresh = [x if t is None else fresh_copy(x, i) for i,(x,t) in enumerate(zip(flat_primals, flat_tangents))]
  with tracing([f for f,t in zip(fresh, flat_tangents) if t is not None]): out = fn(*tree_unflatten(list(primals), fresh))
  if has_aux:
    if not isinstance(out, (tuple, list)) or len(out) != 2: raise TypeError("jvp: with has_aux=True fn must return a pair (output, aux)")
    out, aux = out
  # a Python number or numpy value in the output is a constant, as in JAX: a Tensor whose tangent is zero
  out = tree_map_skip_none(_constant_as_tensor, out)
  # None in the output is an empty subtree, as in JAX: its tangent is None
  outs = [l for l in tree_leaves(out) if l is not None]
  if bad:=[l for l in outs if not isinstance(l, Tensor)]:
    raise TypeError(f"jvp: fn must return a Tensor or a tuple/list/dict of Tensors (or None), got a {type(bad[0]).__name__}")
  tangents_out = iter(jvp_tensors(outs, fresh, flat_tangents))
  copies = [f for f,t in zip(fresh, flat_tangents) if t is not None]
  device = next((x.device for x in flat_primals if x.device is not None), Device.DEFAULT)
  # a constant output or tangent (a zero one) goes on the primals' device (transform_state.on_device)
  ret = tuple(tree_map_skip_none(lambda t: on_device(t, device), untraced(tree, copies))
              for tree in (out, tree_map_skip_none(lambda _: next(tangents_out), out)))
  return ret + (untraced(aux, copies),) if has_aux else ret
