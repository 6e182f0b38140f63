# line: 0.14.0 only (the codegen-cost-2 topic hooks it into uop/ops.py's graph_rewrite and resolve, schedule/indexing.py's apply_movement_op)
"""graph_rewrite's loop with less Python a node, the same rewrite. A cold first call's codegen is ~25 passes of graph_rewrite over each
kernel, and a fifth of their time was RewriteContext.unified_rewrite's own bookkeeping: each turn of its loop compared the stack's
length with a ContextVar (a Python call, ContextVar.__lt__), and each node's rewrite went through pm_rewrite and unwrap (two more calls)
and self.<attr> lookups. unified_rewrite below is upstream's loop, line for line, with those read once into locals: the same nodes
are visited in the same order and the same patterns tried, so the result is the same UOp (FAST_REWRITE=0 runs upstream's own method;
test/test_first_call_cpu.py TestCodegenCost2 renders kernels both ways).

resolve(x) simplified x (a graph_rewrite of symbolic) before reading its bounds. Where the bounds of x as it is already prove the
answer resolve would default to, that is its answer: the simplified x means the same, so its bounds either prove the same value or
don't prove one, and resolve then returns the default. A SHRINK's or PAD's shape checks 0 <= offset etc. this way for each node.

apply_movement_op's RESHAPE of constant indices (devectorize2 moves an INDEX of a lane through a vector's RESHAPEs) is integer arithmetic
(reshape_consts): upstream built the index expression and folded it with a graph_rewrite of symbolic, to the same CONSTs."""
from __future__ import annotations
import collections
from tinygrad.helpers import ContextVar
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, Ops, BottomUpGate, REWRITE_STACK_LIMIT, SENTINEL, _rebuild_dtype

FAST_REWRITE = ContextVar("FAST_REWRITE", 1)

def resolve_proven(x:UOp, default:bool) -> bool:
  """whether the bounds of x, not simplified, prove resolve's default"""
  return x.op is not Ops.CONST and (mm:=x._min_max)[0] == mm[1] and bool(mm[0]) == default

def unified_rewrite(rctx, root:UOp) -> UOp:
  """RewriteContext.unified_rewrite(root), with its attributes and the stack limit read once"""
  replace, pm, bpm, ctx, enter_calls = rctx.replace, rctx.pm, rctx.bpm, rctx.ctx, rctx.enter_calls
  pm_rewrite = pm.rewrite if pm is not None else None
  cached_bpm_rewrite, limit, opaque = rctx.cached_bpm_rewrite, REWRITE_STACK_LIMIT.value, UOp._OPAQUE_CALL_BODIES
  stack: collections.deque[tuple[UOp, int, UOp]] = collections.deque([(root, 0, root)])
  push, pop = stack.append, stack.pop
  on_stack = {root}
  waitlist: dict[UOp, list[tuple[UOp, int, UOp]]] = {}
  while stack:
    if len(stack) > limit: raise RuntimeError("infinite loop in graph_rewrite (stack too big)")
    n, stage, new_n = pop()
    if n in replace: continue
    if stage == 0:
      if bpm is not None:
        test_n: UOp|None = n
        seen = set()
        try:
          while test_n is not None:
            if test_n in seen: raise RuntimeError("infinite loop in fixed_point_rewrite")
            seen.add(test_n)
            new_n, test_n = test_n, cached_bpm_rewrite(test_n)
        except BottomUpGate:
          replace[n] = test_n
          if n in waitlist: stack.extend(waitlist.pop(n))
          continue
      push((n, 1, new_n))
      if not enter_calls and (new_n.op is Ops.FUNCTION or (new_n.op is Ops.CALL and new_n.src[0].op in opaque)):
        replace[new_n.src[0]] = new_n.src[0]
      for x in reversed(new_n.src):
        if x in on_stack: continue
        push((x, 0, x))
        on_stack.add(x)
    elif stage == 1:
      tmp = []
      for x in new_n.src:
        if (rx:=replace.get(x, SENTINEL)) is SENTINEL:
          waitlist.setdefault(x, []).append((n, 1, new_n))
          break
        tmp.append(rx)
      else:
        if (new_src:=tuple(tmp)) == new_n.src:
          if pm_rewrite is None or (new_src_n:=pm_rewrite(new_n, ctx)) is None:
            replace[n] = new_n
            if n in waitlist: stack.extend(waitlist.pop(n))
            continue
        else:
          new_src_n = UOp(new_n.op, _rebuild_dtype(new_n, new_src), new_src, new_n.arg, new_n.tag)
        push((n, 2, new_src_n))
        push((new_src_n, 0, new_src_n))
    else:
      if (replaced_new_n:=replace.get(new_n, SENTINEL)) is SENTINEL:
        waitlist.setdefault(new_n, []).append((n, 2, new_n))
      else:
        replace[n] = replaced_new_n
        if n in waitlist: stack.extend(waitlist.pop(n))
  return replace[root]

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
