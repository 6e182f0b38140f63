# line: 0.14.0 only (the default line: tinygrad/__init__.py exports it in the vmap-autodiff topic; the frozen 0.12.0 line has no scan)
"""scan: a recursion over a leading axis, with jax.lax.scan's semantics. `scan(f, init, xs)` runs `carry, y = f(carry, x)` for each x
in xs and returns the last carry and the ys stacked on a new axis 0.

`scan` checks and flattens (pytrees -> lists of leaves, tinygrad/pytree.py) and hands one lowering a `step` that works on leaf lists:
`lowering(step, init_leaves, xs_leaves, length, reverse) -> (carry_leaves, ys_leaves)`. The lowering here, `_unrolled`, traces f once
per step into one Tensor graph, so vmap, jvp, the Jacobians, gradients, TinyJit and sharding compose with it as with any graph; a
fused lowering (one kernel with a LOOP range, tinygrad/scan_kernel.py) is asked first, and returns None when it can't.
"""
from __future__ import annotations
import functools, math
from typing import Any, Callable
from tinygrad.tensor import Tensor
from tinygrad.dtype import DType, dtypes, least_upper_dtype
from tinygrad.device import Device
from tinygrad.uop.ops import UOp
from tinygrad.pytree import tree_map, tree_structure, same_structure
from tinygrad.transform_state import TRANSFORMS, KEPT, on_device
from tinygrad.batching import open_vmap_ranges
from tinygrad.scan_kernel import scan_kernel as _fused, scan_tangents
from tinygrad.vmap import _from_numpy, vmap


def _scope_ranges(leaves:list[Tensor]) -> tuple[UOp, ...]:
  """the RANGEs of the vmap scopes the leaves are in, outermost first (ranges are numbered down as scopes open): the fused kernel runs
  the batch of all of them, flattened"""
  return tuple(sorted({r for t in leaves for r in open_vmap_ranges(t.uop)}, key=lambda r: r.arg, reverse=True))

def _batched_fused(step:Callable, init:list[Tensor], xs:list[Tensor], length:int, reverse:bool, rs:tuple[UOp, ...]) -> tuple[list[Tensor], list[Tensor]]|None:
  """a scan in the vmap scopes of RANGEs rs as ONE kernel over their batch (parallel, the steps a loop in it): each leaf's batch
  (vmapout, the batch axes in front, flattened to one; a leaf outside one of the scopes broadcast to its axis, a leaf outside all of
  them read as it is by every example) into the batched kernel, whose results enter the scopes again, one example each (a VMAPIN of a
  batch is batched as that batch itself: the scope's VMAPOUT gives the kernel's output). A gradient inside the scope, which
  differentiates one example, gets the unrolled lowering in their place (TRANSFORMS.recompute)"""
  Bs = tuple(r.vmax + 1 for r in rs)
  B = math.prod(Bs)
  def batch(t:Tensor) -> Tensor:
    if not (mine:=tuple(r for r in rs if r in t.uop.ranges)): return t   # every example's: the kernel reads it as it is (`batched`)
    t = t.vmapout(mine + (KEPT,)*t.ndim)
    t = t.reshape(tuple(b if r in mine else 1 for r, b in zip(rs, Bs)) + t.shape[len(mine):])
    return t.expand(Bs + t.shape[len(rs):]).reshape((B,) + t.shape[len(rs):])
  def vmapped_unrolled(i:list[Tensor], x:list[Tensor]): return vmap(lambda i, x: _unrolled(step, i, x, length, reverse))(i, x)
  def vmapped_lower(aug_step:Callable, i:list[Tensor], x:list[Tensor]): return vmap(lambda i, x: _lower(aug_step, i, x, length, reverse))(i, x)
  closed: list[UOp] = []   # what the step closes over: inputs of the kernel, whose tangents a jvp in the scope needs too
  if (fused:=_fused(step, [batch(t) for t in init], [batch(t) for t in xs], length, reverse, batch=B, backward=vmapped_unrolled,
                    lower=vmapped_lower, closed_out=closed, batched=[any(r in t.uop.ranges for r in rs) for t in init + xs])) is None:
    return None
  carry, ys = [[t.reshape(Bs + t.shape[1:]).vmapin(rs + (KEPT,)*(t.ndim-1)) for t in ts] for ts in fused]
  unrolled: list = []
  def recompute(i:int) -> UOp:
    if not unrolled: unrolled.extend(t.uop for ts in _unrolled(step, init, xs, length, reverse) for t in ts)
    return unrolled[i]
  for i, t in enumerate(carry + ys): TRANSFORMS.recompute[t.uop] = functools.partial(recompute, i)
  # forward mode in the scope (jvp, jacfwd of one example) can't follow the batched kernel back to this example's leaves: each result's
  # tangent is the scan of the step's jvp over the leaves' tangents, one kernel over the batch again
  if dtypes.is_float(init[0].dtype):
    def tangents(walk:Callable, memo:dict) -> list:
      if (key:=id(carry)) not in memo:
        ts, ni, nx = walk([t.uop for t in init + xs] + closed), len(init), len(xs)
        memo[key] = scan_tangents(step, init, xs, ts[:ni], ts[ni:ni+nx], lambda s, i, x: _lower(s, i, x, length, reverse), closed, ts[ni+nx:])
      return memo[key]
    for i, t in enumerate(carry + ys): TRANSFORMS.value_tangents[t.uop] = lambda walk, memo, i=i: None if (ts:=tangents(walk, memo)) is None else ts[i].uop
  return carry, ys

