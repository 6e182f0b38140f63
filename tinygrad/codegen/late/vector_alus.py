# line: 0.14.0 only (the cpu-vector-alus topic hooks it into codegen/__init__.py's full_rewrite_to_sink)
"""The lanes of a batch upcast kept as vector ALUs from devectorize2 on (clang's ext_vector_type ops), so every later pass, the
transcendentals' decompositions, the linearizer and the renderer walk one copy of the graph, not one a lane.

0.14's codegen splits every ALU of an upcast kernel into scalar lanes in devectorize2 (do_devectorize) and again in "add images"
(ew_devectorizer); cpu_vectors.py's vector_lanes joins them back into float8 ops only after linearizing. For a kernel of
cpu_transcendental_upcast (bench W4: sin and cos over 8 points) every pass in between walked 8 copies of 4 sin decompositions. Here the
arithmetic of shape (lanes,) stays one op (the decompositions build theirs through the mixins, which are shape-aware); comparisons,
WHEREs and bool lanes (clang 14 has no _Bool vectors; vector_lanes keeps them scalar too), integer division and every op the renderer has
no vector form of are split into lanes: upstream's way in devectorize2, the decompositions' ones in the final rewrite (split_lanes), so
the decompositions too build a compare once. Gated on clang's renderer (vector_lanes) and the kernels of cpu_transcendental_upcast
(batch_lanes); VECTOR_ALUS=0 is cpu-vector-lanes' scalar lanes.

VECTOR_ALUS=2 (the default) also keeps the lanes of an upcast of several axes, flattened to one op of their product, in a kernel of at
least 32 lanes that is no matmul tile (upcast_lanes: bench W5's 4x4 output tile unrolled by 4 over the reduce). Its reduce is vertical
(pm_vertical_reduce, before devectorize2): the INDEX of an unrolled step moves through the elementwise ops, so each step is one (16,) op
of the output tile's lanes added to the accumulators in the scalar code's order, and the accumulators move a vector at a time
(cpu_vectors.vector_registers); a (64,) op read a step at a time made as many lane INDEXes as it saved ALUs. Only where the CPU has
AVX-512: with AVX2 each step's (16,) ops are built from float4 loads by cross-lane shuffles of two ymm halves, and W5's kernel ran 2.4 ->
4.3 ms (VECTOR_ALUS=3 keeps them on any machine). On every level, an op whose lanes fold apart (folding_lanes) is split into lanes."""
import functools, itertools
from tinygrad.helpers import ContextVar, prod
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import UOp, Ops, UPat, PatternMatcher, GroupOp
from tinygrad.codegen.devec_elements import element
from tinygrad.codegen.late import cpu_vectors
from tinygrad.codegen.late.cpu_vectors import VECTOR_OPS, lane_decomposition, batch_lanes

VECTOR_ALUS = ContextVar("VECTOR_ALUS", 2)
MIN_UPCAST_LANES = 32   # bench W5's 4x4 output tile unrolled by 4: 64

def vector_alu_lanes(sink:UOp, ren) -> int:
  """the lanes kept as vector ALUs in this kernel: batch_lanes (or upcast_lanes: VECTOR_ALUS=2 where the CPU has AVX-512, 3 on any) for a
  renderer with vector_lanes (clang), else 0 (every other renderer)"""
  if not VECTOR_ALUS or not getattr(ren, "vector_lanes", False): return 0
  return batch_lanes(sink) or (upcast_lanes(sink) if VECTOR_ALUS >= 3 or (VECTOR_ALUS == 2 and cpu_vectors.tile_vector_bytes() > 32) else 0)

