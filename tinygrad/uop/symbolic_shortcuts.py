# line: 0.14.0 only (the codegen-cost-2 topic hooks it into uop/ops.py's resolve, schedule/indexing.py's apply_movement_op)
"""Answers upstream got from a symbolic rewrite, computed directly where they are provably the same (FAST_REWRITE=0: upstream's way;
test/test_first_call_cpu.py TestCodegenCost2 renders kernels both ways). A cold first call's codegen is ~25 passes of graph_rewrite.

resolve(x) simplified x (a graph_rewrite of symbolic) before reading its bounds. Where the bounds of x as it is already prove the
answer resolve would default to, that is its answer: the simplified x means the same, so its bounds either prove the same value or
don't prove one, and resolve then returns the default. A SHRINK's or PAD's shape checks 0 <= offset etc. this way for each node.

apply_movement_op's RESHAPE of constant indices (devectorize2 moves an INDEX of a lane through a vector's RESHAPEs) is integer arithmetic
(reshape_consts): upstream built the index expression and folded it with a graph_rewrite of symbolic, to the same CONSTs."""
from __future__ import annotations
from tinygrad.helpers import ContextVar
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, Ops

FAST_REWRITE = ContextVar("FAST_REWRITE", 1)

def resolve_proven(x:UOp, default:bool) -> bool:
  """whether the bounds of x, not simplified, prove resolve's default"""
  return x.op is not Ops.CONST and (mm:=x._min_max)[0] == mm[1] and bool(mm[0]) == default

def reshape_consts(in_shape:tuple, arg:tuple, rngs:tuple[UOp, ...]) -> tuple[UOp, ...]|None:
  """apply_movement_op's RESHAPE of constant indices (a lane of devectorize2's vectors): the row-major offset of the indices in arg's
  shape, unravelled in in_shape, with integers. _apply_reshape builds that sum of products, its mods and divides as UOps and folds them
  with a graph_rewrite of symbolic (and simplifies the SINK of indices, and substitutes its ranges: none), to weakint CONSTs of these
  values: the same UOps. None (upstream's way) unless the shapes are ints (in_shape's > 0) and the indices weakint CONSTs >= 0"""
  if not FAST_REWRITE or len(arg) != len(rngs): return None
  for r in rngs:
    if r.op is not Ops.CONST or r.dtype is not dtypes.weakint or r.arg.__class__ is not int or r.arg < 0: return None
  if not all(s.__class__ is int and s > 0 for s in in_shape) or not all(s.__class__ is int for s in arg): return None
  flat = 0
  for s, r in zip(arg, rngs): flat = flat * s + r.arg
  out = []
  for s in reversed(in_shape):
    out.append(flat % s)
    flat //= s
  return tuple(UOp.const(v, dtypes.weakint) for v in reversed(out))
