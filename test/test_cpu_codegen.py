"""The CPU codegen patches the benchmarks led to (bench/analysis.md): the matmul register tile with float8 loads, taller with AVX-512
(codegen/opt/heuristic_cpu.py, codegen/late/devectorizer.py), its broadcasts rendered as splats (renderer/cstyle.py), row and column reduces
and elementwise stores as one 32-byte vector (heuristic_cpu.py), vector ALUs kept for clang (Renderer.vector_alus), an upcast stack's lanes
as a shuffle (codegen/late/devectorizer.py), Payne-Hanek's shifts as shifts (uop/decompositions.py), sin and cos's shared reduction
running under a branch (codegen/late/cold_branch.py), clang started before it is needed (runtime/support/compiler_cpu.py) and given
a schedule's kernels in one file (engine/realize.py). Results are checked against numpy; the kernel structure (opts, float8,
reductions) is asserted exactly, never timed."""
from fork_topics import skip_module_unless
skip_module_unless('cpu-vector-alus', 'cpu-heuristics', 'cpu-cold-branch', 'cpu-payne-hanek-shifts', 'clang-first-call')   # 0.12's
import threading, unittest, unittest.mock, inspect, math, os, signal, subprocess, sys, platform, mmap, ctypes
import numpy as np
from tinygrad import Tensor, Device, TinyJit, dtypes, vmap
from tinygrad.codegen import get_program
from tinygrad.codegen.opt import OptOps, Opt
from tinygrad.helpers import Context, getenv, diskcache_get, diskcache_put
from tinygrad.uop.ops import UOp, Ops, GroupOp, KernelInfo
from tinygrad.codegen.opt.heuristic_cpu import quick_opts_differ, cpu_tile_bytes
from tinygrad.engine.realize import CompiledRunner, get_runner, method_cache
from tinygrad.engine.tiered import quick_tier, finish_full_builds
from tinygrad.runtime.support.compiler_cpu import ClangJITCompiler

def pairwise_dist(p:Tensor, q:Tensor) -> Tensor: return ((p - q) ** 2).sum().sqrt()  # bench W5's per-pair function
def pairwise(a:Tensor, b:Tensor) -> Tensor: return vmap(vmap(pairwise_dist, in_axes=(None, 0)), in_axes=(0, None))(a, b)

def tile(p) -> list[tuple[OptOps, int]]: return [(o.op, o.arg) for o in p.applied_opts if o.op is not OptOps.THREAD]

def program(t:Tensor, opts=None):
  """the ProgramSpec of the last kernel that realizes t (opts: instead of the heuristics')"""
  return get_program([si for si in t.schedule() if si.ast.op.name == "SINK"][-1].ast, Device[Device.DEFAULT].renderer, opts)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics and decompositions")
