# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
"""Which floats clang's kernels move a vector register at a time (the 0.14 line's cpu-codegen topic, hooked into memory_coalescing).

0.14 devectorizes every ALU, and clang vectorizes the scalars back. Its SLP vectorizer packs a register tile's accumulators no wider than
the loads and stores around them: with float4 loads and scalar accumulator stores the matmul tile was xmm FMAs, half of AVX's width
(bench W2 2x the 0.12 line). Global floats and doubles therefore coalesce up to ClangRenderer.vector_bytes (float8, double4), and so does
an accumulator array whose lanes add values loaded from consecutive elements (a matmul's row of B): clang keeps it in vector registers.
Lanes that load elements apart (four rows' sums, each along its own row) keep scalar accumulators, which clang's loop vectorizer
vectorizes along the loop instead (bench W1: a float4 of the four rows' sums was 2x slower)."""
from tinygrad.dtype import dtypes, AddrSpace
from tinygrad.uop.ops import UOp, Ops

def vector_lengths(ctx, buf:UOp, vector_regs:set[UOp]) -> list[int]|None:
  """the lengths a float load or store of buf coalesces to on a renderer with vector_bytes, None where the generic lengths hold"""
  if not (vb:=getattr(ctx, "vector_bytes", 0)) or buf.dtype not in (dtypes.float, dtypes.double): return None
  if buf.addrspace is AddrSpace.REG and buf.buf_uop not in vector_regs: return []
  return [l for l in (8, 4, 2) if l * buf.dtype.itemsize <= vb]

def lanes_load_in_a_row(a:UOp, b:UOp, at:dict[UOp, tuple]) -> bool:
  """the values stored to two consecutive lanes each load an element of one global buffer that the other does not, b's the element after
  a's (a matmul's row of B). Loads both lanes share (A's element, broadcast along the row) tell nothing. at: a load's (buf, root, valid)
  and its offset from root, as memory_coalescing groups them"""
  def loads(d:UOp) -> set[tuple]: return {at[l] for l in d.toposort(gate=lambda x: x.op is not Ops.INDEX) if l in at}
  la, lb = loads(a), loads(b)
  return any((key, off+1) in lb - la for key, off in la - lb)

def vector_registers(ctx, memory:dict) -> set[UOp]:
  """the accumulator arrays (REG buffers) to read and write a vector at a time: one whose stores of consecutive lanes load in a row.
  memory: memory_coalescing's loads and stores, grouped by (op, buf, root, valid) and then by offset from root"""
  if not getattr(ctx, "vector_bytes", 0): return set()
  at = {l:(key[1:], off) for key, offsets in memory.items() if key[0] is Ops.LOAD and key[1].addrspace is AddrSpace.GLOBAL
        for off, ls in offsets.items() for l in ls}
  ret: set[UOp] = set()
  for (op, buf, _, _), offsets in memory.items():
    if op is not Ops.STORE or buf.addrspace is not AddrSpace.REG or buf.buf_uop in ret: continue
    # two consecutive lanes tell: a tile's lanes all load the same way
    if (a:=next((a for a in sorted(offsets) if a+1 in offsets), None)) is None: continue
    if lanes_load_in_a_row(offsets[a][0].src[1], offsets[a+1][0].src[1], at): ret.add(buf.buf_uop)
  return ret
