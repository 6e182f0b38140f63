# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
"""Which floats clang's kernels move a vector register at a time (the 0.14 line's cpu-codegen topic, hooked into memory_coalescing).

0.14 devectorizes every ALU, and clang vectorizes the scalars back. Its SLP vectorizer packs a register tile's accumulators no wider than
the loads and stores around them: with float4 loads and scalar accumulator stores the matmul tile was xmm FMAs, half of AVX's width
(bench W2 2x the 0.12 line). Global floats and doubles therefore coalesce up to ClangRenderer.vector_bytes (float8, double4), and so does
an accumulator array whose lanes add values loaded from consecutive elements (a matmul's row of B): clang keeps it in vector registers.
Lanes that load elements apart (four rows' sums, each along its own row) keep scalar accumulators, which clang's loop vectorizer
vectorizes along the loop instead (bench W1: a float4 of the four rows' sums was 2x slower).

On an AVX-512 machine a matmul tile's kernel (one with such an accumulator array) moves its floats a zmm register at a time (float16,
double8; tile_vector_bytes) and ClangRenderer builds that kernel alone with AVX-512 (wide_kernel): its broadcasts fold into the FMAs
({1to16}) and a Xeon's two 512-bit FMA ports do twice a ymm's work. Every other kernel stays AVX2 (compiler_cpu: AVX-512's gathers)."""
import functools, pathlib, platform
from tinygrad.dtype import dtypes, AddrSpace, DType
from tinygrad.uop.ops import UOp, Ops

@functools.cache
def tile_vector_bytes() -> int:
  """the bytes a matmul tile's vector registers hold on this machine: 64 (zmm) where the CPU has AVX-512, else 32 (ymm). The tile's
  shape follows it (heuristic_cpu.cpu_tile_bytes: 8 registers of accumulators); tests patch it to force either ISA"""
  try: return 64 if platform.machine() in ("x86_64", "AMD64") and "avx512f" in pathlib.Path("/proc/cpuinfo").read_text().split() else 32
  except OSError: return 32

def wide_kernel(dtypes_used:list[tuple[DType, int]]) -> bool:
  """a kernel whose vectors are wider than AVX's 32 bytes: only a matmul tile's on an AVX-512 machine (vector_lengths)"""
  return any(dt in (dtypes.float, dtypes.double) and dt.itemsize * count > 32 for dt, count in dtypes_used)

def vector_lengths(ctx, buf:UOp, vector_regs:dict[UOp, int]) -> list[int]|None:
  """the lengths a float load or store of buf coalesces to on a renderer with vector_bytes, None where the generic lengths hold. A matmul
  tile's kernel whose rows of accumulators fill a zmm register on an AVX-512 machine moves tile_vector_bytes (vector_registers)"""
  if not (vb:=getattr(ctx, "vector_bytes", 0)) or buf.dtype not in (dtypes.float, dtypes.double): return None
  if buf.addrspace is AddrSpace.REG and buf.buf_uop not in vector_regs: return []
  vb = max([vb, *vector_regs.values()])
  return [l for l in (16, 8, 4, 2) if l * buf.dtype.itemsize <= vb]

def lanes_load_in_a_row(a:UOp, b:UOp, at:dict[UOp, tuple]) -> bool:
  """the values stored to two consecutive lanes each load an element of one global buffer that the other does not, b's the element after
  a's (a matmul's row of B). Loads both lanes share (A's element, broadcast along the row) tell nothing. at: a load's (buf, root, valid)
  and its offset from root, as memory_coalescing groups them"""
  def loads(d:UOp) -> set[tuple]: return {at[l] for l in d.toposort(gate=lambda x: x.op is not Ops.INDEX) if l in at}
  la, lb = loads(a), loads(b)
  return any((key, off+1) in lb - la for key, off in la - lb)

def vector_registers(ctx, memory:dict) -> dict[UOp, int]:
  """the accumulator arrays (REG buffers) to read and write a vector at a time: one whose stores of consecutive lanes load in a row, and
  the bytes a vector of it moves: tile_vector_bytes where a row of its lanes fills one (a 4x16 float tile's rows with AVX-512), else
  vector_bytes (a zmm across two rows of 8 floats, bench W2's second kernel, took 0.21 -> 0.35 ms). memory: memory_coalescing's loads
  and stores, grouped by (op, buf, root, valid) and then by offset from root"""
  if not (vb:=getattr(ctx, "vector_bytes", 0)): return {}
  at = {l:(key[1:], off) for key, offsets in memory.items() if key[0] is Ops.LOAD and key[1].addrspace is AddrSpace.GLOBAL
        for off, ls in offsets.items() for l in ls}
  ret: dict[UOp, int] = {}
  for (op, buf, _, _), offsets in memory.items():
    if op is not Ops.STORE or buf.addrspace is not AddrSpace.REG or buf.buf_uop in ret: continue
    # consecutive lanes tell: a tile's rows all load the same way. The first pair says whether it is a tile, its run how long a row is
    if (a:=next((a for a in sorted(offsets) if a+1 in offsets), None)) is None: continue
    row = 1
    while a+row in offsets and lanes_load_in_a_row(offsets[a+row-1][0].src[1], offsets[a+row][0].src[1], at): row += 1
    if row == 1: continue
    ret[buf.buf_uop] = wide if row * buf.dtype.itemsize >= (wide:=tile_vector_bytes()) > vb else vb
  return ret
