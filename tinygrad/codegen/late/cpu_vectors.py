# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
"""Which floats clang's kernels move a vector register at a time (the 0.14 line's cpu-codegen topic, hooked into memory_coalescing), and
the lanes of a batch upcast joined into vector ALUs (vector_lanes, below: the cpu-vector-lanes topic, hooked into do_linearize).

0.14 devectorizes every ALU, and clang vectorizes the scalars back. Its SLP vectorizer packs a register tile's accumulators no wider than
the loads and stores around them: with float4 loads and scalar accumulator stores the matmul tile was xmm FMAs, half of AVX's width
(bench W2 2x the 0.12 line). Global floats and doubles therefore coalesce up to ClangRenderer.vector_bytes (float8, double4), and so does
an accumulator array whose lanes add values loaded from consecutive elements (a matmul's row of B): clang keeps it in vector registers.
Lanes that load elements apart (four rows' sums, each along its own row) keep scalar accumulators, which clang's loop vectorizer
vectorizes along the loop instead (bench W1: a float4 of the four rows' sums was 2x slower).

On an AVX-512 machine a matmul tile's kernel (one with such an accumulator array) moves its floats a zmm register at a time (float16,
double8; tile_vector_bytes) and ClangRenderer builds that kernel alone with AVX-512 (wide_kernel): its broadcasts fold into the FMAs
({1to16}) and a Xeon's two 512-bit FMA ports do twice a ymm's work. Every other kernel stays AVX2 (compiler_cpu: AVX-512's gathers)."""
import functools, heapq, pathlib, platform
from collections import defaultdict
from tinygrad.dtype import dtypes, AddrSpace, DType
from tinygrad.uop.ops import UOp, Ops, AxisType

@functools.cache
def tile_vector_bytes() -> int:
  """the bytes a matmul tile's vector registers hold on this machine: 64 (zmm) where the CPU has AVX-512, else 32 (ymm). The tile's
  shape follows it (heuristic_cpu.cpu_tile_bytes: 8 registers of accumulators); tests patch it to force either ISA"""
  try: return 64 if platform.machine() in ("x86_64", "AMD64") and "avx512f" in pathlib.Path("/proc/cpuinfo").read_text().split() else 32
  except OSError: return 32

def wide_kernel(dtypes_used:list[tuple[DType, int]]) -> bool:
  """a kernel whose vectors are wider than AVX's 32 bytes on an AVX-512 machine: a matmul tile's (vector_lengths), a vertical reduce's
  (vector_alus.py: (16,) ALUs). On an AVX2 machine those ALUs are two ymm ops each, never AVX-512 code"""
  return tile_vector_bytes() > 32 and any(dt in (dtypes.float, dtypes.double) and dt.itemsize * count > 32 for dt, count in dtypes_used)

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

def lanes_of_a_vector(a:UOp, b:UOp) -> bool:
  """a and b are consecutive lanes of one vector op (INDEX of constants)"""
  return a.op is b.op is Ops.INDEX and a.src[0] is b.src[0] and a.src[0]._shape is not None and len(a.src[0].shape) == 1 and \
    len(a.src) == len(b.src) == 2 and a.src[1].op is b.src[1].op is Ops.CONST and b.src[1].arg == a.src[1].arg + 1

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
    # an accumulator of vector ALUs (codegen/late/vector_alus.py: a vertical reduce) stores a vector's lanes in a row: it moves vb at a time
    if row == 1 and lanes_of_a_vector(offsets[a][0].src[1], offsets[a+1][0].src[1]): ret[buf.buf_uop] = vb
    if row == 1: continue
    ret[buf.buf_uop] = wide if row * buf.dtype.itemsize >= (wide:=tile_vector_bytes()) > vb else vb
  return ret

def lane_decomposition(alu:UOp) -> bool:
  """a decomposed transcendental whose scalar lanes vector_lanes joins: float32's sin, exp2 and log2, float64's sin (float64's exp2 and log2
  are built on float64<->int64 conversions AVX2 has no vector form of)"""
  if alu.dtype not in (dtypes.float32, dtypes.float64): return False
  return alu.op is Ops.SIN or (alu.op in (Ops.EXP2, Ops.LOG2) and alu.dtype == dtypes.float32)

