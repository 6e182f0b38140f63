"""The CPU's kernel heuristics (hooked into hand_coded_optimizations by cpu-heuristics; 0.14: cpu-codegen): a register tile for matmuls, reduces
and stores as 32-byte vectors, transcendentals decomposed as vector math. Each rule returns whether it applied; with one applied the
generic upcasts don't run on top. Measured in bench/ (bench/analysis.md); tested in test/test_cpu_codegen.py. QUICK_OPTS and
quick_opts_differ are the clang-first-call topic's: engine/realize.py builds a kernel quick without the opts that are slow to build."""
import functools, platform, pathlib
from tinygrad.codegen.opt import Opt, OptOps, KernelOptError
from tinygrad.helpers import NOOPT, ContextVar, Context
from tinygrad.uop.ops import UOp, Ops, GroupOp, AxisType
from tinygrad.renderer import Renderer
from tinygrad.fork_line import LINE_012
from tinygrad.codegen.opt.postrange import Scheduler
from tinygrad.codegen.opt.heuristic_gpu import unit_stride
if LINE_012: from tinygrad.codegen.late.devectorizer import vector_decomposition
else:
  from tinygrad.codegen.late.cpu_vectors import lane_decomposition as vector_decomposition  # 0.14: scalar ALUs that cpu_vectors joins

def renderer_device(ren:Renderer) -> str: return ren.device if LINE_012 else ren.target.device   # 0.14: in its Target

def stored(k:Scheduler) -> list[UOp]: return [u.src[0] for u in k.ast.backward_slice if u.op is Ops.STORE]
def sum_of_products(op:Ops, x:UOp) -> bool: return op is Ops.ADD and x.op is Ops.MUL and all(s.op is Ops.INDEX for s in x.src)

def cpu_tile_bytes() -> int:
  """the accumulators of the CPU matmul tile: 8 vector registers, 256 bytes with AVX2 (of its 16), 512 with AVX-512 (of its 32), whose
  4x16 float32 tile was 1.5x slower than 8x16 (bench W2's first kernel, 1.08 -> 0.71 ms). clang targets this machine (-march=native).
  0.14: the tile's registers are cpu_vectors.tile_vector_bytes (zmm only where the CPU has AVX-512, its kernel alone built with it)"""
  if not LINE_012:
    from tinygrad.codegen.late import cpu_vectors
    return 8 * cpu_vectors.tile_vector_bytes()
  return host_tile_bytes()

@functools.cache
def host_tile_bytes() -> int:
  try: return 512 if platform.machine() in ("x86_64", "AMD64") and "avx512f" in pathlib.Path("/proc/cpuinfo").read_text().split() else 256
  except OSError: return 256

