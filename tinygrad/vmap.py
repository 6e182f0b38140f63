"""vmap for tinygrad: helpers around the VMAPIN/VMAPOUT bracket (`Tensor.vmapin` / `Tensor.vmapout`).

A vmap scope is opened by `x.vmapin(varg)` and closed by `y.vmapout(varg)`. A varg has one entry per axis: a RANGE for a mapped
(batch) axis, `UOp.const(dtypes.index, 0)` for a kept axis. The scheduler turns the scope into a loop over the RANGE inside the kernel.
"""
import itertools
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, AxisType, sint

# every scope gets a RANGE id of its own, so nested and repeated scopes never alias. Negative, like upstream's outer world ranges.
_range_ids = itertools.count(-1, -1)

def vmap_range(size:sint, axis_type:AxisType=AxisType.LOOP) -> UOp:
  """a fresh RANGE for one vmap scope. LOOP runs the batch as a loop inside the kernels, OUTER runs the scope once per index."""
  return UOp.range(size, next(_range_ids), axis_type)

def varg(ndim:int, mapped:dict[int, UOp]) -> tuple[UOp, ...]:
  """the varg of `ndim` entries with the RANGE `mapped[i]` at axis i and `CONST(0)` everywhere else"""
  if bad:=[i for i in mapped if not -ndim <= i < ndim]: raise ValueError(f"axis {bad[0]} is out of range for {ndim} axes")
  mapped = {i % ndim: r for i, r in mapped.items()}
  return tuple(mapped.get(i, UOp.const(dtypes.index, 0)) for i in range(ndim))
