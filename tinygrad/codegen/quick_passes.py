# line: 0.14.0 only (the codegen-quick-passes topic hooks it into codegen/__init__.py's full_rewrite_to_sink)
"""Passes of full_rewrite_to_sink skipped where they can't change the kernel. A pass's graph_rewrite walks every node of the kernel
(~5 us a node on these CPUs) even when none of its patterns can match: on a CPU kernel, the implicit barriers (no LOCAL buffer), the
gates moved from INDEX (no Invalid index, no gated LOAD), the float casts of transcendental operands (none) and the PARAM numbering (no
unnumbered PARAM) find nothing, and these four were 5-10% of a cold first call's codegen (bench W2's quick kernel). Each predicate is
exact: it is true wherever one of its pass's patterns could fire on a node of the graph, and a pass none of whose patterns fires on the
input makes no new node, so skipping it leaves the sink, and the program, the same. QUICK_PASSES=0 runs every pass (the sameness test,
test/test_first_call_cpu.py TestQuickPasses, renders programs both ways)."""
from tinygrad.helpers import ContextVar
from tinygrad.uop.ops import UOp, Ops
from tinygrad.dtype import Invalid, AddrSpace, dtypes

QUICK_PASSES = ContextVar("QUICK_PASSES", 1)

def _any(sink:UOp, pred) -> bool: return any(pred(u) for u in sink.toposort())

def has_local(sink:UOp) -> bool:
  """pm_implicit_barriers fires only on an AFTER or a STORE whose addrspace is LOCAL, which comes from a LOCAL PARAM or BUFFER"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: u.op in (Ops.PARAM, Ops.BUFFER) and u.arg.addrspace is AddrSpace.LOCAL)

def has_gates(sink:UOp) -> bool:
  """pm_move_gates_from_index matches a WHERE with an Invalid arm (UPat(arg=Invalid): any op) or a LOAD with a gate (three srcs)"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: u.arg is Invalid or (u.op is Ops.LOAD and len(u.src) >= 3))

FLOAT_ALUS = (Ops.SIN, Ops.LOG2, Ops.EXP2, Ops.SQRT, Ops.RECIPROCAL)
def has_float_alu(sink:UOp) -> bool:
  """pm_cast_float_alu matches these ops alone"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: u.op in FLOAT_ALUS)

def has_unnumbered_param(sink:UOp) -> bool:
  """pm_number_params changes a PARAM whose slot is -1 alone"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: u.op is Ops.PARAM and u.arg.slot == -1)

DECOMP_DTYPES = (*dtypes.fp8s, dtypes.bfloat16, dtypes.half, dtypes.long, dtypes.ulong)
def has_dtype_decomp(sink:UOp) -> bool:
  """pm_dtype_decomps collects a node of these dtypes (its SINK rule changes nothing without one), pm_commit_weak a node with a weak src"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: u.dtype in DECOMP_DTYPES or u.dtype in dtypes.weaks)

def has_load_collapse(sink:UOp) -> bool:
  """pm_load_collapse matches a REDUCE (ADD, 0) of two srcs or a CMPLT of an ADD with a weakint src"""
  if not QUICK_PASSES: return True
  return _any(sink, lambda u: (u.op is Ops.REDUCE and u.arg == (Ops.ADD, 0) and len(u.src) == 2) or
              (u.op is Ops.CMPLT and u.src[0].op is Ops.ADD and any(s.dtype == dtypes.weakint for s in u.src[0].src)))