def upcast_lanes(sink:UOp) -> int:
  """the lanes of an upcast kernel that keeps them as vector ALUs too: elementwise, or a reduce unrolled (a vertical reduce). A matmul tile
  (a reduce upcast, not unrolled: heuristic_cpu's cpu_gemm_tile) keeps scalar accumulators, which memory_coalescing moves a zmm at a time"""
  from tinygrad.codegen.opt import OptOps
  from tinygrad.uop.ops import AxisType
  opts = sink.arg.applied_opts if sink.arg is not None else ()
  if not (n:=prod(o.arg for o in opts if o.op in (OptOps.UPCAST, OptOps.UNROLL) and o.arg)): return 0
  if any(u.op is Ops.RANGE and u.arg[-1] is AxisType.REDUCE for u in sink.toposort()) and not any(o.op is OptOps.UNROLL for o in opts): return 0
  # a few lanes (bench W1's 4x4 row reduce, W6's 4x4 tiles) cost more in packing and extracting lanes than they save (+1-3% codegen)
  return n if n >= MIN_UPCAST_LANES else 0

def keep_vector(b:UOp) -> bool:
  """b stays one op of shape (n,): arithmetic clang has vector code for, or a transcendental decomposed as vector math"""
  # a transcendental whose decomposition vector_lanes would join, and a reciprocal (clang's decomposition: 1/x)
  if b.op not in VECTOR_OPS and not (b.op in (Ops.SIN, Ops.EXP2, Ops.LOG2) and lane_decomposition(b)) and \
    not (b.op is Ops.RECIPROCAL and b.dtype in (dtypes.float32, dtypes.float64)): return False
  if b.op is Ops.MULACC or b._shape is None or b.max_numel() < 2 or b.dtype is dtypes.bool: return False
  if any(folding_lanes(s) for s in b.src): return False
  # index arithmetic (weakint) stays scalar: the INDEXes' offsets
  return b.dtype is not dtypes.weakint and all(s.dtype not in (dtypes.bool, dtypes.weakint) for s in b.src)

def folding_lanes(s:UOp) -> bool:
  """s's lanes are constants that differ, or constants beside other values: a jacfwd tangent's one-hot seed (bench W4's vmap(jacfwd)).
  Scalar lanes fold (x*0, x+0, x*1) where one vector op would compute every lane: on AVX2 that kernel ran 1.6 -> 2.9 ms as vectors"""
  while s.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE): s = s.src[0]
  return s.op is Ops.STACK and any(e.op is Ops.CONST for e in s.src) and len({(e.op, e.arg) if e.op is Ops.CONST else e for e in s.src}) > 1

def split_lanes(b:UOp) -> UOp|None:
  """an op of shape (n,) the renderer has no vector form of (a decomposition's compare or WHERE) as n scalar ops on its sources' lanes"""
  if b._shape is None or len(b.shape) != 1 or keep_vector(b) or b.op in (Ops.STACK, Ops.INDEX): return None
  if not all(s._shape in (b.shape, ()) for s in b.src): return None
  # after the index dtypes are lowered: a lane's index is an int, as vector_lanes' INDEXes. A scalar source (a constant) is every lane's
  def ln(s:UOp, i:int) -> UOp: return s if s._shape == () else s.index(UOp(Ops.CAST, dtypes.int, (UOp.const(i, dtypes.weakint),), dtypes.int))
  return UOp.stack(*[b.replace(src=tuple(ln(s, i) for s in b.src)) for i in range(b.shape[0])])

_devectorize: list = []   # codegen's do_devectorize (it imports this module): pattern functions take no closures

def keep_1d(b:UOp) -> UOp|None:   # "add images": no movement ops' rules there
  return None if keep_vector(b) and len(b.shape) == 1 else _devectorize[0](b)