def cpu_gemm_tile(k:Scheduler, tile_bytes:int|None=None) -> bool:
  """On the CPU, a matmul whose N axis is unit-stride in B gets a register tile of accumulators (cpu_tile_bytes: 8 vector registers, 8
  FMAs in flight) along N, and no unrolled reduce, which would chain each accumulator's adds: 2-5x the generic 4x4 tile with UNROLL on AVX2.
  The 0.14 line's accumulators are scalars in an array it reads and writes a vector at a time (codegen/late/cpu_vectors.py), which clang
  keeps in vector registers: 4x16 floats in 8 ymm with AVX2, 8x16 in 8 zmm with AVX-512 (the broadcasts of A fold into the FMAs)"""
  if renderer_device(k.ren) != "CPU" or k.upcast_size() != 1 or len(k.reduceops) != 1 or len(k.ranges_of(AxisType.REDUCE)) != 1: return False
  if (red:=k.reduceop) is None: return False
  if not sum_of_products(red.arg[0], mul:=red.src[0]): return False
  sz = max(red.dtype.itemsize, 4)
  for a, b in (mul.src, mul.src[::-1]):
    ia, ib = a.src[1].get_idx(), b.src[1].get_idx()
    n = [ax for ax in k.upcastable_dims if (r:=k.rngs[ax]) not in ia.backward_slice and unit_stride(r, ib)]
    m = [ax for ax in k.upcastable_dims if (r:=k.rngs[ax]) in ia.backward_slice and r not in ib.backward_slice]
    if not n or not m or (n_amt:=next((x for x in (16, 8, 4) if x*sz <= 64 and k.full_shape[n[-1]] % x == 0), None)) is None: continue
    # a quick build takes AVX2's tile: AVX-512's twice as tall one costs ~25 ms more codegen and clang (bench W2's first call). 0.14: so
    # does a renderer whose accumulators don't move as vectors (only clang's do: cpu_vectors.py), where a zmm tile would be 128 scalars
    wide = LINE_012 or getattr(k.ren, "vector_bytes", 0)
    # 0.14: a quick build takes one row of the tile (16 accumulators, not 64: bench W2's codegen ~2x faster), the same order of the reduce
    if QUICK_OPTS and not LINE_012:
      k.apply_opt(Opt(OptOps.UPCAST, n[-1], n_amt))
      return True
    if tile_bytes is None: tile_bytes = 256 if QUICK_OPTS or not wide else cpu_tile_bytes()
    if (m_amt:=next((x for x in (min(8, tile_bytes//sz//n_amt), 4, 2) if k.full_shape[m[-1]] % x == 0), None)) is None: continue
    n_rng = k.rngs[n[-1]]
    k.apply_opt(Opt(OptOps.UPCAST, m[-1], m_amt))
    k.apply_opt(Opt(OptOps.UPCAST, k.rngs.index(n_rng), n_amt))
    return True
  return False

def cpu_reduce_vector(k:Scheduler, axis:int) -> int|None:
  """With vector ALUs (clang), a reduce upcasts the first axis the generic loop picks to one 32-byte vector (float8 on AVX) and nothing
  else, when every load varies along it (a row or a column reduce: 8 independent accumulator chains where the generic 4 were
  latency-bound, bench W1's row reduce 2.0 -> 1.4 ms, a column sum of 1000x4096 3.7 -> 1.7), or when a load is broadcast along it (an
  outer product of rows: pairwise distances) and it is the outermost axis and unit-stride in the store: the generic 4x4 tile of that was
  float4 math, split four ways by its store, and twice the UOps. A matmul, broadcast along an inner axis, keeps the generic tile."""
  if not k.ren.vector_alus or k.upcast_size() != 1 or k.reduceop is None: return None
  rng, stores = k.rngs[axis], stored(k)
  # a broadcast load on the outermost loop axis: the lanes' gathered loads stay out of the inner loops (the inner axis measured 1.3x
  # slower than the 4x4 tile)
  if not all(rng in b.src[1].get_idx().backward_slice for b in k.bufs if b not in stores) and \
     (axis != k.upcastable_dims[0] or not stores or not all(unit_stride(rng, st.src[1].get_idx()) for st in stores)): return None
  amt = min(16, 32 // max(b.dtype.base.itemsize for b in k.bufs))   # an upcast takes at most 16: bytes were 32, a KernelOptError
  return amt if amt > 4 and k.full_shape[axis] % amt == 0 else None

TRANSCENDENTAL = {Ops.EXP2, Ops.LOG2, Ops.SIN}   # 0.14's GroupOp has no Transcendental

def decomposed(ast:UOp, ren:Renderer) -> list[UOp]:
  """the transcendentals of a kernel the renderer has no code for: uop/decompositions.py builds them from ALUs"""
  return [u for u in ast.backward_slice if u.op in TRANSCENDENTAL and u.op not in ren.code_for_op]

def cpu_row_reduce(k:Scheduler) -> bool:
  """With vector ALUs, a reduce along rows that lie contiguous in memory (every load that varies along the reduce axis is unit-stride in
  it) unrolls that axis to one 32-byte vector and upcasts an output axis by 4: each row is read in 32-byte loads into a vector
  accumulator of its own (the devectorizer reduces its lanes after the loop), four rows at a time. Upcasting 8 rows instead (one float8
  of accumulators, whose lanes are 8 rows: strided scalar loads) took 2x as long on bench W1's row sum and max. Not with decomposed
  transcendentals in the reduce (their compares are per lane: see lanes below)"""
  if not k.ren.vector_alus or k.upcast_size() != 1 or k.reduceop is None or not k.unrollable_dims: return False
  if decomposed(k.ast, k.ren): return False
  # loads as wide as the accumulator: a half sum accumulates in float, and its 8 halves a step ran slower than the 16 rows upcast below
  if any(b.dtype.base.itemsize != k.reduceop.dtype.itemsize for b in k.bufs): return False
  amt = min(16, 32 // k.reduceop.dtype.itemsize)   # bytes: 16 lanes, 4 rows (32 took 2.5x the codegen)
  def contiguous(rng:UOp) -> bool:
    return all(unit_stride(rng, idx) for b in k.bufs if rng in (idx:=b.src[1].get_idx()).backward_slice)
  if not (rows:=[ax for ax in k.unrollable_dims if k.full_shape[ax] % amt == 0 and contiguous(k.rngs[ax])]): return False
  out = [ax for ax in k.upcastable_dims if k.full_shape[ax] % 4 == 0]
  unit = [ax for ax in out if all(unit_stride(k.rngs[ax], st.src[1].get_idx()) for st in stored(k))]
  rngs = [k.rngs[ax] for ax in rows]
  if out: k.apply_opt(Opt(OptOps.UPCAST, (unit or out)[-1], 4))
  for r in rngs: k.apply_opt(Opt(OptOps.UNROLL, k.unrollable_dims.index(k.rngs.index(r)), amt))
  return True

QUICK_OPTS = ContextVar("QUICK_OPTS", 0)  # a quick build (engine/realize.py's first tier) leaves out the opts that are slow to build

def vector_transcendentals(ast:UOp, ren:Renderer) -> list[UOp]:
  """the decomposed transcendentals of an elementwise kernel that a vector upcast makes SIMD (with vector ALUs)"""
  if not (ren.vector_alus if LINE_012 else getattr(ren, "vector_lanes", False)) or any(u.op is Ops.REDUCE for u in ast.backward_slice): return []
  return [u for u in decomposed(ast, ren) if vector_decomposition(u)]

def gemm_like(ast:UOp) -> bool:
  """whether the kernel may take the CPU matmul tile: a reduce of a sum of products of two loads"""
  matmul = any(u.op is Ops.REDUCE and sum_of_products(u.arg if LINE_012 else u.arg[0], u.src[0]) for u in ast.backward_slice)  # 0.14: (op, ...)
  # 0.14: the tile needs an M and an N axis: a row of dot products (bench W1) stores along one range and has no tile
  return matmul and (LINE_012 or any(u.op is Ops.STORE and len(u.src[0].ranges) >= 2 for u in ast.backward_slice))

def quick_reduce(k:Scheduler, heuristic) -> Scheduler|None:
  """0.14: a quick build of a CPU reduce that is not a matmul: a copy of k with the full build's opts less its UPCASTs, or None where it
  has none (or one lands on another axis). Each upcast lane is a copy of the kernel's graph through ~25 passes of Python codegen (bench
  W5's 4x4 tile of distances: 64 lanes, its cold first call 0.40 -> 0.16 s; W1's 4 rows: 0.21 -> 0.14 s). The UNROLLs stay, so every
  output is reduced in the full build's order. heuristic is hand_coded_optimizations (which calls cpu_quick_reduce: passed, not imported)"""
  if LINE_012 or k.reduceop is None or renderer_device(k.ren) != "CPU" or gemm_like(k.ast): return None
  with Context(QUICK_OPTS=0): full = heuristic(k.copy()).applied_opts
  if not any(o.op is OptOps.UPCAST for o in full): return None
  # an opt's axis is a position among the ranges, which an upcast that takes a whole axis shifts: each opt is applied again to the range
  # of the same arg (a range an opt splits keeps its arg)
  fk, qk = k.copy(), k.copy()
  try:
    for o in full:
      rng = fk.rngs[ax] if (ax:=fk.real_axis(o.op, o.axis)) >= 0 else None
      fk.apply_opt(o)
      if o.op is OptOps.UPCAST: continue
      if rng is not None:
        ax = next(i for i, r in enumerate(qk.rngs) if r.arg == rng.arg)
        ax = qk.unrollable_dims.index(ax) if o.op is OptOps.UNROLL else qk.axes_of(AxisType.REDUCE).index(ax) \
          if o.op in (OptOps.GROUP, OptOps.GROUPTOP) else ax
      qk.apply_opt(Opt(o.op, ax if rng is not None else o.axis, o.arg))
  except (KernelOptError, StopIteration, ValueError): return None
  return qk

def cpu_quick_reduce(k:Scheduler, heuristic) -> Scheduler|None:
  """a quick build (QUICK_OPTS) of a CPU reduce: quick_reduce's Scheduler, or None (the heuristics go on)"""
  return quick_reduce(k, heuristic) if QUICK_OPTS else None

def quick_opts_differ(ast:UOp, ren:Renderer) -> bool:
  """whether a quick build (QUICK_OPTS) of the kernel ast may lack an opt of its full build: the heuristics run and upcast transcendentals,
  may take the CPU matmul tile where it is taller than the quick build's, or (0.14) upcast a reduce's outputs"""
  if NOOPT or not (ast.arg is None or (ast.arg.opts_to_apply is None and ast.arg.applied_opts == ())): return False
  if len(vector_transcendentals(ast, ren)) > 0: return True
  if renderer_device(ren) != "CPU": return False
  if gemm_like(ast): return cpu_tile_bytes() > 256 or not LINE_012
  if LINE_012 or not any(u.op is Ops.REDUCE for u in ast.backward_slice): return False
  from tinygrad.codegen.opt.heuristic import hand_coded_optimizations
  (k:=Scheduler(ast, ren)).convert_loop_to_global()
  return quick_reduce(k, hand_coded_optimizations) is not None

def cpu_transcendental_upcast(k:Scheduler) -> bool:
  """An elementwise kernel whose sin/exp2/log2 are decomposed (no code for them) upcasts an axis they vary along to one 32-byte vector:
  the decomposition runs as vector ops, its rare branch (Payne-Hanek) taken when any lane needs it. A vmap's batch axis is such an
  axis, its examples the lanes (bench W4's Jacobian kernel 1.3 -> 0.7 ms). Its codegen and clang take ~3x as long: not in a quick build"""
  if not (ops:=vector_transcendentals(k.ast, k.ren)): return False
  # 0.14: a quick build keeps them scalar and one a loop step (the generic upcasts' 16 lanes were 1.5x the codegen of none, bench W4)
  if QUICK_OPTS: return not LINE_012
  amt = 32 // max(u.dtype.itemsize for u in ops)
  axes = [ax for ax in k.upcastable_dims if k.full_shape[ax] % amt == 0 and any(k.rngs[ax] in u.backward_slice for u in ops)]
  if not axes: return False
  # of those, the one the store is unit-stride along (vector stores), else the outermost
  unit = [ax for ax in axes if all(unit_stride(k.rngs[ax], st.src[1].get_idx()) for st in stored(k))]
  k.apply_opt(Opt(OptOps.UPCAST, unit[-1] if unit else axes[0], amt))
  return True

def cpu_store_upcast(k:Scheduler) -> bool:
  """With vector ALUs, an elementwise kernel whose loads are unit-stride or broadcast along the store's unit-stride axis upcasts only
  that axis, to one 32-byte vector: each row of the output is written front to back. The generic 4x4 tile writes four rows at once in
  16-byte pieces, which costs most when the output is not in cache (bench W6's per-example outer product: 1.26 -> 0.63 ms)"""
  # a kernel with decomposed transcendentals is cpu_transcendental_upcast's (a quick build leaves them scalar: cheaper to build)
  if not k.ren.vector_alus or k.reduceop is not None or k.upcast_size() != 1 or vector_transcendentals(k.ast, k.ren): return False
  stores, unit = stored(k), lambda ax, b: unit_stride(k.rngs[ax], b.src[1].get_idx())
  if not stores or not (axes:=[ax for ax in k.upcastable_dims if all(unit(ax, st) for st in stores)]): return False
  axis, amt = axes[-1], min(16, 32 // max(b.dtype.base.itemsize for b in k.bufs))
  # a row of one vector keeps the tile (it writes adjacent rows, ran faster), and so does a load that gathers along the axis (a transpose)
  if k.full_shape[axis] % amt or k.full_shape[axis] == amt: return False
  if any(k.rngs[axis] in b.src[1].get_idx().backward_slice and not unit(axis, b) for b in k.bufs): return False
  k.apply_opt(Opt(OptOps.UPCAST, axis, amt))
  return True

def cpu_store_rows(k:Scheduler, amt:int=4) -> bool:
  """0.14 (scalar ALUs): an elementwise kernel whose upcasts leave every store strided (a stack of streams along a batch: the stacked axis
  upcast, each slot its own stream) upcasts the axis the stores are unit-stride along by 4, so each stream gets 4 adjacent scalars that
  clang packs into one vector store, the loads of 4 rows transposed in registers (the kernel 0.112 -> 0.045 ms)"""
  if renderer_device(k.ren) != "CPU" or LINE_012 or k.reduceop is not None or not (1 < k.upcast_size() <= 8): return False
  if not (stores:=stored(k)) or any(unit_stride(r, st.src[1].get_idx()) for st in stores for r in k.ranges_of(AxisType.UPCAST)): return False
  axes = [ax for ax in k.upcastable_dims if k.full_shape[ax] % amt == 0 and all(unit_stride(k.rngs[ax], st.src[1].get_idx()) for st in stores)]
  if not axes: return False
  k.apply_opt(Opt(OptOps.UPCAST, axes[-1], amt))
  return True

def cpu_odd_rows(k:Scheduler, vector_bytes:int=32) -> bool:
  """0.14 (scalar ALUs): an elementwise kernel over rows of 5, 6 or 7 elements (the row upcast, its stores unit-stride along it) upcasts
  the batch by one vector of rows: 8 float rows are 8n adjacent floats, n float8 loads and stores transposed in registers, where a
  row a loop step was n scalar loads and stores (a vmap over rows of 7: 54 -> 77% of a copy's bandwidth; rows of 3 stay, 82 -> 74%)"""
  if renderer_device(k.ren) != "CPU" or LINE_012 or k.reduceop is not None: return False
  if not 5 <= (n:=k.upcast_size()) <= 7: return False
  rows = k.ranges_of(AxisType.UPCAST)
  if not (stores:=stored(k)) or not all(any(unit_stride(r, st.src[1].get_idx()) for r in rows) for st in stores): return False
  amt = vector_bytes // max(b.dtype.itemsize for b in k.bufs)
  if not (axes:=[ax for ax in k.upcastable_dims if k.full_shape[ax] % amt == 0]): return False
  k.apply_opt(Opt(OptOps.UPCAST, axes[-1], amt))
  return True
