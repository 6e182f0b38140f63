"""Jacobians as vmaps of derivative products (JAX's jacfwd, jacrev, hessian).

`jacfwd` pushes every basis direction of the inputs through `jvp` at once: a vmap over the rows of an identity matrix, so a whole
Jacobian is one batched computation (one kernel where fn is one). `jacrev` pulls every basis direction of the outputs back through
upstream's reverse mode (`Tensor.gradient` with a cotangent), vmapped the same way. `hessian` is `jacfwd(jacrev(fn))`.
"""
from __future__ import annotations
from typing import Callable
from tinygrad.dtype import dtypes
from tinygrad.tensor import Tensor
from tinygrad.vmap import vmap, _tree_map
from tinygrad.jvp import jvp

def _argnums(argnums:int|tuple[int, ...], args:tuple, fn:str) -> tuple[int, ...]:
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  if not nums or not all(isinstance(i, int) for i in nums): raise TypeError(f"{fn} argnums must be an int or a tuple of ints, got {argnums!r}")
  for i in nums:
    if not -len(args) <= i < len(args): raise ValueError(f"{fn} argnums {i} is out of range for {len(args)} positional arguments")
    if not isinstance(args[i], Tensor) or not dtypes.is_float(args[i].dtype):
      raise TypeError(f"{fn} differentiates float Tensors, argument {i} is {type(args[i]).__name__}"+
                      (f" of {args[i].dtype}" if isinstance(args[i], Tensor) else ""))
  return tuple(i % len(args) for i in nums)

def _tree_apply(fn:Callable, tree): return _tree_map(lambda leaf, _spec, _path: fn(leaf), tree, None, "", "")

def _with(args:tuple, nums:tuple[int, ...], values) -> list:
  """args with args[nums[k]] replaced by values[k]"""
  ret = list(args)
  for i,v in zip(nums, values): ret[i] = v
  return ret

def jacfwd(fn:Callable, argnums:int|tuple[int, ...]=0) -> Callable:
  """
  The Jacobian of `fn` with respect to the positional arguments `argnums`, by forward mode: for an output of shape `o` and an argument
  of shape `a`, a Tensor of shape `o + a`. A tuple `argnums` gives a tuple of Jacobians, a pytree output a pytree of them.
  """
  def jacobian(*args):
    nums = _argnums(argnums, args, "jacfwd")
    sizes = [args[i].numel() for i in nums]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    def directional(e:Tensor):
      # one basis direction e of all differentiated arguments at once: each argument's tangent is its slice of e
      tangents = [e[o:o+s].reshape(args[i].shape).cast(args[i].dtype) for i,o,s in zip(nums, offsets, sizes)]
      return jvp(lambda *xs: fn(*_with(args, nums, xs)), tuple(args[i] for i in nums), tuple(tangents))[1]
    basis = Tensor.eye(sum(sizes), dtype=args[nums[0]].dtype, device=args[nums[0]].device)
    cols = vmap(directional, out_axes=-1)(basis)
    def split(col:Tensor):
      jacs = tuple(col[..., o:o+s].reshape(col.shape[:-1] + args[i].shape) for i,o,s in zip(nums, offsets, sizes))
      return jacs[0] if isinstance(argnums, int) else jacs
    return _tree_apply(split, cols)
  return jacobian

def jacrev(fn:Callable, argnums:int|tuple[int, ...]=0) -> Callable:
  """
  The Jacobian of `fn` with respect to the positional arguments `argnums`, by reverse mode: the same shapes as `jacfwd`, computed as a
  vmap of vector-Jacobian products (upstream's gradient with a cotangent) over the basis of the outputs.
  """
  def jacobian(*args):
    nums = _argnums(argnums, args, "jacrev")
    out = fn(*args)
    def rows(y):
      if not isinstance(y, Tensor): raise TypeError(f"jacrev: fn must return Tensors, got {type(y).__name__}")
      def vjp(ct:Tensor): return y.gradient(*[args[i] for i in nums], gradient=ct.reshape(y.shape).cast(y.dtype), materialize_grads=True)
      grads = vmap(vjp)(Tensor.eye(y.numel(), dtype=y.dtype, device=y.device))
      jacs = tuple(g.reshape(y.shape + args[i].shape) for i,g in zip(nums, grads))
      return jacs[0] if isinstance(argnums, int) else jacs
    return _tree_apply(rows, out)
  return jacobian

def hessian(fn:Callable, argnums:int|tuple[int, ...]=0) -> Callable:
  """the Hessian of a scalar `fn`: jacfwd of jacrev, shape `a + a` for an argument of shape `a`"""
  return jacfwd(jacrev(fn, argnums), argnums)
