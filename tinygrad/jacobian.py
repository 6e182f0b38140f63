"""Jacobians as vmaps of derivative products (JAX's jacfwd, jacrev, hessian).

`jacfwd` pushes every basis direction of the inputs through `jvp` at once: a vmap over the rows of an identity matrix, so a whole
Jacobian is one batched computation (one kernel where fn is one). `jacrev` pulls every basis direction of the outputs back through
upstream's reverse mode (`Tensor.gradient` with a cotangent), vmapped the same way. `hessian` is `jacfwd(jacrev(fn))`.
"""
from __future__ import annotations
import itertools, operator
from typing import Callable
from tinygrad.dtype import dtypes
from tinygrad.tensor import Tensor
from tinygrad.fork_line import LINE_012
from tinygrad.vmap import vmap, _from_numpy, _as_int
from tinygrad.jvp import jvp, fresh_copy, tracing, untraced
from tinygrad.pytree import tree_map, tree_leaves, tree_unflatten, tree_map_skip_none

def _as_array(x, _spec=None, _path=None):
  """a numpy array, numpy scalar or Python float (default_float) as a Tensor, as JAX takes them as arrays; anything else as it is (a
  Python int stays: an int isn't differentiable, and _normalize_argnums says so)"""
  return Tensor(x, dtype=dtypes.default_float) if isinstance(x:=_from_numpy(x), float) else x

def _normalize_argnums(argnums:int|tuple[int, ...], args:tuple, fn:str) -> tuple[tuple, tuple[int, ...]]:
  """(args with the differentiated ones' numpy and float leaves as Tensors, argnums as a tuple of nonnegative ints), checked against
  args: each differentiated argument is a pytree of float Tensors"""
  nums = (argnums,) if _as_int(argnums) is not None else tuple(argnums) if isinstance(argnums, (tuple, list)) else ()
  if not nums or any(_as_int(i) is None for i in nums): raise TypeError(f"{fn} argnums must be an int or a tuple of ints, got {argnums!r}")
  nums, args = tuple(operator.index(i) for i in nums), list(args)
  for i in nums:
    if not -len(args) <= i < len(args): raise ValueError(f"{fn} argnums {i} is out of range for {len(args)} positional arguments")
    args[i] = tree_map(_as_array, args[i], None)
    # an argument may be a pytree (tuples, lists, dicts) of Tensors, as in JAX: every leaf is differentiated
    for leaf in tree_leaves(args[i]):
      if not isinstance(leaf, Tensor) or not dtypes.is_float(leaf.dtype):
        raise TypeError(f"{fn} differentiates float Tensors, argument {i} {'is' if leaf is args[i] else 'holds'} {type(leaf).__name__}"+
                        (f" of {leaf.dtype}" if isinstance(leaf, Tensor) else ""))
  return tuple(args), tuple(i % len(args) for i in nums)

def _replace_arg_leaves(args:tuple, nums:tuple[int, ...], leaves:list) -> list:
  """args with the leaves of each args[nums[k]], in order, replaced by `leaves`"""
  ret, it = list(args), iter(leaves)
  for i in nums: ret[i] = tree_unflatten(args[i], [next(it) for _ in tree_leaves(args[i])])
  return ret

def _per_argument(args:tuple, nums:tuple[int, ...], argnums, jacs:list):
  """the Jacobians of the leaves (in the order of `_replace_arg_leaves`) back in each differentiated argument's structure, one per argnum"""
  ret = _replace_arg_leaves(args, nums, jacs)
  return ret[nums[0]] if _as_int(argnums) is not None else tuple(ret[i] for i in nums)