class TestCPUMatmulTile(unittest.TestCase):
  def check_matmul(self, m:int, k:int, n:int, dtype=np.float32, transpose_b=False):
    rng = np.random.default_rng(m*k*n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    got = (Tensor(a) @ (Tensor(b).T if transpose_b else Tensor(b))).numpy()
    want = a.astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4 if dtype == np.float32 else 1e-10)

  def test_shapes_float32(self):
    for m, k, n in [(64, 64, 64), (20, 64, 8), (12, 5, 4), (36, 7, 24), (8, 33, 48), (3, 4, 5), (1, 16, 16), (16, 16, 1)]:
      with self.subTest(shape=(m, k, n)): self.check_matmul(m, k, n)

  def test_shapes_float64(self):
    for m, k, n in [(64, 64, 64), (12, 5, 8), (36, 7, 24)]:
      with self.subTest(shape=(m, k, n)): self.check_matmul(m, k, n, np.float64)

  def test_transposed_b(self):
    for m, k, n in [(64, 64, 64), (12, 16, 8)]:
      with self.subTest(shape=(m, k, n)): self.check_matmul(m, k, n, transpose_b=True)

  def test_tile_float32(self):
    # N unit-stride in B: 4 rows (8 with AVX-512) by 16 columns (two float8) of accumulators, the reduce not unrolled. Rows are upcast
    # first, so a row's columns are adjacent lanes of the accumulator vector: a float8 of B times a broadcast of A
    p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 64))
    self.assertEqual(tile(p), [(OptOps.UPCAST, cpu_tile_bytes() // 64), (OptOps.UPCAST, 16)])
    self.assertIn("float8", p.src)

  def test_tile_rows_fill_eight_registers(self):
    # 256 bytes of accumulators with AVX2 (8 of its 16 registers), 512 with AVX-512 (8 of 32): 4 or 8 rows of 16 floats or 8 doubles
    import tinygrad.codegen.opt.heuristic_cpu as heuristic
    for nbytes, rows in ((256, 4), (512, 8)):
      with self.subTest(nbytes=nbytes), unittest.mock.patch.object(heuristic, "cpu_tile_bytes", lambda: nbytes):
        self.assertEqual(tile(program(Tensor.empty(64, 64) @ Tensor.empty(64, 64))), [(OptOps.UPCAST, rows), (OptOps.UPCAST, 16)])
        f64 = Tensor.empty(64, 64, dtype=dtypes.float64)
        self.assertEqual(tile(program(f64 @ Tensor.empty(64, 64, dtype=dtypes.float64))), [(OptOps.UPCAST, rows), (OptOps.UPCAST, 8)])
        rng = np.random.default_rng(nbytes)
        a, b = rng.standard_normal((24, 32)).astype(np.float32), rng.standard_normal((32, 48)).astype(np.float32)
        np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)

  def test_quick_build_takes_the_avx2_tile(self):
    # AVX-512's 8x16 tile costs ~25 ms more codegen and clang than 4x16: a first (quick) build takes 4x16, the full build 8x16
    import tinygrad.codegen.opt.heuristic_cpu as heuristic
    rng = np.random.default_rng(16)
    a, b = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    si = [si for si in (Tensor(a).realize() @ Tensor(b).realize()).schedule() if si.ast.op is Ops.SINK][-1]
    for b_ in si.bufs: b_.ensure_allocated()
    with unittest.mock.patch.object(heuristic, "cpu_tile_bytes", lambda: 256):
      self.assertFalse(quick_opts_differ(si.ast, Device["CPU"].renderer))
    with unittest.mock.patch.object(heuristic, "cpu_tile_bytes", lambda: 512):
      self.assertTrue(quick_opts_differ(si.ast, Device["CPU"].renderer))
      self.assertFalse(quick_opts_differ([s for s in Tensor.empty(64, 64).sum(1).schedule() if s.ast.op is Ops.SINK][-1].ast, Device["CPU"].renderer))
      if not quick_tier(Device["CPU"].compiler): self.skipTest("no quick tier (TIERED=0 or BEAM)")
      r = get_runner("CPU", si.ast)
      for full, rows in ((False, 4), (True, 8)):
        if full: finish_full_builds([r])
        self.assertEqual(tile(r.p), [(OptOps.UPCAST, rows), (OptOps.UPCAST, 16)])
        r(si.bufs, {}, wait=True)
        np.testing.assert_allclose(np.frombuffer(si.bufs[0].as_buffer(), np.float32).reshape(40, 32), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)

  def test_tile_bytes_of_this_machine(self):
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    self.assertEqual(cpu_tile_bytes(), 512 if platform.machine() in ("x86_64", "AMD64") and "avx512f" in flags else 256)

  def test_tile_narrow_n(self):
    # N=8: one float8 per row, so 8 rows
    p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 8))
    self.assertEqual(tile(p), [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)])

  def test_tile_float64(self):
    # the same bytes of accumulators: 8 doubles by 4 rows (8 with AVX-512)
    p = program(Tensor.empty(64, 64, dtype=dtypes.float64) @ Tensor.empty(64, 64, dtype=dtypes.float64))
    self.assertEqual(tile(p), [(OptOps.UPCAST, cpu_tile_bytes() // 64), (OptOps.UPCAST, 8)])

  def test_transposed_b_keeps_generic_opts(self):
    # not the matmul tile: B.T's N axis is strided. Its rows are contiguous along K, as A's: a row reduce (see TestCPUVectorALUs)
    p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 64).T)
    self.assertIn(OptOps.UNROLL, [o.op for o in p.applied_opts])

  def test_vmapped_mlp(self):
    # bench W2: a per-example MLP, both of its kernels on the tile, against a numpy loop over examples
    rng = np.random.default_rng(2)
    x, w1, b1, w2, b2 = (rng.standard_normal(s).astype(np.float32) for s in [(40, 64), (64, 64), (64,), (64, 8), (8,)])
    def mlp(x, w1, b1, w2, b2): return (x @ w1 + b1).relu() @ w2 + b2
    batched = vmap(mlp, in_axes=(0, None, None, None, None))
    got = batched(*map(Tensor, (x, w1, b1, w2, b2))).numpy()
    # the relu's where masks the hidden layer's axes: the tile must not be upcast further on top (256 accumulators spilled)
    sched = batched(*map(Tensor, (x, w1, b1, w2, b2))).schedule()
    self.assertEqual([tile(get_program(si.ast, Device["CPU"].renderer)) for si in sched if si.ast.op.name == "SINK"],
                     [[(OptOps.UPCAST, cpu_tile_bytes() // 64), (OptOps.UPCAST, 16)], [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)]])
    want = np.stack([np.maximum(e @ w1 + b1, 0) @ w2 + b2 for e in x.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

  def test_float8_not_on_stack_buffers(self):
    # a kernel-local buffer (PCONTIG's temp of a double matmul) is a stack array, not 32-byte aligned: float8 there segfaulted
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(3))
    for opts in [(Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 4))]:
      with Context(PCONTIG=2): got = (Tensor(a) @ Tensor(b) @ Tensor(c)).contiguous(arg=opts).numpy()
      np.testing.assert_allclose(got, a.astype(np.float64) @ b @ c, rtol=1e-4, atol=1e-4)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the clang renderer's vector ALUs")
class TestCPUVectorALUs(unittest.TestCase):
  # clang compiles ext_vector_type arithmetic itself: devectorize splits only ops the renderer has no code for and kernel-local buffers
  def alus(self, p) -> set[tuple[str, int]]: return {(u.op.name, u.dtype.count) for u in p.uops if u.op in GroupOp.ALU and u.op is not Ops.SHL}

  def test_half_max_and_where_compile(self):
    # an upcast float16 maximum (a compare and a select) as __fp16 vectors didn't compile: clang's C can't select with their short compare
    x = np.random.default_rng(0).standard_normal((3, 4, 8)).astype(np.float16)
    got = vmap(lambda r: r.maximum(r * 2).softplus())(Tensor(x)).numpy()
    m = np.maximum(x, x * 2).astype(np.float64)
    np.testing.assert_allclose(got, np.log1p(np.exp(m)), rtol=5e-3, atol=5e-3)

  def test_matmul_tile_is_vector_fmas(self):
    # the 4x16 tile (8x16 with AVX-512) is one 64-lane (128-lane) accumulator: a multiply and an add per reduce step, not 64 scalar ones
    p, lanes = program(Tensor.empty(64, 64) @ Tensor.empty(64, 64)), cpu_tile_bytes() // 4
    self.assertEqual(self.alus(p), {("MUL", lanes), ("ADD", lanes), ("ADD", 1)})

  def test_matmul_tile_broadcasts_are_splats(self):
    # each of A's rows is splat over its 16 lanes and the splats concatenated: listed lane by lane, clang 14 loaded the strided
    # scalars as one vector (a gather with AVX-512, 2.8x slower). Both ISAs' tiles (forced, not the host's): AVX2's 4 rows, AVX-512's 8.
    # B's row (two float8 loads) is repeated per row of A as a list of its lanes, each once: no literal lists a scalar twice in a row
    import re, tinygrad.codegen.opt.heuristic_cpu as heuristic
    for nbytes in (256, 512):
      with self.subTest(nbytes=nbytes), unittest.mock.patch.object(heuristic, "cpu_tile_bytes", lambda: nbytes):
        p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 64))
        self.assertIn("__builtin_shufflevector(__builtin_shufflevector((float16)(", p.src)
        self.assertIn(f"typedef float float{nbytes//4} ", p.src)
        for lanes in re.findall(r"\(float\d+\)\{([^{}]*)\}", p.src):
          lanes = [l.strip() for l in lanes.split(",")]
          self.assertFalse(any(a == b for a, b in zip(lanes, lanes[1:])), f"a scalar listed lane by lane: {lanes[:8]}")

  def test_splat_runs(self):
    from tinygrad.renderer.cstyle import splat_run
    a, b, c, d = [UOp.const(dtypes.float, v) for v in (1.0, 2.0, 3.0, 4.0)]
    vec = lambda *s, dt=dtypes.float: UOp(Ops.VECTORIZE, dt.vec(len(s)), s)
    self.assertEqual(splat_run(vec(a, a, b, b)), 2)
    self.assertEqual(splat_run(vec(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d)), 4)
    for i, lanes in enumerate([(a, b), (a, a, a, a), (a, a, b, b, c, c), (a, a, b, a), (a, a, a, b)]):
      with self.subTest(case=i): self.assertEqual(splat_run(vec(*lanes)), 0)
    t, f = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
    self.assertEqual(splat_run(vec(t, t, f, f, dt=dtypes.bool)), 0)   # no bool vectors in C

  def test_splats_against_numpy(self):
    # the tile's splats in float32 and float64 (float8 rows of 4 doubles)
    rng = np.random.default_rng(13)
    for dt in (np.float32, np.float64):
      a, b = rng.standard_normal((20, 64)).astype(dt), rng.standard_normal((64, 48)).astype(dt)
      np.testing.assert_allclose((Tensor(a) @ Tensor(b)).relu().numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-5, atol=1e-5)

  def test_upcast_elementwise_stays_vector(self):
    p = program((Tensor.empty(64) * 3 + 1).contiguous(arg=(Opt(OptOps.UPCAST, 0, 4),)))
    self.assertEqual(self.alus(p), {("MUL", 4), ("ADD", 4)})

  def test_decomposed_transcendentals_are_vectors(self):
    # sin/exp2/log2 have no C code on the CPU: float32's are decomposed as vectors (SIMD over the lanes), float64's exp2 per lane
    # (built on float64<->int64 conversions AVX2 has no vector form of), float64's sin as a vector
    for dt, fn, vector in ((dtypes.float32, Tensor.exp2, True), (dtypes.float32, Tensor.log2, True), (dtypes.float32, Tensor.sin, True),
                           (dtypes.float64, Tensor.exp2, False), (dtypes.float64, Tensor.sin, True)):
      with self.subTest(dtype=dt, fn=fn.__name__):
        p = program(fn(Tensor.empty(64, dtype=dt)).contiguous(arg=(Opt(OptOps.UPCAST, 0, 4),)))
        self.assertEqual({n for n, c in self.alus(p) if c > 1} >= {"MUL", "ADD"}, vector)

  def test_transcendental_upcasts_a_vector(self):
    # an elementwise kernel with a decomposed transcendental upcasts the axis it varies along to 32 bytes: the store's unit-stride axis,
    # else the outermost (a vmap's batch, the kernel of bench W4's Jacobian: the 6 and 4 of each example's stack stay masked upcasts)
    self.assertEqual(tile(program(Tensor.empty(64, 64).exp())), [(OptOps.UPCAST, 8)])
    self.assertEqual(tile(program(Tensor.empty(64, 64, dtype=dtypes.float64).sin())), [(OptOps.UPCAST, 4)])
    p = program(vmap(lambda s: Tensor.stack(s[0].sin(), s[1], s[0].cos() * 2))(Tensor.empty(64, 2)))
    self.assertEqual([(o.op, o.axis, o.arg) for o in p.applied_opts], [(OptOps.UPCAST, 1, 0), (OptOps.UPCAST, 0, 8)])
    # sqrt has C code: not a transcendental upcast (the quick build is the same program), the store's
    sqrt = [si for si in Tensor.empty(64, 64).sqrt().schedule() if si.ast.op is Ops.SINK][-1].ast
    self.assertFalse(quick_opts_differ(sqrt, Device["CPU"].renderer))
    self.assertEqual(tile(get_program(sqrt, Device["CPU"].renderer)), [(OptOps.UPCAST, 8)])

  def test_integer_division_is_scalar(self):
    # a padded lane's divisor is 0: as a vector every lane divided and the kernel died of SIGFPE (upstream's test_div_padded_arange)
    code = """from tinygrad import Tensor, dtypes
y = Tensor.full((2, 2), 16).idiv(Tensor.linspace(2, 8, steps=4, dtype=dtypes.int).reshape(2, 2)).pad(((1, 1), (1, 1)))
print(y.sum(axis=1).tolist())"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CPU": "1"}, timeout=120)
    self.assertEqual((out.returncode, out.stdout.strip()), (0, "[0, 12, 4, 0]"), out.stderr[-2000:])
    p = program((Tensor.empty(64, dtype=dtypes.int) // Tensor.empty(64, dtype=dtypes.int)).contiguous(arg=(Opt(OptOps.UPCAST, 0, 4),)))
    self.assertEqual({n for n, c in self.alus(p) if c > 1}, set())

  def test_bool_accumulator(self):
    # C has no vectors of _Bool: an upcast any() keeps scalar registers
    x = np.random.default_rng(7).standard_normal((64, 16)).astype(np.float32)
    got = (Tensor(x) > 1.5).any(axis=1).contiguous(arg=(Opt(OptOps.UPCAST, 0, 4),)).numpy()
    np.testing.assert_equal(got, (x > 1.5).any(axis=1))

  def test_upcast_constant_store(self):
    # only a register's init stores a bare constant for C to splat; a global float4 store of a constant keeps its vector
    np.testing.assert_equal(Tensor.full((24,), 2.5).contiguous(arg=(Opt(OptOps.UPCAST, 0, 4),)).numpy(), np.full(24, 2.5, np.float32))

  def test_outer_product_upcast_is_one_vector(self):
    # pairwise distances (bench W5) over points of 5 (the reduce doesn't take a 32-byte vector): the outermost axis, along which the
    # other points are broadcast and which is unit-stride in the store, is upcast to one float8 alone (a 4x4 tile of it was float4 math
    # split four ways by the store)
    p = program(pairwise(Tensor.empty(64, 5), Tensor.empty(64, 5)))
    self.assertEqual([(o.op, o.axis, o.arg) for o in p.applied_opts][0], (OptOps.UPCAST, 0, 8))
    self.assertIn(("ADD", 8), self.alus(p))

  def test_pairwise_distances_read_points_as_vectors(self):
    # points of 16 are contiguous along the reduce: 32-byte loads of each point into a vector accumulator, 4 pairs at a time, on the
    # stored axis, whether it is the outer or the inner loop
    self.assertEqual(tile(program(pairwise(Tensor.empty(64, 16), Tensor.empty(64, 16)))), [(OptOps.UPCAST, 4), (OptOps.UNROLL, 8)])
    p = program(((Tensor.empty(64, 1, 16) - Tensor.empty(1, 64, 16)) ** 2).sum(-1).sqrt())
    self.assertEqual([(o.op, o.axis, o.arg) for o in p.applied_opts], [(OptOps.UPCAST, 1, 4), (OptOps.UNROLL, 0, 8)])

  def test_matmul_keeps_its_tile(self):
    # a matmul the CPU matmul tile doesn't take (its factors are computed, not loaded) keeps the generic 4x4 tile and float4 stores:
    # its stored axis is the inner loop (upstream's test_linearizer test_grouped_store_phis)
    p = program(Tensor.randn(64, 64) @ Tensor.randn(64, 64))
    self.assertEqual(sorted(o.arg for o in p.applied_opts if o.op is OptOps.UPCAST), [4, 4])

  def test_elementwise_outer_product_stores_rows(self):
    # without a reduce the store is the work: one float8 along the stored axis writes each row front to back (the generic 4x4 tile wrote
    # four rows at once, 16 bytes each: 2x slower when the output is not in cache)
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    def outer(): return Tensor(a).reshape(64, 1) * Tensor(b).reshape(1, 64)
    self.assertEqual([(o.op, o.axis, o.arg) for o in program(outer()).applied_opts], [(OptOps.UPCAST, 1, 8)])
    np.testing.assert_allclose(outer().numpy(), np.outer(a, b), rtol=1e-6)

  def test_per_example_outer_product_stores_rows(self):
    # bench W6's gradient of its first layer: x (16) times the pre-activation's gradient (32) per example, stored along the 32
    rng = np.random.default_rng(11)
    x, g = rng.standard_normal((40, 16)).astype(np.float32), rng.standard_normal((40, 32)).astype(np.float32)
    def outer(): return vmap(lambda x, g: x.reshape(16, 1) * g.reshape(1, 32))(Tensor(x), Tensor(g))
    self.assertEqual([(o.op, o.axis, o.arg) for o in program(outer()).applied_opts], [(OptOps.UPCAST, 2, 8)])
    np.testing.assert_allclose(outer().numpy(), x[:, :, None] * g[:, None, :], rtol=1e-6)

  def test_store_upcast_not_for_gathers_or_one_vector_rows(self):
    # a load strided along the stored axis (a transpose) would gather its lanes, and a row of one float8 is written whole by the tile
    # too: both keep the generic upcasts
    self.assertNotEqual(tile(program(Tensor.empty(64, 64).T.contiguous())), [(OptOps.UPCAST, 8)])
    self.assertNotEqual(tile(program(Tensor.empty(64, 8, 1) * Tensor.empty(1, 1, 8))), [(OptOps.UPCAST, 8)])
    self.assertEqual(tile(program(Tensor.empty(64, 64, dtype=dtypes.float64) + 1)), [(OptOps.UPCAST, 4)])   # 32 bytes of float64

  def test_row_reduce_reads_rows_as_vectors(self):
    # a reduce along contiguous rows (bench W1, A @ B.T, a mat-vec): the row unrolled to one 32-byte load (8 float32, 4 float64), 4 rows
    # at a time; a half sum, which accumulates in float, keeps the upcast of 16 rows. A column reduce, whose rows are strided, upcasts
    # one float8 of columns: 8 independent accumulators
    self.assertEqual(tile(program((Tensor.empty(1024, 64) ** 2).sum(-1))), [(OptOps.UPCAST, 4), (OptOps.UNROLL, 8)])
    self.assertEqual(tile(program(Tensor.empty(1024, 64, dtype=dtypes.float64).sum(-1))), [(OptOps.UPCAST, 4), (OptOps.UNROLL, 4)])
    self.assertEqual(tile(program(Tensor.empty(1024, 64, dtype=dtypes.half).sum(-1))), [(OptOps.UPCAST, 16), (OptOps.UNROLL, 4)])
    self.assertEqual(tile(program(Tensor.empty(64, 64) @ Tensor.empty(64, 64).T)), [(OptOps.UPCAST, 4), (OptOps.UNROLL, 8)])
    self.assertEqual(tile(program(Tensor.empty(64, 1024).sum(0))), [(OptOps.UPCAST, 8), (OptOps.UNROLL, 4)])

  def test_unrolled_reduce_accumulates_vertically(self):
    # a loop over an unrolled reduce axis keeps an accumulator as wide as its input (4 rows x 8 = 32 lanes) and reduces the lanes once,
    # after the loop; max is one vector select per iteration, not a select per lane
    p = program((Tensor.empty(1024, 64) ** 2).sum(-1) + Tensor.empty(1024, 64).max(-1))
    self.assertEqual([u.dtype.base.count for u in p.uops if u.op is Ops.DEFINE_REG], [32, 32])
    self.assertIn(("MAX", 32), self.alus(p))
    self.assertIn(("ADD", 32), self.alus(p))

  def test_reduce_of_transcendental_stays_one_vector(self):
    # a row sum of exp (softmax's denominator) upcast to 8 rows is not unrolled on top: 32 lanes of the exp decomposition, whose compares
    # are per lane, ran 5x slower. A kernel without an upcast still unrolls, within 8 lanes
    self.assertEqual(tile(program(Tensor.empty(1024, 128).exp().sum(1))), [(OptOps.UPCAST, 8)])
    self.assertEqual(tile(program(Tensor.empty(100, 128).exp().sum(1))), [(OptOps.UNROLL, 4)])
    x = np.random.default_rng(15).standard_normal((1024, 128)).astype(np.float32)
    np.testing.assert_allclose(Tensor(x).softmax(1).numpy(), np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(Tensor(x).exp().sum(1).numpy(), np.exp(x.astype(np.float64)).sum(1), rtol=1e-5)

  def test_row_and_column_reduces_against_numpy(self):
    x = np.random.default_rng(14).standard_normal((2048, 64)).astype(np.float32)
    for got, want in (((Tensor(x) * Tensor(x)).sum(1) * 2 + Tensor(x).max(1), (x.astype(np.float64) ** 2).sum(1) * 2 + x.max(1)),
                      (Tensor(x).sum(0), x.astype(np.float64).sum(0)), (Tensor(x).min(1), x.min(1)), (Tensor(x).argmax(1), x.argmax(1)),
                      (Tensor(x) @ Tensor(x[:40]).T, x.astype(np.float64) @ x[:40].T.astype(np.float64)), (Tensor(x).sum(), x.sum(dtype=np.float64)),
                      (Tensor(x).cast(dtypes.half).sum(1), x.astype(np.float16).astype(np.float64).sum(1)),
                      (Tensor((x * 10).astype(np.int32)).sum(1), (x * 10).astype(np.int32).sum(1))):
      np.testing.assert_allclose(got.numpy(), want, rtol=1e-3 if got.dtype == dtypes.half else 1e-5, atol=1e-4 if got.dtype != dtypes.half else 0.1)

  def test_byte_reduces_against_numpy(self):
    # a reduce of uint8 takes 16 lanes, the most an upcast may: the column max upcast 32 and raised KernelOptError
    x = (np.random.default_rng(17).random((64, 1024)) * 255).astype(np.uint8)
    np.testing.assert_array_equal(Tensor(x).max(0).numpy(), x.max(0))
    np.testing.assert_array_equal(Tensor(x).max(1).numpy(), x.max(1))
    np.testing.assert_array_equal(Tensor(x.T.copy()).min(1).numpy(), x.T.min(1))

  def test_max_keeps_nan_semantics(self):
    # max as one vector select keeps the decomposition's (acc<x)?x:acc, lane by lane: a NaN is never taken (the accumulator starts at
    # -inf), as with upstream's per-lane selects, so a row's max is numpy's nanmax
    x = np.random.default_rng(16).standard_normal((64, 64)).astype(np.float32)
    x[3, 5] = x[10, 0] = x[20, 63] = np.nan
    np.testing.assert_array_equal(Tensor(x).max(1).numpy(), np.nanmax(x, 1))

  def test_pairwise_distances_against_numpy(self):
    # the nested vmap of bench W5 against a numpy loop over pairs: points of 16 and 32 read as vectors (4 pairs at a time, but where
    # 4 divides neither count), points of 5 on the float8 upcast of the outer axis, and generic opts where 8 doesn't divide it
    rng = np.random.default_rng(8)
    for n1, n2, d, opts in [(48, 64, 16, [(OptOps.UPCAST, 4), (OptOps.UNROLL, 8)]), (37, 64, 32, [(OptOps.UPCAST, 4), (OptOps.UNROLL, 8)]),
                            (37, 65, 16, [(OptOps.UNROLL, 8)]), (40, 72, 5, [(OptOps.UPCAST, 8)]),
                            (36, 44, 5, [(OptOps.UPCAST, 4), (OptOps.UNROLL, 0)])]:
      with self.subTest(shape=(n1, n2, d)):
        a, b = rng.standard_normal((n1, d)).astype(np.float32), rng.standard_normal((n2, d)).astype(np.float32)
        self.assertEqual(tile(program(pairwise(Tensor(a), Tensor(b)))), opts)
        want = np.array([[np.sqrt(((x - y) ** 2).sum()) for y in b.astype(np.float64)] for x in a.astype(np.float64)])
        np.testing.assert_allclose(pairwise(Tensor(a), Tensor(b)).numpy(), want, rtol=1e-5, atol=1e-5)

  def test_bools_against_numpy(self):
    # bools upcast by 8: built from compares, loaded bools and constants, combined, negated, selected on, stored and cast
    rng = np.random.default_rng(13)
    xf, yf = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    xi, b = rng.integers(-5, 5, 64).astype(np.int32), rng.random(64) > 0.5
    cases = [("select", lambda x, y, i, b: (x < y).where(x, y * 2), lambda x, y, i, b: np.where(x < y, x, y * 2)),
             ("logic", lambda x, y, i, b: ((x < y) & (i != 0)) | ((x > 1) ^ b), lambda x, y, i, b: ((x < y) & (i != 0)) | ((x > 1) ^ b)),
             ("not", lambda x, y, i, b: (~(x < y)).where(i, -i), lambda x, y, i, b: np.where(~(x < y), i, -i)),
             ("loaded bools", lambda x, y, i, b: b.where(x, y) + b.logical_not().cast(dtypes.float32),
              lambda x, y, i, b: np.where(b, x, y) + (~b).astype(np.float32)),
             ("bool select", lambda x, y, i, b: (x > 0).where(b, i == 1), lambda x, y, i, b: np.where(x > 0, b, i == 1)),
             ("cast", lambda x, y, i, b: (x < y).cast(dtypes.float32) * 3 + (i == 2).cast(dtypes.int32),
              lambda x, y, i, b: (x < y).astype(np.float32) * 3 + (i == 2).astype(np.int32)),
             ("relu", lambda x, y, i, b: x.relu() * (y > 0), lambda x, y, i, b: np.maximum(x, 0) * (y > 0))]
    for name, fn, np_fn in cases:
      with self.subTest(name):
        got = fn(Tensor(xf), Tensor(yf), Tensor(xi), Tensor(b)).contiguous(arg=(Opt(OptOps.UPCAST, 0, 8),)).numpy()
        np.testing.assert_equal(got, np_fn(xf, yf, xi, b))

  # stack-then-index (bench W3): each output lane is a padded value, so the upcast stack summed vectors that are 0 in all lanes but one.
  # Those sums are a shuffle now: the multiplies and one vector store, no vector ADD
  def stack_pick(self, x, C):
    def f(e, C):
      flat = Tensor.stack(e * C[0], e * C[1], e * C[2]).flatten()
      return Tensor.stack(*[flat[i] for i in (0, 5, 10, 3)])
    return vmap(f, in_axes=(0, None))(x, C)
  def test_stack_lanes_are_a_shuffle(self):
    p = program(self.stack_pick(Tensor.empty(64, 4), Tensor.empty(3, 4)))
    self.assertEqual(self.alus(p), {("MUL", 1), ("ADD", 1)})   # the index math's ADD
  def test_stack_lanes_against_numpy(self):
    rng = np.random.default_rng(7)
    x, C = rng.standard_normal((64, 4)), rng.standard_normal((3, 4))
    want = np.stack([x * C[0], x * C[1], x * C[2]], axis=1).reshape(64, 12)[:, [0, 5, 10, 3]]
    np.testing.assert_equal(self.stack_pick(Tensor(x), Tensor(C)).numpy(), want)   # float64: exact products, nothing else

  def test_vector_ops_against_numpy(self):
    # every kind of ALU the C renderer emits on vectors, upcast by 8, float and int, against numpy
    rng = np.random.default_rng(6)
    xf, yf = rng.standard_normal(64).astype(np.float32) * 10, rng.standard_normal(64).astype(np.float32) * 10
    xi, yi = rng.integers(-1000, 1000, 64).astype(np.int32), rng.integers(1, 50, 64).astype(np.int32)
    xu, yu = rng.integers(0, 2**31, 64).astype(np.uint32), rng.integers(0, 2**31, 64).astype(np.uint32)
    def bitwise(x, y): return ((x & 0xff) ^ (x | y)) + (x << 2) + (y >> 3)
    cases = [("float arith", lambda x, y: x * y - x / (y * y + 1), lambda x, y: x * y - x / (y * y + 1), xf, yf),
             ("max/where", lambda x, y: (x < y).where(x.maximum(y), -x), lambda x, y: np.where(x < y, np.maximum(x, y), -x), xf, yf),
             ("sqrt", lambda x, y: (x * x + y * y).sqrt(), lambda x, y: np.sqrt(x * x + y * y), xf, yf),
             ("float to int", lambda x, y: (x * 3).cast(dtypes.int32) + 1, lambda x, y: (x * 3).astype(np.int32) + 1, xf, yf),
             ("int div/mod", lambda x, y: x // y + x % y, lambda x, y: x // y + x % y, np.abs(xi), yi),
             ("bitwise", bitwise, bitwise, xu, yu),
             ("int to float", lambda x, y: x.cast(dtypes.float32) / 7, lambda x, y: x.astype(np.float32) / 7, xi, yi),
             ("half", lambda x, y: (x.cast(dtypes.float16) * y.cast(dtypes.float16) + x.cast(dtypes.float16)).cast(dtypes.float32),
              lambda x, y: (x.astype(np.float16) * y.astype(np.float16) + x.astype(np.float16)).astype(np.float32), xf, yf)]
    for name, fn, np_fn, a, b in cases:
      with self.subTest(name):
        got = fn(Tensor(a), Tensor(b)).contiguous(arg=(Opt(OptOps.UPCAST, 0, 8),)).numpy()
        np.testing.assert_allclose(got, np_fn(a, b), rtol=1e-6)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer decomposes SIN")
class TestCPUCosSharesSinReduction(unittest.TestCase):
  # the Payne-Hanek reduction is the only user of this word of 2/pi's table (scalar code: a vector kernel hoists it once per kernel)
  def reductions(self, t:Tensor) -> int: return program(t, opts=[]).src.count("920167782u")

  def test_cos_accurate_for_large_arguments(self):
    x = np.concatenate([np.random.default_rng(0).standard_normal(64) * s for s in (1, 30, 1e3, 1e6)] + [[1e30, -1e30, 31.6, -28.5]])
    x = x.astype(np.float32)
    # cos reduces |x| itself: no rounding of pi/2-x, so large arguments are as accurate as sin's
    np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x.astype(np.float64)), atol=2e-6)
    np.testing.assert_allclose(Tensor(x).sin().numpy(), np.sin(x.astype(np.float64)), atol=2e-6)

  def test_float64_large_arguments(self):
    # float64 reduces with Cody-Waite up to 1e14: Payne-Hanek's reduction is float32-exact (vanilla: errors of 2e-7 at 1e3, 2.0 past 1e7)
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.uniform(30, 1e3, 256), np.exp(rng.uniform(np.log(1e3), np.log(1e10), 512))]) * rng.choice([-1, 1], 768)
    for fn, np_fn in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan)):
      with self.subTest(fn):
        got, want = getattr(Tensor(x, dtype=dtypes.float64), fn)().numpy(), np_fn(x)
        tol = (1e-15 + 5e-16 * np.abs(x)) * (1 + want**2 if fn == "tan" else 1)   # tan's condition number is 1+tan^2
        self.assertTrue(np.all(np.abs(got - want) <= tol), f"max error {np.max(np.abs(got - want) / tol):.1f}x the tolerance")

  def test_cos_nonfinite(self):
    np.testing.assert_equal(Tensor([math.inf, -math.inf, math.nan, 0.0]).cos().numpy(), [math.nan, math.nan, math.nan, 1.0])

  def test_sin_and_cos_share_one_reduction(self):
    x = Tensor.empty(64)
    self.assertGreater(self.reductions(x.sin()), 0)  # else the counts below compare zeros
    self.assertEqual(self.reductions(x.sin() + x.cos()), self.reductions(x.sin()))
    self.assertEqual(self.reductions(x.tan() * x.cos()), self.reductions(x.sin()))

  def test_cos_alone_unchanged_otherwise(self):
    x = Tensor.empty(64)
    self.assertEqual(self.reductions(x.cos()), self.reductions(x.sin()))
    # different angles keep a reduction each
    self.assertEqual(self.reductions(x.sin() + (x*2).cos()), 2*self.reductions(x.sin()))

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer branches around cold arms")
class TestCPUColdBranch(unittest.TestCase):
  def compile(self, t:Tensor, cold=True, opts=None):
    """t's one kernel (its inputs realized) compiled with or without the cold branches, and the buffers it runs on"""
    sis = [si for si in t.schedule() if si.ast.op is Ops.SINK]
    self.assertEqual(len(sis), 1)
    ren = Device["CPU"].renderer
    try:
      ren.cold_branches = cold
      with Context(SPEC=1): p = get_program(sis[0].ast, ren, opts)
    finally: del ren.cold_branches  # back to the class's value
    return p, sis[0].bufs

  def run_kernel(self, t:Tensor, cold:bool) -> np.ndarray:
    p, bufs = self.compile(t, cold)
    for b in bufs: b.ensure_allocated()
    CompiledRunner(p)(bufs, {}, wait=True)
    return np.frombuffer(bufs[0].as_buffer(), dtype=bufs[0].dtype.fmt).copy()

  def ifs(self, t:Tensor, opts=None) -> int: return [u.op for u in self.compile(t, opts=opts)[0].uops].count(Ops.IF)

  def test_bit_identical_to_the_select(self):
    # the branch only skips work: every value, on both sides of the switch-over and the special cases, is the select's, per lane
    # (211 values: no upcast) and for vectors whose lanes mix both sides (216: one branch per vector, taken on any lane's condition)
    for dt, npdt, huge in ((dtypes.float32, np.float32, 1e30), (dtypes.float64, np.float64, 1e200), (dtypes.float16, np.float16, 6e4)):
      rng = np.random.default_rng(3)
      with np.errstate(over="ignore"): x = np.concatenate([rng.standard_normal(40) * s for s in (1, 10, 40, 1e3, 1e6)] +
                                          [[29.999, 30, 30.001, -30, 0, -0.0, math.inf, -math.inf, math.nan, huge, -huge]]).astype(npdt)
      for xs in (x, np.concatenate([x, rng.standard_normal(5).astype(npdt)])[rng.permutation(216)]):
        for name, fn in (("sin", lambda t: t.sin()), ("cos", lambda t: t.cos()), ("tan", lambda t: t.tan()),
                         ("sin+cos", lambda t: t.sin()*2 + t.cos()), ("sin(x)*cos(3x)", lambda t: t.sin() * (t*3).cos())):
          with self.subTest(dtype=dt, fn=name, n=len(xs)):
            xt = Tensor(xs, dtype=dt).realize()
            np.testing.assert_array_equal(self.run_kernel(fn(xt), cold=True), self.run_kernel(fn(xt), cold=False))

  def test_quick_build_leaves_out_the_vector_upcast(self):
    # the upcast triples codegen and clang time: a first (quick) build goes without it, the full build (the kernel's second run) has it
    x = np.random.default_rng(12).uniform(-40, 40, 8 * 37).astype(np.float32)
    si = [si for si in (Tensor(x).realize().sin() * 3).schedule() if si.ast.op is Ops.SINK][-1]
    for b in si.bufs: b.ensure_allocated()
    ren = Device["CPU"].renderer
    self.assertTrue(quick_opts_differ(si.ast, ren))
    # a reduce, opts given and NOOPT: the full build's heuristics would upcast nothing more, so the quick build is the same program
    self.assertFalse(quick_opts_differ([s for s in Tensor.empty(64).sin().sum().schedule() if s.ast.op is Ops.SINK][-1].ast, ren))
    self.assertFalse(quick_opts_differ(si.ast.replace(arg=KernelInfo(opts_to_apply=())), ren))
    with Context(NOOPT=1): self.assertFalse(quick_opts_differ(si.ast, ren))
    r = get_runner("CPU", si.ast)
    if not quick_tier(Device["CPU"].compiler): self.skipTest("no quick tier (TIERED=0 or BEAM)")
    for full in (False, True):
      if full: finish_full_builds([r])
      self.assertEqual((OptOps.UPCAST, 8) in tile(r.p), full)
      r(si.bufs, {}, wait=True)
      np.testing.assert_allclose(np.frombuffer(si.bufs[0].as_buffer(), np.float32), np.sin(x.astype(np.float64)) * 3, atol=1e-5)

  def test_vectors_bit_identical_to_lanes(self):
    # a transcendental decomposed as a vector computes each lane as the scalar decomposition does, special values and large arguments too
    rng = np.random.default_rng(11)
    for dt, npdt in ((dtypes.float32, np.float32), (dtypes.float64, np.float64)):
      with np.errstate(over="ignore"):
        x = np.concatenate([rng.standard_normal(64) * s for s in (1, 30, 1e4)] + [rng.uniform(-200, 200, 58),
                            [0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 88.8, -104, 1e30, -1e30, 3e38, -3e38, 1e-7]]).astype(npdt)
      x = x[rng.permutation(len(x))]
      for name, fn in (("sin", Tensor.sin), ("cos", Tensor.cos), ("tan", Tensor.tan), ("exp", Tensor.exp), ("exp2", Tensor.exp2),
                       ("log", lambda t: t.abs().log()), ("log2", Tensor.log2), ("sigmoid", Tensor.sigmoid)):
        with self.subTest(dtype=dt, fn=name):
          p, bufs = self.compile(fn(Tensor(x, dtype=dt).realize()), opts=[Opt(OptOps.UPCAST, 0, 8)])
          lanes, _ = self.compile(fn(Tensor(x, dtype=dt).realize()), opts=[])
          outs = []
          for prg in (p, lanes):
            for b in bufs: b.ensure_allocated()
            CompiledRunner(prg)(bufs, {}, wait=True)
            outs.append(np.frombuffer(bufs[0].as_buffer(), dtype=bufs[0].dtype.fmt).copy())
          np.testing.assert_array_equal(*outs)

  def test_against_numpy(self):
    # float32: upstream's float64 Payne-Hanek keeps about float32's precision (bench/analysis.md), with or without the branch
    x = np.concatenate([np.random.default_rng(4).standard_normal(64) * s for s in (1, 40, 1e4)]).astype(np.float32)
    got, x64 = (Tensor(x).sin() * 2 + Tensor(x).cos()).numpy(), x.astype(np.float64)
    np.testing.assert_allclose(got, np.sin(x64)*2 + np.cos(x64), atol=6e-6)

  def test_one_branch_per_angle(self):
    x = Tensor.empty(64)
    self.assertEqual(self.ifs(x.sin(), opts=[]), 1)
    self.assertEqual(self.ifs(x.sin() + x.cos(), opts=[]), 1)  # cos(x) takes sin(x)'s condition and reduction
    self.assertEqual(self.ifs(x.tan(), opts=[]), 1)
    self.assertEqual(self.ifs(x.sin() + (x*2).cos(), opts=[]), 2)
    self.assertEqual(self.ifs(x.sin() + x.cos(), opts=[Opt(OptOps.UPCAST, 0, 4)]), 1)  # one for the lanes of a vector, on any lane's

  def test_no_branch_where_an_arm_is_a_constant(self):
    x = Tensor.empty(64)
    self.assertEqual(self.ifs(x.exp() * x.log() + x.exp2().sqrt(), opts=[]), 0)
    self.assertEqual(self.ifs((x > 0).where(x.sin(), 0), opts=[]), 1)  # sin's own branch, not the mask's
    self.assertEqual(self.ifs((x > 0).where(x * 3, x.exp()), opts=[]), 0)  # small arms stay a select

@unittest.skipUnless(Device.DEFAULT == "CPU" and sys.platform == "linux", "the clang JIT compiler, os.fork")
class TestClangSpare(unittest.TestCase):
  SRC = "void add1(float* restrict a) { for (int i = 0; i < 4; i++) a[i] += 1.0f; }"

  def compiler(self) -> ClangJITCompiler:
    self.addCleanup((c:=ClangJITCompiler())._drop_spare, kill=True)  # don't leave its spare clang waiting until the process exits
    return c

  def test_compile_uses_the_started_clang(self):
    c = self.compiler()
    spare = c.spares[True]  # the quick tier's: a kernel's first build
    self.assertIsNone(spare.poll())  # started, waiting on stdin
    self.assertGreater(len(c.compile(self.SRC, quick=True)), 0)
    self.assertIsNotNone(spare.returncode)  # that one compiled it
    self.assertNotIn(True, c.spares)  # the next quick build's starts with its codegen (start_spare), not after this one
    c.start_spare(quick=True)
    self.assertIsNone(c.spares[True].poll())
    self.assertGreater(len(c.compile(self.SRC, quick=True)), 0)
    self.assertGreater(len(c.compile(self.SRC)), 0)  # -O2 starts its own, and keeps the next one started (BEAM's candidates)
    self.assertIsNone(c.spares[False].poll())

  @unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU device's compiler")
  def test_first_call_starts_its_clang_with_codegen(self):
    # a clang started after a call's last compile would load LLVM beside that kernel's run (one core: the bench pins its workers)
    comp, events = Device["CPU"].compiler, []
    if not isinstance(comp, ClangJITCompiler) or not quick_tier(comp): self.skipTest("the clang JIT compiler's quick tier")
    comp._drop_spare(kill=True)
    start, clang = ClangJITCompiler.start_spare, ClangJITCompiler._clang
    def record(name, fn):
      def called(c, *args, **kwargs):
        events.append((name, True in c.spares))  # whether a quick build's clang is waiting when it's called
        return fn(c, *args, **kwargs)
      return called
    x = Tensor(np.random.default_rng().standard_normal(8).astype(np.float32)).realize()
    with unittest.mock.patch.object(ClangJITCompiler, "start_spare", autospec=True, side_effect=record("start", start)), \
         unittest.mock.patch.object(ClangJITCompiler, "_clang", autospec=True, side_effect=record("clang", clang)):
      (x * float(np.random.default_rng().uniform(1, 2))).realize()   # a new kernel: a constant drawn per run
    self.assertEqual(events, [("start", False), ("clang", True)])
    self.assertNotIn(True, comp.spares)

  def test_error_raises_and_the_next_compile_works(self):
    c = self.compiler()
    with self.assertRaises(subprocess.CalledProcessError): c.compile("this is not C")
    self.assertGreater(len(c.compile(self.SRC)), 0)

  def test_forked_child_does_not_keep_the_spare_open(self):
    # clang compiles at EOF on stdin: a child that kept the spare's stdin open would hang the parent's next compile
    c, (r, w) = self.compiler(), os.pipe()
    if (pid:=os.fork()) == 0:
      os.close(w); os.read(r, 1); os._exit(0)  # lives until the parent has compiled
    os.close(r)
    def hung(*_): raise TimeoutError("the compile waited on a clang whose stdin the child holds")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try: self.assertGreater(len(c.compile(self.SRC)), 0)
    finally: signal.alarm(0); signal.signal(signal.SIGALRM, old); os.close(w); os.waitpid(pid, 0)

@unittest.skipUnless(Device.DEFAULT == "CPU" and sys.platform == "linux" and platform.machine() == "x86_64", "the clang JIT compiler on x86-64")
class TestClangOneCallPerSchedule(unittest.TestCase):
  """the kernels a schedule has not compiled yet go to clang as one file (engine/tiered.py compile_together): its startup is paid once"""
  def clang_calls(self, fn) -> int:
    """clang runs on the calling thread while fn runs (not the background -O2 rebuilds a kernel's second run starts, engine/realize.py)"""
    threads, clang = [], ClangJITCompiler._clang
    def record(*args, **kwargs):
      threads.append(threading.current_thread())
      return clang(*args, **kwargs)
    with unittest.mock.patch.object(ClangJITCompiler, "_clang", autospec=True, side_effect=record): fn()
    return sum(t is threading.current_thread() for t in threads)

  def test_schedule_is_one_clang_call(self):
    # a constant drawn per run keeps the kernels out of the compile cache (CCACHE) and the method cache
    rng = np.random.default_rng()
    x, c = rng.standard_normal((48, 40)).astype(np.float32), float(rng.uniform(1, 2))
    def make(): return [(Tensor(x) * c).sum(0), (Tensor(x) - c).max(1), (Tensor(x) * c).exp().sum()]
    self.assertEqual(len([si for si in Tensor.schedule(*make()) if si.ast.op is Ops.SINK]), 3)  # (a scheduled Tensor can't be realized)
    outs = make()
    self.assertEqual(self.clang_calls(lambda: Tensor.realize(*outs)), 1)
    np.testing.assert_allclose(outs[0].numpy(), (x * np.float32(c)).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), (x - np.float32(c)).max(1), rtol=1e-6)
    np.testing.assert_allclose(outs[2].numpy(), np.exp(x * np.float32(c)).sum(), rtol=1e-4)

  def test_each_lib_enters_its_own_function(self):
    srcs = ["void add1(float* restrict a) { for (int i = 0; i < 4; i++) a[i] += 1.0f; }",
            "void scale(float* restrict a) { for (int i = 0; i < 4; i++) a[i] *= 2.5f; }",
            "void sub3(float* restrict a) { for (int i = 0; i < 4; i++) a[i] -= 3.0f; }"]
    c = ClangJITCompiler()
    self.addCleanup(c._drop_spare, kill=True)
    libs = c.compile_many(srcs, ["add1", "scale", "sub3"])
    for lib, want in zip(libs, [lambda a: a + 1, lambda a: a * 2.5, lambda a: a - 3]):
      a = np.arange(4, dtype=np.float32)
      mem = mmap.mmap(-1, len(lib), prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)
      mem.write(lib)
      ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.addressof(ctypes.c_char.from_buffer(mem)))(a.ctypes.data)
      np.testing.assert_equal(a, want(np.arange(4, dtype=np.float32)))

  def test_same_names_compile_one_at_a_time(self):
    srcs = ["void k(float* restrict a) { a[0] = 1.0f; }", "void k(float* restrict a) { a[0] = 2.0f; }"]
    c = ClangJITCompiler()
    self.addCleanup(c._drop_spare, kill=True)
    self.assertEqual(self.clang_calls(lambda: self.assertEqual(len(c.compile_many(srcs, ["k", "k"])), 2)), 2)

  def test_error_is_the_failing_kernels_own(self):
    c = ClangJITCompiler()
    self.addCleanup(c._drop_spare, kill=True)
    srcs = ["void good(float* restrict a) { a[0] = 1.0f; }", "void bad(float* restrict a) { a[0] = undefined_name; }"]
    with unittest.mock.patch.object(ClangJITCompiler, "_clang", autospec=True, side_effect=ClangJITCompiler._clang) as clang:
      with self.assertRaises(subprocess.CalledProcessError): c.compile_many(srcs, ["good", "bad"])
    self.assertEqual([call.args[1] for call in clang.call_args_list], ["\n".join(srcs), *srcs])  # the file, then one at a time

  def test_compiled_kernels_are_not_compiled_again(self):
    x = np.random.default_rng(1).standard_normal((24, 16)).astype(np.float32)
    def run(): return [t.numpy() for t in Tensor.realize((Tensor(x) * 3).sum(0), (Tensor(x) + 3).max(1))]
    run()
    self.assertEqual(self.clang_calls(run), 0)

@unittest.skipUnless(Device.DEFAULT == "CPU" and sys.platform == "linux", "the clang JIT compiler")
class TestQuickTier(unittest.TestCase):
  """a kernel's first build is clang -O1; once it runs again its -O2 build runs in the background and replaces it (engine/realize.py)"""
  def setUp(self):
    self.rng = np.random.default_rng()   # a constant drawn per run keeps each kernel out of the compile cache and the method cache
    self.x = self.rng.standard_normal((48, 40)).astype(np.float32)

  def kernel(self):
    """make() builds the same one-kernel graph each time; want is its numpy result"""
    c = float(self.rng.uniform(1, 2))
    def make(): return ((Tensor(self.x) * c).exp() * 0.5).sum(0)
    return make, ([si for si in make().schedule() if si.ast.op is Ops.SINK][-1].ast), (np.exp(self.x * np.float32(c)) * 0.5).sum(0)

  def clang_quick_flags(self, fn) -> list[bool]:
    return [quick for quick,_ in self.clang_calls(fn)]
  def clang_calls(self, fn) -> list[tuple[bool, bool]]:
    """(quick, spare) of each clang run while fn runs"""
    with unittest.mock.patch.object(ClangJITCompiler, "_clang", autospec=True, side_effect=ClangJITCompiler._clang) as clang: fn()
    return [tuple(inspect.signature(ClangJITCompiler._clang).bind(*c.args, **c.kwargs).arguments.get(k, True if k == "spare" else False)
                  for k in ("quick", "spare")) for c in clang.call_args_list]

  def test_first_build_is_quick_then_full(self):
    make, ast, want = self.kernel()
    self.assertEqual(self.clang_quick_flags(lambda: np.testing.assert_allclose(make().numpy(), want, rtol=1e-4)), [True])
    runner, comp = get_runner("CPU", ast), Device["CPU"].compiler
    self.assertTrue(runner.quick)
    self.assertIsNone(diskcache_get(comp.cachekey, runner.p.src))   # a quick build is not cached
    np.testing.assert_allclose(make().numpy(), want, rtol=1e-4)       # the second run starts the full build
    self.assertIsNotNone(runner.rebuild)
    runner.rebuild.join()
    np.testing.assert_allclose(make().numpy(), want, rtol=1e-4)       # ... and the next one swaps it in
    self.assertFalse(runner.quick)
    self.assertEqual(runner.p.lib, comp.compile(runner.p.src))         # the -O2 build
    self.assertEqual(diskcache_get(comp.cachekey, runner.p.src), runner.p.lib)
    self.assertEqual(self.clang_quick_flags(lambda: np.testing.assert_allclose(make().numpy(), want, rtol=1e-4)), [])

  def test_cached_full_build_is_not_built_quick(self):
    # as in a later process: the kernel's -O2 build is in the compile cache
    _, ast, want = self.kernel()
    p, comp = get_program(ast, Device["CPU"].renderer, compile_src=False), Device["CPU"].compiler
    diskcache_put(comp.cachekey, p.src, comp.compile(p.src))
    self.assertEqual(self.clang_quick_flags(lambda: setattr(self, "runner", CompiledRunner(p))), [])
    self.assertFalse(self.runner.quick)
    self.assertEqual(self.runner.p.lib, diskcache_get(comp.cachekey, p.src))

  def test_schedule_first_build_is_one_quick_clang_call(self):
    c = float(self.rng.uniform(1, 2))
    def make(): return [(Tensor(self.x) * c).sum(0), (Tensor(self.x) - c).max(1)]
    outs = make()
    self.assertEqual(self.clang_quick_flags(lambda: Tensor.realize(*outs)), [True])
    np.testing.assert_allclose(outs[0].numpy(), (self.x * np.float32(c)).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1].numpy(), (self.x - np.float32(c)).max(1), rtol=1e-6)
    runners = [get_runner("CPU", si.ast) for si in Tensor.schedule(*make()) if si.ast.op is Ops.SINK]
    self.assertEqual([r.quick for r in runners], [True, True])
    # their second run starts both full builds, in one background clang call that starts no spare clang after it
    self.assertEqual(self.clang_calls(lambda: (Tensor.realize(*make()), [r.rebuild.join() for r in runners])), [(False, False)])

  def test_jit_graph_captures_full_builds(self):
    c = float(self.rng.uniform(1, 2))
    def step(x:Tensor):
      outs = (x * c).sum(0), (x - c).max(1)
      Tensor.realize(*outs)
      return outs
    f = TinyJit(step)
    xt = Tensor(self.x).realize()
    for _ in range(4): a, b = f(xt)
    runners = [ji.prg for gi in f.captured.jit_cache for ji in getattr(gi.prg, "jit_cache", [gi]) if isinstance(ji.prg, CompiledRunner)]
    self.assertEqual(len(runners), 2)
    self.assertFalse(any(r.quick for r in runners))
    np.testing.assert_allclose(a.numpy(), (self.x * np.float32(c)).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b.numpy(), (self.x - np.float32(c)).max(1), rtol=1e-6)

  def test_failed_full_build_keeps_the_quick_one(self):
    make, ast, want = self.kernel()
    make().numpy()
    runner, compile_ = get_runner("CPU", ast), ClangJITCompiler.compile
    def full_fails(self_, src, quick=False, spare=True):
      if not quick: raise subprocess.CalledProcessError(1, "clang")
      return compile_(self_, src, quick, spare)
    with unittest.mock.patch.object(ClangJITCompiler, "compile", full_fails):
      make().numpy()
      runner.rebuild.join()
    self.assertIsInstance(runner.full_lib, subprocess.CalledProcessError)   # the full build ran, and failed
    quick_lib = runner.p.lib
    np.testing.assert_allclose(make().numpy(), want, rtol=1e-4)
    self.assertFalse(runner.quick)
    self.assertEqual(runner.p.lib, quick_lib)

  def test_not_under_beam_or_tiered_0(self):
    comp = Device["CPU"].compiler
    self.assertTrue(quick_tier(comp))
    with Context(BEAM=2): self.assertFalse(quick_tier(comp))
    with unittest.mock.patch.dict(os.environ, {"TIERED": "0"}):
      getenv.cache_clear()
      try: self.assertFalse(quick_tier(comp))
      finally: getenv.cache_clear()

if __name__ == "__main__":
  unittest.main()