def vector_source(s:UOp, b:UOp, n:int) -> UOp:
  """a source of the kept op b as shape (n,): a broadcast element (a constant) as the STACK of its copies, committed to b's dtype where it
  is weak (a weak STACK would commit to the default float: cos's pi/2 in float32 for a float64 kernel)"""
  if s.op is Ops.EXPAND and (x:=s.src[0])._shape is not None and x.max_numel() == 1:
    s = UOp.stack(*[x.index(*[UOp.const(0)]*len(x.shape)) if x.shape else x]*n)
  if s.op is Ops.STACK and b.op not in (Ops.CAST, Ops.BITCAST) and any(e.dtype in dtypes.weaks for e in s.src):
    return UOp.stack(*[e.cast(b.dtype) if e.dtype in dtypes.weaks else e for e in s.src])
  # lanes through movement ops but a RESHAPE (a reduce's INDEX of a PERMUTE): a STACK of them. A vector op's or a load's lanes reshaped
  if s.op is not Ops.RESHAPE and s.op in GroupOp.Movement|{Ops.INDEX}:
    return UOp.stack(*[element(s, tuple(UOp.const(i) for i in ii)) for ii in itertools.product(*[range(d) for d in s.shape])])
  return s if len(s.shape) == 1 else s.reshape((n,))

def keep_or_devectorize(b:UOp) -> UOp|None:   # devectorize2
  if not keep_vector(b): return _devectorize[0](b)
  if not all(s._shape == b.shape for s in b.src): return None
  # lanes along one axis of several, (8,1,1): the op of shape (8,), its sources and result reshaped (their lanes are its lanes)
  srcs = tuple(vector_source(s, b, n:=b.max_numel()) for s in b.src)
  if len(b.shape) == 1: return None if srcs == b.src else b.replace(src=srcs)
  return b.replace(src=srcs).reshape(b.shape)

@functools.cache
def vector_devectorizers(devectorizer2:PatternMatcher, ew_devectorizer:PatternMatcher, devec) -> tuple[PatternMatcher, PatternMatcher]:
  """devectorize2's and "add images"' matchers with their do_devectorize rule (devec) leaving the kept vector ALUs whole"""
  if not _devectorize: _devectorize.append(devec)
  def keeping(pm:PatternMatcher, fxn) -> PatternMatcher: return PatternMatcher([(p, fxn if f is devec else f) for p,f in pm.patterns])
  return keeping(devectorizer2, keep_or_devectorize), keeping(ew_devectorizer, keep_1d)

pm_split_lanes = PatternMatcher([
  (UPat(GroupOp.ALU|{Ops.CAST, Ops.BITCAST}, name="b"), split_lanes),
  # a decomposition's scalar constant broadcast to the lanes (the mixins expand it)
  (UPat(Ops.EXPAND, src=(UPat.var("x"), UPat()), name="out"),
   lambda x,out: UOp.stack(*([x]*out.shape[0])) if x._shape == () and len(out.shape) == 1 else None),
  # and cast (no symbolic folds it this late): the constants cast
  (UPat(Ops.CAST, src=(UPat(Ops.STACK, src=UPat(Ops.CONST), name="s"),), name="c"),
   lambda s,c: UOp.stack(*[x.cast(c.dtype) for x in s.src]) if c.dtype is not dtypes.bool else None),
])

def push_index(idx:UOp, x:UOp, p:UOp|None=None) -> UOp|None:
  """a reduce's unrolled lane taken from an elementwise op (INDEX of constants, through a PERMUTE) as the op of its sources' lanes: the
  reduce's vertical steps, each a vector op of the output lanes, with no lanes to extract from one op of every lane"""
  if x.op not in GroupOp.ALU or x.dtype in (dtypes.weakint, dtypes.bool) or not all(i.op is Ops.CONST for i in idx.src[1:]): return None
  if x._shape is None or any(s._shape != x.shape for s in x.src): return None
  return x.replace(src=tuple((s.permute(p.arg) if p is not None else s).index(*idx.src[1:]) for s in x.src))

pm_vertical_reduce = PatternMatcher([
  (UPat(Ops.INDEX, src=(UPat(Ops.PERMUTE, src=(UPat(name="x"),), name="p"),), allow_any_len=True, name="idx"), push_index),
  (UPat(Ops.INDEX, src=(UPat(GroupOp.ALU, name="x"),), allow_any_len=True, name="idx"), push_index),
])
