"""Forward-mode AD over the UOp graph: the tangent of every node from the tangents of its srcs, one rule per op (the dual of gradient.py).

`jvp_uops` (UOps) and `jvp_tensors` (Tensors) push tangents given for some nodes of a graph forward to its outputs; `jvp(fn, primals,
tangents)` is the JAX-style transform. Inputs are matched by identity of their UOp, so they may be unrealized graphs, and nothing is
realized: a tangent is just more graph, which composes with vmap (a tangent inside a vmap scope stays inside it) and with gradient.
"""
from __future__ import annotations
import contextlib, math
from typing import Any, Callable, Sequence
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, PatternMatcher, UPat, Ops, GroupOp
from tinygrad.gradient import prod_of_others
from tinygrad.tensor import Tensor
import tinygrad.tensor
from tinygrad.vmap import _leaves, _unflatten

# a zero tangent is None: rules skip the terms it would give, so the parts of a graph the inputs don't reach build no tangent graph
def _add(*ts:UOp|None) -> UOp|None:
  return None if not (nz:=[t for t in ts if t is not None]) else nz[0] if len(nz) == 1 else sum(nz[1:], nz[0])
def _mul(t:UOp|None, f:UOp) -> UOp|None: return None if t is None else t * f
def _zero(t:UOp|None, like:UOp) -> UOp: return like.const_like(0) if t is None else t
def _same(ret:UOp, t:UOp|None) -> UOp|None:
  """ret's op with ret's arg and other srcs, applied to the tangent t of its src[0] (movement ops, the vmap bracket, contiguous, copy)"""
  return None if t is None else UOp(ret.op, t.dtype, (t,)+ret.src[1:], ret.arg)

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

# ctx is the tuple of the tangents of ret's srcs (None: zero); a rule is only called when one of them is nonzero and returns ret's tangent
pm_tangent = PatternMatcher([
  # piecewise constant or integer/bool valued: zero tangent
  (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY, Ops.TRUNC)), lambda: None),
  (UPat(Ops.DETACH), lambda: None),
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: ctx[0].cast(ret.dtype) if dtypes.is_float(ret.dtype) else None),
  (UPat(Ops.BITCAST, name="ret"), lambda ret: _no_tangent(ret.op, "reinterpreting the bits of a value with a nonzero tangent is not differentiable")),
  (UPat(Ops.NEG), lambda ctx: -ctx[0]),
  (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: -ctx[0] * ret * ret),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: ctx[0] / (ret*2)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: ctx[0] * ret * math.log(2)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: ctx[0] / (ret.src[0] * math.log(2))),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: ctx[0] * (math.pi/2 - ret.src[0]).sin()),
  (UPat(Ops.ADD), lambda ctx: _add(*ctx)),
  (UPat(Ops.SUB), lambda ctx: _add(ctx[0], None if ctx[1] is None else -ctx[1])),
  (UPat(Ops.MUL, src=(UPat.var("x"), UPat.var("y"))), lambda ctx, x, y: _add(_mul(ctx[0], y), _mul(ctx[1], x))),
  (UPat(Ops.FDIV, name="ret", src=(UPat.var("x"), UPat.var("y"))), lambda ctx, ret, x, y: _add(ctx[0], _mul(ctx[1], -ret)) / y),
  # the same split on ties as gradient.py
  (UPat(Ops.MAX, name="ret", src=(UPat.var("x"), UPat.var("y"))), lambda ctx, ret, x, y:
    (x > y).where(_zero(ctx[0], ret), (x < y).where(_zero(ctx[1], ret), (_zero(ctx[0], ret) + _zero(ctx[1], ret)) * 0.5))),
  # the partial derivatives of gradient.py, including its choices at b == 0
  (UPat(Ops.POW, name="ret", src=(UPat.var("b"), UPat.var("e"))), lambda ctx, ret, b, e: _add(
    None if ctx[0] is None else ctx[0] * (b.eq(0)&e.eq(0)).where(e, e*b.pow(e-1)),
    None if ctx[1] is None else ctx[1] * b.eq(0).where((e<0).where(ret.const_like(-math.inf), 0), ret*b.log2()*math.log(2.0)))),
  # the condition has no tangent: select the tangents with it
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: None if ctx[1] is None and ctx[2] is None else \
    ret.src[0].where(_zero(ctx[1], ret), _zero(ctx[2], ret))),
  (UPat(Ops.REDUCE_AXIS, name="ret"), lambda ctx, ret: reduce_tangent(ctx[0], ret, ret.arg[0], lambda u, op=Ops.ADD: u.r(op, ret.arg[1]))),
  # REDUCE over RANGEs: what compute_gradient sums a per-example gradient with at the end of a vmap scope
  (UPat(Ops.REDUCE, name="ret"), lambda ctx, ret: reduce_tangent(ctx[0], ret, ret.arg, lambda u, op=Ops.ADD: u.reduce(*ret.src[1:], arg=op))),
  # linear and structural ops: the same op on the tangent. VMAPIN/VMAPOUT keep their vargs: the tangent of a value inside a scope is
  # inside the same scope
  (UPat(GroupOp.Movement, name="ret"), lambda ctx, ret: _same(ret, ctx[0])),
  (UPat(GroupOp.VMap, name="ret"), lambda ctx, ret: _same(ret, ctx[0])),
  (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD), name="ret"), lambda ctx, ret: _same(ret, ctx[0])),
  (UPat(Ops.COPY, name="ret"), lambda ctx, ret: _same(ret, ctx[0])),
  # an assign is its value (clone, `+=` on a Tensor made in fn): the target's old tangent is overwritten with the value's
  (UPat(Ops.ASSIGN), lambda ctx: ctx[1]),
  (UPat(Ops.MULTI, name="ret"), lambda ctx, ret: UOp(Ops.MULTI, ret.dtype, tuple(_zero(t, s) for t,s in zip(ctx, ret.src)), ret.arg)),
])
# every rule matches on the op alone, one rule per op: tangent_of calls it directly (see there)
assert all(len(v) == 1 for v in pm_tangent.pdict.values()), "pm_tangent needs exactly one rule per op"