# ---- the lanes of a batch upcast as vector ALUs (0.14: every ALU is scalar after devectorizing; clang's SLP vectorizer packs lanes only
# from vector loads and stores, and a batch of examples whose rows are not a vector apart has none: bench W4's Jacobian, its 8 points'
# sin and cos as 8 scalar chains). vector_lanes joins the isomorphic ops of the lanes back into one op of shape (lanes,), as the 0.12
# line's codegen keeps them: the arithmetic as clang ext_vector_type ops, comparisons and WHEREs (bool lanes) scalar as there.
VECTOR_OPS = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR, Ops.MULACC, Ops.CAST, Ops.BITCAST}
MIN_VECTOR_OPS = 32   # W4's kernel joins ~170, W2's matmul tile 1
LANE_OPS = VECTOR_OPS | {Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}   # ops that keep an element's lane (the rest are left as they are)

def _const_val(u:UOp):
  if u.op is Ops.CAST and u.src[0].op is Ops.CONST: u = u.src[0]
  return u.arg if u.op is Ops.CONST and isinstance(u.arg, int) else None

def _element(u:UOp) -> tuple[UOp, UOp|None, int]|None:
  """(buffer, base, offset) of the global element a scalar load reads (LOAD of INDEX, or a lane of a vector LOAD of SHRINK)"""
  i = 0
  if u.op is Ops.INDEX and u.src[0].op is Ops.LOAD and u.src[0].src[0].op is Ops.SHRINK and (i:=_const_val(u.src[1])) is not None: u = u.src[0]
  elif u.op is not Ops.LOAD or u._shape != (): return None
  if not (idx:=u.src[0]).op in (Ops.INDEX, Ops.SHRINK) or idx.src[0].op is not Ops.PARAM or idx.src[0].addrspace is not AddrSpace.GLOBAL: return None
  if len(u.src) != 1: return None   # a gated load: left scalar
  off = idx.src[1]
  if (c:=_const_val(off)) is not None: return idx.src[0], None, c+i
  if off.op is Ops.ADD and (c:=_const_val(off.src[1])) is not None: return idx.src[0], off.src[0], c+i
  return idx.src[0], off, i

def _progressions(offsets:set[int], lanes:int) -> dict[int, tuple[int, int]]|None:
  """the offsets split into progressions of `lanes` elements, one stride apart: offset -> (the progression's first offset, lane)"""
  srt = sorted(offsets)
  for stride in sorted({o - srt[0] for o in srt[1:]}):
    ret: dict[int, tuple[int, int]] = {}
    for o in srt:
      if o in ret: continue
      run = [o + stride*l for l in range(lanes)]
      if any(x not in offsets or x in ret for x in run): break
      ret.update({x:(o, l) for l,x in enumerate(run)})
    else: return ret
  return None

