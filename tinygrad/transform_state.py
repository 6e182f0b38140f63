"""The function transforms' state: what vmap (tinygrad/vmap.py) and jvp (tinygrad/jvp.py) tell the Tensor front end while a transformed
function runs, and the ids of the RANGEs the transforms make. One per process, TRANSFORMS: a transform sets its part while fn runs and
puts the old value back after, also when fn raises; tinygrad/tensor.py and tinygrad/gradient.py read it (their hooks, in the vmap topic
patches)."""
from __future__ import annotations
import itertools, weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from tinygrad.uop.ops import UOp, Ops, AxisType, sint
from tinygrad.dtype import dtypes
from tinygrad.fork_line import LINE_012

# the dtype of RANGEs and of a varg's kept-axis CONST(0): dtypes.index on the 0.12 line, dtypes.weakint (its successor) on 0.14
INDEX = dtypes.index if LINE_012 else dtypes.weakint
# the varg entry of a kept (not mapped) axis (built directly: UOp.const takes (dtype, value) on 0.12 and (value, dtype) on 0.14)
KEPT = UOp(Ops.CONST, INDEX, arg=0, src=())

@dataclass
class TransformState:
  # the open vmap scopes, outermost first (vmap's _Scope)
  vmap_scopes: list[Any] = field(default_factory=list)
  # set by vmap while fn runs: Tensor.rand asks it first, so vmap's randomness mode can refuse or batch the draw
  rand_hook: Callable[..., Any]|None = None
  # set by vmap too: told of a Tensor outside a scope that takes a per-example value (assign/setitem with no buffer), so vmap can refuse
  # it when it outlives the function (closed over, not made inside it)
  took_example_hook: Callable[[Any, Any], None]|None = None
  # set by jvp while jvp/jacrev run fn: the unique 1s that fresh copies of the differentiated arguments are multiplied by. A value computed
  # from one is traced: realize leaves it lazy (its buffer would cut it off from the arguments: zero derivatives) and setitem into it is
  # functional, as in a vmap scope
  tracers: set[UOp] = field(default_factory=set)
  # every RANGE a transform makes (vmap's scopes, a backward pass's own chunk loops, vmap_range) gets an id of its own, so nested and
  # repeated scopes never alias. Negative, like upstream's outer world ranges, and far from the ids of a RANGE built by hand
  # (UOp.range(n, -1)). The schedule cache renames RANGEs before it keys a graph, so fresh ids on every call don't cost a re-schedule
  # a value in a vmap scope whose forward is a kernel no gradient can see through per example (scan's batched kernel) -> the function
  # that builds the same value as a graph that can: a gradient in the scope differentiates that one instead (tinygrad/mixin/gradient.py)
  recompute: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
  # a custom kernel's CALL that forward mode can see through (scan's kernel) -> its tangent rule: the tangents of the CALL's srcs (None:
  # zero) -> the tangent of the kernel's output buffer, more graph (tinygrad/jvp.py's CALL rule asks here)
  call_tangents: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
  # a value whose graph forward mode can't follow back to its inputs (scan's batched kernel, entered again in a vmap scope) -> its tangent
  # rule `rule(tangents_of, memo)`: tangents_of(uops) the tangents of any values in the same pass, memo a dict for that pass
  value_tangents: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
  range_ids: Iterator[int] = field(default_factory=lambda: itertools.count(-(1 << 20), -1))

  def fresh_range(self, size:sint, axis_type:AxisType=AxisType.LOOP) -> UOp: return UOp.range(size, next(self.range_ids), axis_type)
  def traced(self, u:UOp) -> bool: return bool(self.tracers) and (u in self.tracers or not self.tracers.isdisjoint(u.backward_slice))
  def took_example(self, t, v):
    """tell vmap that t, outside a scope, takes the per-example value v; returns t"""
    if self.took_example_hook is not None: self.took_example_hook(t, v)
    return t

TRANSFORMS = TransformState()

# the ops whose UOp.device isn't their first src's with a device (0.14's UOp.device)
_OWN_DEVICE = {Ops.PARAM, Ops.STAGE, Ops.AFTER, Ops.MSELECT, Ops.MSTACK, Ops.BUFFER, Ops.COPY, Ops.ALLREDUCE} if not LINE_012 else set()
_DEVICE_KEPT = UOp.__dict__["device"].nm if not LINE_012 else ""
def first_device(u:UOp) -> str|tuple[str, ...]|None:
  """u.device on 0.14 (a node's is its first src's that has one), found depth first down to the first such node, not for every node of
  the graph as the recursive property keeps it (a batch an eager call built anew: 0.06 ms of bench W6's call). Kept as u's: realize asks it
  of u again (UOp.is_virtual)"""
  if (ret:=u.__dict__.get(_DEVICE_KEPT, u)) is not u: return ret
  stack, seen, ret = [u], set(), None
  while stack:
    x = stack.pop()
    if (d:=x.__dict__.get(_DEVICE_KEPT, x)) is not x or x.op in _OWN_DEVICE:
      if (ret:=x.device if d is x else d) is not None: break
    elif x not in seen:
      seen.add(x)
      stack.extend(reversed(x.src))
  u.__dict__[_DEVICE_KEPT] = ret
  return ret

def on_device(t, device:str|tuple[str, ...], axis:int|None=None):
  """t as a transform hands it to its caller. On 0.14 a Tensor made of constants alone has no device (CONSTs have none) and realizes on
  the CPU (Tensor._buffer), which a GPU machine may not compile for: a constant output (a number fn returned, a zero tangent, a
  Jacobian's unrelated block) goes on the inputs' `device` as Tensor.full puts a constant on one. With a batch sharded over a tuple of
  devices it is sharded on its batch `axis` (None: replicated), also on 0.12, whose constants are on the default device. Anything else,
  and anything inside another transform (whose kernels the constant is part of), is returned as it is"""
  if type(t).__name__ != "Tensor" or TRANSFORMS.vmap_scopes or TRANSFORMS.tracers: return t
  if (t.uop.device if LINE_012 else first_device(t.uop)) is None:
    if isinstance(device, tuple) and axis is not None: return type(t)(t.uop.clone(device=device[0])).shard(device, axis % t.ndim)
    return type(t)(t.uop.clone(device=device))
  # 0.12: a constant is on the default device, a batch sharded over several devices puts it on them
  if isinstance(device, str) or not isinstance(t.device, str) or any(u.op is Ops.BUFFER for u in t.uop.toposort()): return t
  return t.shard(device, axis % t.ndim) if axis is not None else t.to(device)