def tangent_of(u:UOp, src_tangents:tuple[UOp|None, ...]) -> UOp|None:
  """the tangent of u from those of its srcs (None: zero), by u's rule in pm_tangent"""
  # not pm_tangent.rewrite: that reads None (a zero tangent) and a tangent that is u itself (jvp(f, (x,), (x,))) as "no rule matched"
  if (rules:=pm_tangent.pdict.get(u.op)) is None:
    raise NotImplementedError(f"no tangent rule for {u.op}: it depends on an input with a nonzero tangent\n\nin {str(u)[:1000]}...")
  return rules[0][1](u, src_tangents)

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
  tans: dict[UOp, UOp|None] = dict(seeds)
  # forward in topological order: a node has a tangent when one of its srcs has one, the rest of the graph is skipped
  for u in UOp.sink(*outputs).toposort(lambda u: u not in seeds):
    st = tuple(tans.get(s) for s in u.src)
    if u.op is not Ops.SINK and any(t is not None for t in st): tans[u] = tangent_of(u, st)
  return [o.const_like(0) if (t:=tans.get(o)) is None else t for o in outputs]

# *** Tensors ***

def _structure(tree) -> str:
  return type(tree).__name__ + ("{" + ", ".join(f"{k!r}: {_structure(v)}" for k,v in tree.items()) + "}" if isinstance(tree, dict) else
                                "(" + ", ".join(_structure(v) for v in tree) + ")" if isinstance(tree, (tuple, list)) else "")
def _same_structure(a, b) -> bool:
  if isinstance(a, dict) or isinstance(b, dict):
    return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(_same_structure(a[k], b[k]) for k in a)
  if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
    return isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(_same_structure, a, b))
  return b is None or not isinstance(b, (tuple, list, dict))