def _leaves(tree, root:str) -> tuple[list[str], list]:
  """the paths (like `carry[0]['w']`) and leaves of tree, depth first; None is an empty subtree (as in JAX) and is left out"""
  found: list = []
  tree_map(lambda leaf, _spec, path: found.append((path, leaf)), tree, None, root)
  return [p for p,leaf in found if leaf is not None], [leaf for _,leaf in found if leaf is not None]

def _unflatten(like, leaves:list):
  """a tree of like's structure holding `leaves` in place of its leaves that aren't None"""
  it = iter(leaves)
  return tree_map(lambda leaf, _spec, _path: None if leaf is None else next(it), like)

def _as_tensor(x, path:str, dtype:DType|None=None) -> Tensor:
  """a leaf as a Tensor: numpy arrays and scalars of their dtype, Python numbers weakly typed (or of `dtype`), as JAX takes them"""
  if isinstance(x:=_from_numpy(x), Tensor): return x
  if isinstance(x, (bool, int, float)): return Tensor(x, dtype=dtype)
  raise TypeError(f"scan: {path} is a {type(x).__name__}, not a Tensor, a numpy array or a Python number")

_UNSET = object()

def _aval(t:Tensor) -> str: return f"shape {t.shape} dtype {t.dtype}"

def _scan_length(paths:list[str], xs:list[Tensor], length) -> int:
  """the number of steps: the leading axis of every xs leaf, and `length` where given, must agree on it (JAX's errors)"""
  if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
    raise TypeError(f"scan: length must be a Python int, got {length!r}")
  if length is not None and length < 0: raise ValueError(f"scan: length must be non-negative, got {length}")
  if bad:=[p for p,x in zip(paths, xs) if x.ndim == 0]: raise ValueError(f"scan got value with no leading axis to scan over: {bad[0]}")
  if not xs:
    if length is None: raise ValueError("scan got no values to scan over and `length` not provided")
    return length
  if any(x.shape[0] != xs[0].shape[0] for x in xs):
    i = next(i for i,x in enumerate(xs) if x.shape[0] != xs[0].shape[0])
    raise ValueError(f"scan got values with different leading axis sizes: {paths[0]} has {xs[0].shape[0]}, {paths[i]} has {xs[i].shape[0]}")
  if not isinstance(n:=xs[0].shape[0], int): raise ValueError(f"scan needs a concrete number of steps, {paths[0]} has a leading axis of {n}")
  if length is not None and length != n:
    raise ValueError(f"scan got `length` argument of {length} which disagrees with leading axis sizes {n} ({paths[0]})")
  return n

