"""GPU kernel heuristics (hooked into hand_coded_optimizations by the gpu-heuristics topic patch), for renderers with local memory and
threads: timed on an NVIDIA H200 (bench/RESULTS-gpu.md; bench/kernel_opts.py's grid of launch shapes), their choices tested without a
GPU through the CUDA renderer in test/test_gpu_emulated.py."""
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.uop.ops import UOp, Ops, AxisType
from tinygrad.codegen.opt.postrange import Scheduler

ROWS_MIN, ROW_MAX, ROWS_PER_BLOCK, ROW_VECTOR = 65536, 256, 32, 4

def unit_stride(rng:UOp, idx:UOp) -> bool: return any(c is rng for c in idx.split_uop(Ops.ADD))

def gpu_row_reduce(k:Scheduler) -> bool:
  """Many short rows, each reduced (a vmap of a per-example reduce: bench W1's 1M rows of 64 floats): a thread per row, ROWS_PER_BLOCK
  rows a block, each row read in 16-byte vector loads (UNROLL 4 of a reduce that is unit-stride in every load along it). On W1 this
  kernel took 0.087 ms where MATVEC's shape (8 threads a row sharing partial sums through shared memory, 4 rows a thread) took 0.30:
  a row of 64 is too short to split across threads. BEAM=2 found 0.083 ms (16 rows a block); upcasting rows on top (strided
  accumulators) took 0.33. Long rows (over ROW_MAX) and fewer rows than fill the GPU (ROWS_MIN) keep the generic rules (MATVEC, GROUPTOP)."""
  if not k.ren.has_local or k.reduceop is None or k.upcast_size() != 1: return False
  if len(rows:=k.axes_of(AxisType.GLOBAL)) != 1 or not (red:=k.axes_of(AxisType.REDUCE)): return False
  n_rows, rngs = k.full_shape[rows[0]], [k.rngs[ax] for ax in red]   # a reduce each has its range (W1's sum and max: two of 64)
  if not isinstance(n_rows, int) or n_rows < ROWS_MIN or n_rows % ROWS_PER_BLOCK: return False
  def short_contiguous_row(ax:int) -> bool:
    return isinstance(n:=k.full_shape[ax], int) and n <= ROW_MAX and n % ROW_VECTOR == 0 and \
      all(unit_stride(k.rngs[ax], idx) for b in k.bufs if k.rngs[ax] in (idx:=b.src[1].get_idx()).backward_slice)
  if not all(short_contiguous_row(ax) for ax in red): return False
  k.apply_opt(Opt(OptOps.LOCAL, rows[0], ROWS_PER_BLOCK))
  for r in rngs: k.apply_opt(Opt(OptOps.UNROLL, k.unrollable_dims.index(k.rngs.index(r)), ROW_VECTOR))
  return True