def _check(primals:Sequence[Tensor], tangents:Sequence[Tensor|None], what:str):
  if len(primals) != len(tangents): raise ValueError(f"{what} got {len(primals)} primals but {len(tangents)} tangents")
  for i,(x,t) in enumerate(zip(primals, tangents)):
    if not isinstance(x, Tensor): raise TypeError(f"{what} primal {i} must be a Tensor, got {type(x).__name__}")
    if t is None: continue
    if not isinstance(t, Tensor): raise TypeError(f"{what} tangent {i} must be a Tensor (or None for zero), got {type(t).__name__}")
    if t.shape != x.shape: raise ValueError(f"{what} tangent {i} has shape {t.shape}, but its primal has shape {x.shape}")
    if not dtypes.is_float(x.dtype): raise ValueError(f"{what} primal {i} has dtype {x.dtype}: only floating point primals have tangents")
    if t.dtype != x.dtype: raise ValueError(f"{what} tangent {i} has dtype {t.dtype}, but its primal has dtype {x.dtype}")
    if t.device != x.device: raise ValueError(f"{what} tangent {i} is on {t.device}, but its primal is on {x.device}")

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
  _check(inputs, tangents, "jvp")
  ts = jvp_uops([o.uop for o in outputs], [x.uop for x in inputs], [None if t is None else t.uop for t in tangents])
  return [Tensor(t, device=o.device) for o,t in zip(outputs, ts)]

def fresh_copy(x:Tensor) -> Tensor:
  """x times a unique 1: a Tensor of x's value whose UOp nothing else has, so a transform can tell the argument it differentiates from
  the same Tensor closed over (JAX's tracers). The scheduler folds the multiply away, and the unique const keys like an input buffer
  in the schedule cache, so repeat calls still hit it."""
  return x * Tensor(1, device=x.device, dtype=x.dtype, _force_unique=True)

@contextlib.contextmanager
def tracing(copies:list[Tensor]):
  """while fn runs on fresh copies: a Tensor computed from one is traced (tinygrad.tensor.tracers), realize leaves it lazy and setitem
  into it is functional, so fn's `.realize()` or `y[i] = v` doesn't cut its outputs from the arguments"""
  # each copy's unique 1: the last unique CONST of its graph (x * one: one's srcs come after all of x's)
  ones = {[u for u in c.uop.toposort() if u.op is Ops.CONST and any(s.op is Ops.UNIQUE for s in u.src)][-1] for c in copies}
  ones -= tinygrad.tensor.tracers
  tinygrad.tensor.tracers |= ones
  try: yield
  finally: tinygrad.tensor.tracers -= ones

def jvp(fn:Callable, primals:tuple|list, tangents:tuple|list) -> tuple[Any, Any]:
  """
  JAX's `jvp`: `fn(*primals)` and its directional derivative along `tangents`, as `(primals_out, tangents_out)`. `fn` takes Tensors
  and returns a Tensor or a tuple/list/dict of them (nested); `tangents_out` has the same structure. Nothing is realized.

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
  # an argument may be a pytree (tuples, lists, dicts) of Tensors: its tangent has the same structure
  if len(primals) == len(tangents) and (bad:=next((i for i,(x,t) in enumerate(zip(primals, tangents)) if not _same_structure(x, t)), None)) \
      is not None:
    raise ValueError(f"jvp primal {bad} and its tangent have different structures: {_structure(primals[bad])} and {_structure(tangents[bad])}")
  flat_primals, flat_tangents = _leaves(list(primals)), _leaves(list(tangents))
  _check(flat_primals, flat_tangents, "jvp")
  fresh = [x if t is None else fresh_copy(x) for x,t in zip(flat_primals, flat_tangents)]
  with tracing([f for f,t in zip(fresh, flat_tangents) if t is not None]): out = fn(*_unflatten(list(primals), fresh))
  # None in the output is an empty subtree, as in JAX: its tangent is None
  leaves = _leaves(out)
  if bad:=[l for l in leaves if l is not None and not isinstance(l, Tensor)]:
    raise TypeError(f"jvp: fn must return a Tensor or a tuple/list/dict of Tensors (or None), got a {type(bad[0]).__name__}")
  tangents_out = iter(jvp_tensors([l for l in leaves if l is not None], fresh, flat_tangents))
  return out, _unflatten(out, [None if l is None else next(tangents_out) for l in leaves])