def _unravel(v:Tensor, xs:list[Tensor]) -> list[Tensor]:
  """v's last axis, which runs over the elements of all of xs, cut into one piece per x, each of x's shape (JAX's unravel_pytree)"""
  offsets = itertools.accumulate((x.numel() for x in xs), initial=0)
  return [v[..., o:o+x.numel()].reshape(v.shape[:-1] + x.shape) for x,o in zip(xs, offsets)]

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
    args, nums = _normalize_argnums(argnums, args, "jacfwd")
    xs = [x for i in nums for x in tree_leaves(args[i])]
    def directional_derivative(e:Tensor):
      # along one basis direction e of all differentiated arguments at once: each argument's tangent is its piece of e
      def fn_of_leaves(*leaves):
        out, aux = _split_aux(fn(*_replace_arg_leaves(args, nums, list(leaves)), **kwargs), has_aux, "jacfwd")
        returned_aux.append(aux)
        return out
      tangent_out = jvp(fn_of_leaves, tuple(xs), tuple(t.cast(x.dtype) for t,x in zip(_unravel(e, xs), xs)))[1]
      return (tangent_out, returned_aux[-1]) if has_aux else tangent_out
    returned_aux: list = []   # what fn returned as aux, before vmap
    basis = _eye(sum(x.numel() for x in xs), xs[0].dtype, xs[0].device)
    # aux comes from the primal alone: it doesn't depend on the basis direction, so it leaves the vmap as it is (out_axes None)
    # xs go along unmapped so a constant Jacobian lands on their device (0.14's basis, an eye, has none: transform_state.on_device)
    batched = vmap(lambda e, *_: directional_derivative(e), in_axes=(0,)+(None,)*len(xs), out_axes=(-1, None) if has_aux else -1)(basis, *xs)
    cols, aux = batched if has_aux else (batched, None)
    # vmap made aux's Python numbers Tensors: the ones fn returned are given back as they were, as JAX does
    if has_aux:
      aux = tree_unflatten(returned_aux[0], [a if isinstance(r, Tensor) else r for r,a in zip(tree_leaves(returned_aux[0]), tree_leaves(aux))])
    jac = tree_map_skip_none(lambda col: _per_argument(args, nums, argnums, _unravel(col, xs)), cols)
    return (jac, aux) if has_aux else jac
  return jacobian

def _eye(n:int, dtype, device) -> Tensor:
  """the basis a Jacobian's vmap runs over, on device (0.14's eye has no device: it is computed where it is read)"""
  return Tensor.eye(n, dtype=dtype, device=device) if LINE_012 else Tensor.eye(n, dtype=dtype)

def _gradient(y:Tensor, xs:list[Tensor], ct:Tensor) -> list[Tensor]:
  """the vector-Jacobian products of y with cotangent ct, zeros for an x y doesn't depend on (0.12 says materialize_grads; 0.14 has no
  such argument and gives zeros itself)"""
  if LINE_012: return y.gradient(*xs, gradient=ct, materialize_grads=True)
  return y.gradient(*xs, gradient=ct)

def jacrev(fn:Callable, argnums:int|tuple[int, ...]=0, has_aux:bool=False) -> Callable:
  """
  The Jacobian of `fn` with respect to the positional arguments `argnums`, by reverse mode: the same shapes as `jacfwd`, computed as a
  vmap of vector-Jacobian products (upstream's gradient with a cotangent) over the basis of the outputs. `has_aux` as in `jacfwd`.
  """
  def jacobian(*args, **kwargs):
    args, nums = _normalize_argnums(argnums, args, "jacrev")
    # fn gets fresh copies of the differentiated leaves (as jvp gives it): what it closes over is a constant, as in JAX
    xs = [fresh_copy(x, k) for k,x in enumerate(x for i in nums for x in tree_leaves(args[i]))]
    with tracing(xs): out, aux = _split_aux(fn(*_replace_arg_leaves(args, nums, xs), **kwargs), has_aux, "jacrev")
    def jacobian_of_output(y):
      if not isinstance(y, Tensor): raise TypeError(f"jacrev: fn must return Tensors, got {type(y).__name__}")
      # as JAX's jacrev: an integer or bool output has no cotangent to pull back (jacfwd gives its zero Jacobian)
      if not dtypes.is_float(y.dtype): raise TypeError(f"jacrev requires float outputs, got one of {y.dtype} (jacfwd gives its zero Jacobian)")
      def vjp(ct:Tensor): return _gradient(y, xs, ct.reshape(y.shape).cast(y.dtype))
      grads = vmap(lambda ct, *_: vjp(ct), in_axes=(0,)+(None,)*len(xs))(_eye(y.numel(), y.dtype, y.device), *xs)   # xs: as in jacfwd
      return _per_argument(args, nums, argnums, [g.reshape(y.shape + x.shape) for x,g in zip(xs, grads)])
    jac = untraced(tree_map_skip_none(jacobian_of_output, out), xs)
    return (jac, untraced(aux, xs)) if has_aux else jac
  return jacobian

def hessian(fn:Callable, argnums:int|tuple[int, ...]=0, has_aux:bool=False) -> Callable:
  """the Hessian of a scalar `fn`: jacfwd of jacrev, shape `a + a` for an argument of shape `a`"""
  return jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)