def vector_lanes(lst:list[UOp], lanes:int) -> list[UOp]:
  """lst (a linearized kernel) with the isomorphic ops of `lanes` lanes joined into vector ops; lst itself where nothing joins"""
  if lanes < 2: return lst
  # the lanes of the global elements: per buffer and base, their offsets are progressions of `lanes`, an element's lane its place in one
  elems = {u:e for u in lst if (e:=_element(u)) is not None}
  groups: dict[tuple, set[int]] = defaultdict(set)
  for b,base,o in elems.values(): groups[(b, base)].add(o)
  runs = {k:p for k,offs in groups.items() if len(offs) % lanes == 0 and (p:=_progressions(offs, lanes)) is not None}
  # each op's key (its structure over the lanes) and lane: a key every lane has once is a vector op
  key: dict[UOp, int] = {}
  lane: dict[UOp, int] = {}
  slots: dict[int, dict[int, UOp]] = defaultdict(dict)
  keys: dict[tuple, int] = {}   # a key's structure -> its number (nested tuples would hash the whole tree again at every op)
  clash: set[int] = set()
  for u in lst:
    if (e:=elems.get(u)) is not None and e[:2] in runs:
      first, l = runs[e[:2]][e[2]]
      key[u], lane[u] = keys.setdefault(("elem", *e[:2], first, u.dtype), len(keys)), l
    elif u.op in LANE_OPS and (ls:={lane[s] for s in u.src if s in lane}):
      if len(ls) != 1: continue
      key[u], lane[u] = keys.setdefault((u.op, u.arg, u.dtype, tuple(key.get(s, s) for s in u.src)), len(keys)), ls.pop()
    else: continue
    if slots[key[u]].setdefault(lane[u], u) is not u: clash.add(key[u])
  full = {k for k,s in slots.items() if len(s) == lanes and k not in clash}
  vec = [k for k in full if (m:=slots[k][0]).op in VECTOR_OPS and m.dtype is not dtypes.bool and all(s.dtype is not dtypes.bool for s in m.src)]
  # a few joined ops (a matmul tile's, a generic upcast's) cost more in packing and unpacking lanes than they save
  if len(vec) < MIN_VECTOR_OPS: return lst
  order = {u:i for i,u in enumerate(lst)}
  # the new ops: a vector op per joined key, its scalar lanes read back with INDEX, scalar lanes packed into a STACK where a vector op reads them
  new: dict[UOp, UOp] = {}
  vectors: dict[int, UOp] = {}
  prio: dict[UOp, int] = {}
  def lane_const(l:int) -> UOp: return UOp(Ops.CAST, dtypes.int, (UOp.const(l, dtypes.weakint),), dtypes.int)
  vset = set(vec)
  def vector_of(k:int) -> UOp:
    if (v:=vectors.get(k)) is not None: return v
    members = slots[k]
    m0 = members[0]
    srcs = []
    for j,s in enumerate(m0.src):
      if s not in lane: srcs.append(new.get(s, s)); continue
      sk = key[s]
      if sk in vset: srcs.append(vector_of(sk))
      else:
        st = UOp(Ops.STACK, s.dtype, tuple(get(members[l].src[j]) for l in range(lanes)))
        prio[st] = min(order[m] for m in members.values())
        srcs.append(st)
    v = vectors[k] = UOp(m0.op, m0.dtype, tuple(srcs), m0.arg)
    prio[v] = min(order[m] for m in members.values())
    return v
  def get(u:UOp) -> UOp:
    if (r:=new.get(u)) is not None: return r
    if u in lane and key[u] in vset:
      r = UOp(Ops.INDEX, u.dtype, (vector_of(key[u]), lane_const(lane[u])))
    else: r = u.replace(src=tuple(get(s) for s in u.src)) if u.src else u
    new[u] = r
    prio.setdefault(r, order.get(u, 0))
    return r
  for u in lst: get(u)
  # re-linearize: every new op after its sources, as close to the old order as they allow
  outs = [new[u] for u in lst]
  nodes: dict[UOp, int] = {}   # every op the new list holds, numbered sources first (no recursion: a kernel's chains of ops are long)
  for root in outs:
    todo = [(root, False)]
    while todo:
      u, done = todo.pop()
      if u in nodes: continue
      if done: nodes[u] = len(nodes)
      else: todo += [(u, True), *[(s, False) for s in reversed(u.src) if s not in nodes]]
  deps = {u:set(u.src) for u in nodes}
  users: dict[UOp, list[UOp]] = defaultdict(list)
  for u,ds in deps.items():
    for d in ds: users[d].append(u)
  ready = [(prio.get(u, 0), nodes[u], u) for u,ds in deps.items() if not ds]   # ties in the numbering's order: the same list each time
  heapq.heapify(ready)
  out: list[UOp] = []
  while ready:
    u = heapq.heappop(ready)[2]
    out.append(u)
    for v in users[u]:
      deps[v].discard(u)
      if not deps[v]: heapq.heappush(ready, (prio.get(v, 0), nodes[v], v))
  from tinygrad.codegen.late.cold_branch import _in_scope
  return out if len(out) == len(nodes) and _in_scope(out) else lst

def batch_lanes(sink:UOp) -> int:
  """the lanes of cpu_transcendental_upcast's upcast (heuristic_cpu.py): its last opt, one 32-byte vector of the kernel's widest float"""
  from tinygrad.codegen.opt import OptOps
  opts = sink.arg.applied_opts if sink.arg is not None else ()
  fl = [u.dtype.itemsize for u in sink.toposort() if u.op is Ops.PARAM and u.dtype in (dtypes.float, dtypes.double)]
  if not opts or not fl or any(o.op is not OptOps.UPCAST for o in opts): return 0
  if any(u.op is Ops.RANGE and u.arg[-1] is AxisType.REDUCE for u in sink.toposort()): return 0   # the rule is for elementwise kernels
  return opts[-1].arg if opts[-1].arg * max(fl) == 32 else 0