class _Body:
  """f on leaf lists: `step(carry_leaves, x_leaves) -> (carry_leaves, y_leaves)`, checking every call against JAX's rules (a pair out;
  the carry of init's structure, shapes and dtypes; y of the same structure, shapes and dtypes at every step)"""
  def __init__(self, f:Callable, init, xs, carry_paths:list[str], init_leaves:list[Tensor]):
    self.f, self.init, self.xs, self.carry_paths = f, init, xs, carry_paths
    self.carry_avals = [(t.shape, t.dtype) for t in init_leaves]
    self.y_tree: Any = _UNSET   # f's y at its first call, and its leaves' paths, shapes and dtypes
    self.y_avals: list = []
    self.weak_ok = False      # the promotion probe: a weakly typed init leaf may come back with another dtype

  def step(self, carry:list[Tensor], x:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    out = self.f(_unflatten(self.init, carry), _unflatten(self.xs, x))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError(f"scan body output must be a pair (carry, y), got {tree_structure(out)}")
    new_carry, y = out
    if not same_structure(self.init, new_carry):
      raise TypeError("scan body function carry input and carry output must have the same pytree structure, but they differ: "
                      f"the input carry is {tree_structure(self.init)}, the output carry is {tree_structure(new_carry)}")
    paths, leaves = _leaves(new_carry, "carry")
    if paths != self.carry_paths:
      raise TypeError(f"scan body function carry output has None where the input carry has a value, or the reverse: the input carry has "
                      f"{self.carry_paths}, the output carry {paths}")
    leaves = [_as_tensor(v, p, dt) for v,p,(_,dt) in zip(leaves, paths, self.carry_avals)]
    for p,t,(shape,dt) in zip(paths, leaves, self.carry_avals):
      if t.shape != shape or (t.dtype != dt and not (self.weak_ok and dt in dtypes.weaks)):
        raise TypeError(f"scan body function carry input and carry output must have equal types (shapes and dtypes), but they differ: "
                        f"the input carry component {p} has shape {shape} dtype {dt} but the output carry component has {_aval(t)}")
    y_paths, y_leaves = _leaves(y, "y")
    y_leaves = [_as_tensor(v, p) for v,p in zip(y_leaves, y_paths)]
    avals = [(p, t.shape, t.dtype) for p,t in zip(y_paths, y_leaves)]
    if self.y_tree is _UNSET: self.y_tree, self.y_avals = y, avals
    elif not same_structure(y, self.y_tree) or avals != self.y_avals:
      raise TypeError(f"scan: f returned a y of another structure, shape or dtype than at its first step: {tree_structure(y)} {avals}, "
                      f"after {tree_structure(self.y_tree)} {self.y_avals}")
    return leaves, y_leaves

  def promote_weak(self, init:list[Tensor], x:list[Tensor]) -> list[Tensor]:
    """the init leaves, where a weakly typed one (a Python number) comes back from f with another dtype, cast to the promoted dtype, as
    JAX promotes weakly typed carries: `scan(lambda c, x: (c + x, c), 0., xs)` carries xs's dtype. f runs once here, for dtypes only"""
    self.weak_ok = True
    try: out, _ = self.step(init, x)
    finally: self.weak_ok, self.y_tree = False, _UNSET
    ret = [t if t.dtype == o.dtype else t.cast(least_upper_dtype(t.dtype, o.dtype)) for t,o in zip(init, out)]
    self.carry_avals = [(t.shape, t.dtype) for t in ret]
    return ret

def _unrolled(step:Callable, init:list[Tensor], xs:list[Tensor], length:int, reverse:bool) -> tuple[list[Tensor], list[Tensor]]:
  """the first lowering: f traced once per step, the carry threaded through, the ys stacked on a new axis 0 (reverse: the steps run from
  length-1 to 0, and step t's y is still at index t). One Tensor graph, so every transform composes with it; its kernels and its Python
  time grow with length (length >= 1: scan itself answers length 0). Each step's carry and y are buffers of their own (contiguous), a
  kernel a step: as one kernel the chain is an expression that grows with every step, simplified and compiled as a whole (the bicycle
  at T=50: 99 s to realize, against 1 s). x is xs[t] at a bound Variable t, so the steps' kernels differ only in t's value and compile
  once"""
  global _depth
  t_var, _depth = UOp.variable(f"scan_t{_depth}", 0, length-1), _depth + 1   # one name per nesting depth of scans
  try:
    carry, ys = list(init), [[] for _ in range(length)]
    for t in (reversed(range(length)) if reverse else range(length)):
      i = t_var.bind(t)
      carry, y = step(carry, [x.shrink(((i, i+1),) + (None,)*(x.ndim-1)).reshape(x.shape[1:]) for x in xs])
      carry, ys[t] = [c.contiguous() for c in carry], [v.contiguous() for v in y]
  finally: _depth -= 1
  return carry, [Tensor.stack(*[y[i] for y in ys]) for i in range(len(ys[0]))]

_depth = 0   # how many _unrolled scans are tracing, one inside the other's f

def _lower(step:Callable, init:list[Tensor], xs:list[Tensor], length:int, reverse:bool) -> tuple[list[Tensor], list[Tensor]]:
  """a scan of length >= 1 on leaf lists, as one kernel where it fuses: over the batch of the vmap scopes its leaves are in
  (_batched_fused), or outside any scope (scan_kernel); else unrolled. Through the kernel a gradient is the unrolled graph's, recomputed,
  and a tangent (jvp, jacfwd) the scan of the step's jvp, lowered here again"""
  leaves = init + xs
  if (rs:=_scope_ranges(leaves)) and (fused:=_batched_fused(step, init, xs, length, reverse, rs)) is not None: return fused
  if not any(open_vmap_ranges(t.uop) for t in leaves) and (fused:=_fused(step, init, xs, length, reverse,
    backward=lambda i, x: _unrolled(step, i, x, length, reverse), lower=lambda s, i, x: _lower(s, i, x, length, reverse))) is not None:
    return fused
  return _unrolled(step, init, xs, length, reverse)

def scan(f:Callable, init, xs=None, length:int|None=None, reverse:bool=False, unroll:int|bool=1):
  """
  Loops `carry, y = f(carry, x)` over the leading axis of xs and returns `(carry, ys)`, the last carry and the ys stacked on a new axis 0,
  with jax.lax.scan's semantics: init, xs and ys are pytrees (tuples, lists, dicts of Tensors, None an empty subtree); each x is an index
  of every xs leaf; `length` is the number of steps where xs is None; `reverse=True` runs from the last x to the first, and ys[i] is
  still xs[i]'s y; a y of None gives ys None. The carry must keep its structure, shapes and dtypes (a TypeError names the leaf); a
  Python number in init is weakly typed, so it takes the dtype f gives it. numpy arrays and Python numbers become Tensors. `unroll`
  is taken as JAX takes it (a positive int, or a bool) and changes nothing: the steps are a loop in one kernel, or one kernel each.

  ```python
  from tinygrad import Tensor, scan
  carry, ys = scan(lambda c, x: (c + x, c * x), Tensor(0.), Tensor([1., 2., 3.]))   # carry 6, ys [0, 2, 9]
  ```
  """
  if not callable(f): raise TypeError(f"scan expects a function f(carry, x) -> (carry, y), got {f!r}")
  if not isinstance(unroll, (bool, int)) or (not isinstance(unroll, bool) and unroll < 1):
    raise ValueError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
  # Tensors of their own on the leaves' values: the lowerings keep init and xs (to recompute or differentiate the steps) for as long as
  # the results live, and a Tensor of fn's that a vmap saw take a per-example value (setitem on a clone) must not outlive fn with them
  init, xs = tree_map(lambda v, _s, p: None if v is None else Tensor(_as_tensor(v, p).uop), init, None, "init"), \
    tree_map(lambda v, _s, p: None if v is None else Tensor(_as_tensor(v, p).uop), xs, None, "xs")
  carry_paths, init_leaves = _leaves(init, "carry")
  xs_paths, xs_leaves = _leaves(xs, "xs")
  length = _scan_length(xs_paths, xs_leaves, length)
  body = _Body(f, init, xs, carry_paths, init_leaves)
  # step 0's x, or for no steps a zero x of its shape: f traced on it for shapes and dtypes, as JAX traces f
  x0 = [x[-1 if reverse else 0] if length else x.pad(((0, 1),) + (None,)*(x.ndim-1))[0] for x in xs_leaves]
  if any(t.dtype in dtypes.weaks for t in init_leaves): init_leaves = body.promote_weak(init_leaves, x0)
  if length == 0: carry, ys = init_leaves, [y.unsqueeze(0).shrink(((0, 0),) + (None,)*y.ndim) for y in body.step(init_leaves, x0)[1]]
  else: carry, ys = _lower(body.step, init_leaves, xs_leaves, length, reverse)
  # a carry of constants alone has no device on 0.14: on the inputs' device, as vmap puts a constant output
  device = next((t.device for t in init_leaves + xs_leaves if t.device is not None), Device.DEFAULT)
  return _unflatten(init, [on_device(t, device) for t in carry]), _unflatten(body.y_tree, [on_device(t, device) for t in ys])
