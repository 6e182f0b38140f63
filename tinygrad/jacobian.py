"""Jacobians as vmaps of derivative products (JAX's jacfwd, jacrev, hessian).

`jacfwd` pushes every basis direction of the inputs through `jvp` at once: a vmap over the rows of an identity matrix, so a whole
Jacobian is one batched computation (one kernel where fn is one). `jacrev` pulls every basis direction of the outputs back through
upstream's reverse mode (`Tensor.gradient` with a cotangent), vmapped the same way. `hessian` is `jacfwd(jacrev(fn))`.
"""
from __future__ import annotations
import operator
from typing import Callable
from tinygrad.dtype import dtypes
from tinygrad.tensor import Tensor
from tinygrad.vmap import vmap, _tree_map, _leaves, _unflatten
from tinygrad.jvp import jvp, fresh_copy, tracing

def _index(i) -> int|None:
  """i as an int when it is one (numpy's integers too, as JAX takes them), else None"""
  try: return None if isinstance(i, bool) else operator.index(i)
  except TypeError: return None

def _argnums(argnums:int|tuple[int, ...], args:tuple, fn:str) -> tuple[int, ...]:
  nums = (argnums,) if _index(argnums) is not None else tuple(argnums) if isinstance(argnums, (tuple, list)) else ()
  if not nums or any(_index(i) is None for i in nums): raise TypeError(f"{fn} argnums must be an int or a tuple of ints, got {argnums!r}")
  nums = tuple(operator.index(i) for i in nums)
  for i in nums:
    if not -len(args) <= i < len(args): raise ValueError(f"{fn} argnums {i} is out of range for {len(args)} positional arguments")
    # an argument may be a pytree (tuples, lists, dicts) of Tensors, as in JAX: every leaf is differentiated
    for leaf in _leaves(args[i]):
      if not isinstance(leaf, Tensor) or not dtypes.is_float(leaf.dtype):
        raise TypeError(f"{fn} differentiates float Tensors, argument {i} {'is' if leaf is args[i] else 'holds'} {type(leaf).__name__}"+
                        (f" of {leaf.dtype}" if isinstance(leaf, Tensor) else ""))
  return tuple(i % len(args) for i in nums)

def _tree_apply(fn:Callable, tree):
  """fn over the leaves of tree; None is an empty subtree (fn's output may hold one, as in JAX), kept as it is"""
  return _tree_map(lambda leaf, _spec, _path: None if leaf is None else fn(leaf), tree, None, "", "")

def _with(args:tuple, nums:tuple[int, ...], leaves:list) -> list:
  """args with the leaves of each args[nums[k]], in order, replaced by `leaves`"""
  ret, it = list(args), iter(leaves)
  for i in nums: ret[i] = _unflatten(args[i], [next(it) for _ in _leaves(args[i])])
  return ret

def _per_argument(args:tuple, nums:tuple[int, ...], argnums, jacs:list):
  """the Jacobians of the leaves (in the order of `_with`) back in each differentiated argument's structure, one per argnum"""
  ret = _with(args, nums, jacs)
  return ret[nums[0]] if _index(argnums) is not None else tuple(ret[i] for i in nums)

def _split_aux(out, has_aux:bool, fn:str):
  if not has_aux: return out, None
  if not isinstance(out, (tuple, list)) or len(out) != 2: raise TypeError(f"{fn}: with has_aux=True fn must return a pair (output, aux)")
  return out[0], out[1]

def jacfwd(fn:Callable, argnums:int|tuple[int, ...]=0, has_aux:bool=False) -> Callable:
  """
  The Jacobian of `fn` with respect to the positional arguments `argnums`, by forward mode: for an output of shape `o` and an argument
  of shape `a`, a Tensor of shape `o + a`. A tuple `argnums` gives a tuple of Jacobians, a pytree output a pytree of them, and a pytree
  argument (a dict of parameters) a Jacobian of its structure for each output leaf, as in JAX. With `has_aux`, fn returns
  `(output, aux)` and the call returns `(Jacobian, aux)`, aux not differentiated.
  """
  def jacobian(*args, **kwargs):
    nums = _argnums(argnums, args, "jacfwd")
    xs = [x for i in nums for x in _leaves(args[i])]
    sizes = [x.numel() for x in xs]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    def directional(e:Tensor):
      # one basis direction e of all differentiated arguments at once: each argument's tangent is its slice of e
      tangents = [e[o:o+s].reshape(x.shape).cast(x.dtype) for x,o,s in zip(xs, offsets, sizes)]
      def primal(*leaves):
        out, a = _split_aux(fn(*_with(args, nums, list(leaves)), **kwargs), has_aux, "jacfwd")
        raw_aux.append(a)
        return out
      tangent_out = jvp(primal, tuple(xs), tuple(tangents))[1]
      return (tangent_out, raw_aux[-1]) if has_aux else tangent_out
    raw_aux: list = []   # what fn returned as aux, before vmap
    basis = Tensor.eye(sum(sizes), dtype=xs[0].dtype, device=xs[0].device)
    # aux comes from the primal alone: it doesn't depend on the basis direction, so it leaves the vmap as it is (out_axes None)
    cols, aux = vmap(directional, out_axes=(-1, None))(basis) if has_aux else (vmap(directional, out_axes=-1)(basis), None)
    # vmap made aux's Python numbers Tensors: the ones fn returned are given back as they were, as JAX does
    if has_aux: aux = _unflatten(raw_aux[0], [a if isinstance(r, Tensor) else r for r,a in zip(_leaves(raw_aux[0]), _leaves(aux))])
    def split(col:Tensor):
      return _per_argument(args, nums, argnums, [col[..., o:o+s].reshape(col.shape[:-1] + x.shape) for x,o,s in zip(xs, offsets, sizes)])
    return (_tree_apply(split, cols), aux) if has_aux else _tree_apply(split, cols)
  return jacobian

def jacrev(fn:Callable, argnums:int|tuple[int, ...]=0, has_aux:bool=False) -> Callable:
  """
  The Jacobian of `fn` with respect to the positional arguments `argnums`, by reverse mode: the same shapes as `jacfwd`, computed as a
  vmap of vector-Jacobian products (upstream's gradient with a cotangent) over the basis of the outputs. `has_aux` as in `jacfwd`.
  """
  def jacobian(*args, **kwargs):
    nums = _argnums(argnums, args, "jacrev")
    # fn gets fresh copies of the differentiated leaves (as jvp gives it): what it closes over is a constant, as in JAX
    xs = [fresh_copy(x) for i in nums for x in _leaves(args[i])]
    with tracing(xs): out, aux = _split_aux(fn(*_with(args, nums, xs), **kwargs), has_aux, "jacrev")
    def rows(y):
      if not isinstance(y, Tensor): raise TypeError(f"jacrev: fn must return Tensors, got {type(y).__name__}")
      def vjp(ct:Tensor): return y.gradient(*xs, gradient=ct.reshape(y.shape).cast(y.dtype), materialize_grads=True)
      grads = vmap(vjp)(Tensor.eye(y.numel(), dtype=y.dtype, device=y.device))
      return _per_argument(args, nums, argnums, [g.reshape(y.shape + x.shape) for x,g in zip(xs, grads)])
    return (_tree_apply(rows, out), aux) if has_aux else _tree_apply(rows, out)
  return jacobian

def hessian(fn:Callable, argnums:int|tuple[int, ...]=0, has_aux:bool=False) -> Callable:
  """the Hessian of a scalar `fn`: jacfwd of jacrev, shape `a + a` for an argument of shape `a`"""
  return jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)
