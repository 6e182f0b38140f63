"""The CPU kernel rules both lines have (0.14's cpu-codegen; 0.12's cpu-heuristics, cpu-cold-branch, cpu-vector-alus), asserted exactly
and checked against numpy in float64 (never timed):

- a full unroll of a reduce stays within 32 lanes of the upcasts (codegen/opt/heuristic.py).
- the matmul register tile (codegen/opt/heuristic_cpu.py's cpu_gemm_tile): a matmul whose N axis is unit-stride in B upcasts M and N
  into a tile of accumulators (8 vector registers) and leaves the reduce rolled: 4x16 float32 with AVX2, 8x16 with AVX-512, each ISA
  forced in turn (isa()), never the host's. The 0.12 line keeps vector ALUs for clang; the 0.14 line's accumulators are scalars in an
  array read and written a vector at a time, which clang keeps in vector registers: ymm, or zmm with AVX-512, where that kernel alone is
  built with AVX-512 (codegen/late/cpu_vectors.py).
- float8 loads and stores are declared 16-byte aligned (memory from numpy or from_blob is no more).
- the cold branch (codegen/late/cold_branch.py): sin/cos/tan's Payne-Hanek reduction, which only |x| >= 30 takes, runs under an IF
  instead of on every element, bit for bit the select's results.
- (0.14) a REDUCE range's loop lets clang reorder its float adds, so it vectorizes the scalar accumulators along the loop; an
  elementwise kernel whose stores are all strided (a vmap's stacked output) takes 4 adjacent elements of each store's row at once.
- an elementwise kernel of decomposed transcendentals upcasts its batch to one 32-byte vector whose lanes run as vector ALUs (0.14:
  cpu-vector-lanes joins the lanes' scalar ops), one cold branch per vector, ymm arithmetic with AVX2 and with AVX-512 forced.
- (0.14) an elementwise kernel over rows of 5-7 floats takes 8 rows a step: n float8 loads and stores.

The 0.12 line's other rules need its vector ALUs: test/test_cpu_codegen.py (bench/analysis.md)."""
from fork_topics import applied, skip_module_unless, skip_unless
skip_module_unless('cpu-codegen|cpu-heuristics', 'cpu-codegen|cpu-cold-branch')   # 0.14's cpu-codegen, 0.12's topics of it
import contextlib, math, platform, re, unittest, unittest.mock
import numpy as np
from tinygrad import Tensor, Device, dtypes, vmap
from tinygrad.helpers import Context
from tinygrad.fork_line import LINE_012
from tinygrad.codegen.opt import OptOps
from tinygrad.codegen.opt.heuristic_cpu import cpu_tile_bytes

LINEAR_SCHEDULE = not LINE_012   # 0.14: a schedule is a LINEAR of CALLs, each CALL's src[0] its kernel's AST

# these test the compiled kernels: on 0.14 none runs first as numpy (engine/first_numpy.py, on by default)
_compiled_only = contextlib.ExitStack()
def setUpModule():
  if applied('first-numpy'): _compiled_only.enter_context(Context(FIRST_NUMPY=0))
def tearDownModule(): _compiled_only.close()

def last_kernel(t:Tensor):
  """the AST of the last kernel that realizes t"""
  if LINEAR_SCHEDULE: return t.schedule_linear().src[-1].src[0]
  return [si for si in t.schedule() if si.ast.op.name == "SINK"][-1].ast

def kernel_opts(t:Tensor) -> list[tuple[OptOps, int]]:
  """the opts the heuristics give the last kernel that realizes t (launch threads left out)"""
  ren = Device[Device.DEFAULT].renderer
  if LINEAR_SCHEDULE:
    from tinygrad.codegen.opt.postrange import apply_opts
    opts = apply_opts(last_kernel(t), ren).arg.applied_opts
  else:
    from tinygrad.codegen import get_program
    opts = get_program(last_kernel(t), ren).applied_opts
  return [(o.op, o.arg) for o in opts if o.op is not OptOps.THREAD]

@Context(NOOPT=1)
def ifs(t:Tensor) -> int:
  """the IF blocks in the program of the last kernel that realizes t, built without upcasts (each lane of an upcast has its own on 0.14)"""
  from tinygrad.uop.ops import Ops
  if LINEAR_SCHEDULE:
    from tinygrad.codegen import do_to_program
    uops = next(s for s in do_to_program(last_kernel(t), Device["CPU"].renderer).src if s.op is Ops.LINEAR).src
  else:
    from tinygrad.codegen import get_program
    uops = get_program(last_kernel(t), Device["CPU"].renderer).uops
  return [u.op for u in uops].count(Ops.IF)

def fresh_compile():
  """forget the compiled kernels (each line's in-process cache of them), so the next realize builds its kernels again"""
  import tinygrad.codegen, tinygrad.engine.realize
  for mod, name in ((tinygrad.codegen, "to_program_cache"), (tinygrad.engine.realize, "method_cache")):
    if (cache:=getattr(mod, name, None)) is not None: cache.clear()

def computed(fn, x:np.ndarray, dtype, cold:bool) -> np.ndarray:
  """fn of x built with the cold branches on or off (compiled in this process)"""
  ren = Device["CPU"].renderer
  fresh_compile()
  try:
    ren.cold_branches = cold
    # 0.14 compiles in worker processes (PARALLEL), which don't see this renderer's flag
    with Context(**({"PARALLEL": 0} if LINEAR_SCHEDULE else {})): return fn(Tensor(x, dtype=dtype)).numpy()
  finally:
    del ren.cold_branches   # back to the class's value
    fresh_compile()

HOST_AVX512 = platform.machine() in ("x86_64", "AMD64") and "avx512f" in open("/proc/cpuinfo").read().split()

@contextlib.contextmanager
def isa(vector_bytes:int):
  """the matmul tile's vector registers forced to 32 bytes (AVX2's ymm) or 64 (AVX-512's zmm), whatever this machine has, with the
  kernels built in this process (0.14 does its codegen in worker processes, which don't see the patch) and none cached from before.
  0.14: cpu_vectors.tile_vector_bytes (the tile's shape follows it); 0.12: heuristic_cpu.cpu_tile_bytes, 8 registers of it"""
  if LINEAR_SCHEDULE:
    import tinygrad.codegen.late.cpu_vectors as cpu_vectors
    patch = unittest.mock.patch.object(cpu_vectors, "tile_vector_bytes", lambda: vector_bytes)
  else:
    import tinygrad.codegen.opt.heuristic_cpu as heuristic_cpu
    patch = unittest.mock.patch.object(heuristic_cpu, "cpu_tile_bytes", lambda: 8 * vector_bytes)
  fresh_compile()
  try:
    with patch, Context(**({"PARALLEL": 0} if LINEAR_SCHEDULE else {})): yield
  finally: fresh_compile()

def tile(itemsize:int, vector_bytes:int=32) -> list[tuple[OptOps, int]]:
  """the tile under isa(vector_bytes): the rows (M) upcast first, then the columns (N), 64 bytes of them; 8 registers of accumulators"""
  n = 64 // max(itemsize, 4)
  return [(OptOps.UPCAST, min(8, 8 * vector_bytes // itemsize // n)), (OptOps.UPCAST, n)]

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics")
class TestCPUGemmTile(unittest.TestCase):
  def test_tile_float32(self):
    for vb, want in ((32, [(OptOps.UPCAST, 4), (OptOps.UPCAST, 16)]), (64, [(OptOps.UPCAST, 8), (OptOps.UPCAST, 16)])):
      with self.subTest(vector_bytes=vb), isa(vb):
        self.assertEqual(tile(4, vb), want)
        self.assertEqual(kernel_opts(Tensor.empty(64, 64) @ Tensor.empty(64, 64)), want)
  def test_tile_float64(self):
    for vb, want in ((32, [(OptOps.UPCAST, 4), (OptOps.UPCAST, 8)]), (64, [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)])):
      with self.subTest(vector_bytes=vb), isa(vb):
        self.assertEqual(kernel_opts(Tensor.empty(64, 64, dtype="float64") @ Tensor.empty(64, 64, dtype="float64")), want)
  def test_tile_of_a_vmapped_layer(self):
    # bench W2's kernels: each example's row times a shared weight is one matmul over the batch; the second layer's N is 8 floats
    layer = vmap(lambda x, w: x @ w, in_axes=(0, None))
    for vb in (32, 64):
      with self.subTest(vector_bytes=vb), isa(vb):
        self.assertEqual(kernel_opts(layer(Tensor.empty(256, 64), Tensor.empty(64, 64))), tile(4, vb))
        self.assertEqual(kernel_opts(layer(Tensor.empty(256, 64), Tensor.empty(64, 8))), [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)])
  def test_rows_that_do_not_divide(self):
    # M = 20 rows: 8 doesn't divide it, 4 does (AVX-512's tile falls back to AVX2's height); M = 6: 2 rows
    for vb in (32, 64):
      with self.subTest(vector_bytes=vb), isa(vb):
        self.assertEqual(kernel_opts(Tensor.empty(20, 64) @ Tensor.empty(64, 64)), [(OptOps.UPCAST, 4), (OptOps.UPCAST, 16)])
        self.assertEqual(kernel_opts(Tensor.empty(6, 64) @ Tensor.empty(64, 64)), [(OptOps.UPCAST, 2), (OptOps.UPCAST, 16)])

  def test_transposed_b_keeps_generic_opts(self):
    # N is not unit-stride in B.T: no tile, the generic upcasts (which unroll the reduce)
    self.assertNotEqual(kernel_opts(Tensor.empty(64, 64) @ Tensor.empty(64, 64).T), tile(4))

  def test_not_for_a_reduce_that_is_not_a_matmul(self):
    self.assertNotEqual(kernel_opts((Tensor.empty(64, 64, 64) * 2).sum(1)), tile(4))

  def test_full_unroll_stays_within_32_lanes(self):
    # bench W5's pairwise distances: a 4x4 tile of upcasts and a reduce of 16 fully unrolled were 256 lanes, 2.5x the codegen (its first
    # call) and no faster than unrolling the reduce by 4
    a, b = np.random.default_rng(8).standard_normal((2, 64, 16)).astype(np.float32)
    dist = vmap(vmap(lambda p, q: ((p - q) ** 2).sum().sqrt(), in_axes=(None, 0)), in_axes=(0, None))
    self.assertNotIn((OptOps.UNROLL, 0), kernel_opts(dist(Tensor.empty(64, 16), Tensor.empty(64, 16))))
    np.testing.assert_allclose(dist(Tensor(a), Tensor(b)).numpy(), np.sqrt(((a[:, None].astype(np.float64) - b[None]) ** 2).sum(-1)),
                               rtol=1e-5)

  def test_against_numpy(self):
    # each ISA's tile, built and run here (AVX-512's only on a machine that has it), on sizes the tile divides and sizes it doesn't
    for vb in (32, 64) if HOST_AVX512 or not LINEAR_SCHEDULE else (32,):
      with self.subTest(vector_bytes=vb), isa(vb): self.check_against_numpy()
    rng = np.random.default_rng(9)
    x, w1, b1, w2, b2 = rng.standard_normal((1000, 64)), rng.standard_normal((64, 64)) / 8, rng.standard_normal(64) / 8, \
      rng.standard_normal((64, 8)) / 8, rng.standard_normal(8) / 8
    mlp = vmap(lambda x, w1, b1, w2, b2: (x @ w1 + b1).relu() @ w2 + b2, in_axes=(0, None, None, None, None))   # bench W2
    for vb in (32, 64) if HOST_AVX512 or not LINEAR_SCHEDULE else (32,):
      with self.subTest(vector_bytes=vb, fn="mlp"), isa(vb):
        got = mlp(*[Tensor(a.astype(np.float32)) for a in (x, w1, b1, w2, b2)]).numpy()
        f32 = [a.astype(np.float32).astype(np.float64) for a in (x, w1, b1, w2, b2)]
        np.testing.assert_allclose(got, np.maximum(f32[0] @ f32[1] + f32[2], 0) @ f32[3] + f32[4], rtol=1e-4, atol=1e-5)

  def check_against_numpy(self):
    rng = np.random.default_rng(7)
    for m, k, n, dtype, tb in [(24, 64, 64, np.float32, False), (40, 9, 48, np.float32, False), (16, 17, 8, np.float64, False),
                               (64, 64, 64, np.float32, False), (20, 64, 8, np.float32, False), (12, 5, 4, np.float32, False),
                               (36, 7, 24, np.float32, False), (8, 33, 48, np.float32, False), (3, 4, 5, np.float32, False),
                               (16, 16, 1, np.float32, False), (64, 64, 64, np.float64, False), (12, 5, 8, np.float64, False),
                               (64, 64, 64, np.float32, True)]:
      with self.subTest(shape=(m, k, n), dtype=np.dtype(dtype).name, transposed_b=tb):
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        got = (Tensor(a) @ (Tensor(b).T if tb else Tensor(b))).numpy()
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, a.astype(np.float64) @ (b.T if tb else b).astype(np.float64), rtol=tol, atol=tol)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's codegen")
class TestCPUColdBranch(unittest.TestCase):
  TRIG = (("sin", lambda t: t.sin()), ("cos", lambda t: t.cos()), ("tan", lambda t: t.tan()), ("sin+cos", lambda t: t.sin()*2 + t.cos()),
          ("sin(x)*cos(3x)", lambda t: t.sin() * (t*3).cos()))

  def test_bit_identical_to_the_select(self):
    # the branch only skips work: every value, on both sides of the switch-over and the special cases, is the select's
    for dt, npdt, huge in ((dtypes.float32, np.float32, 1e30), (dtypes.float64, np.float64, 1e200)):
      rng = np.random.default_rng(3)
      x = np.concatenate([rng.standard_normal(40) * s for s in (1, 10, 40, 1e3, 1e6)] +
                         [[29.999, 30, 30.001, -30, 0, -0.0, math.inf, -math.inf, math.nan, huge, -huge]]).astype(npdt)
      for name, fn in self.TRIG:
        with self.subTest(dtype=dt, fn=name):
          np.testing.assert_array_equal(computed(fn, x, dt, cold=True), computed(fn, x, dt, cold=False))

  def test_against_numpy(self):
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(64) * s for s in (1, 40, 1e4)])
    for dt, atol in ((dtypes.float32, 6e-6), (dtypes.float64, 1e-9)):
      with self.subTest(dtype=dt):
        xd = x.astype(dt.fmt)
        got = (Tensor(xd, dtype=dt).sin() * 2 + Tensor(xd, dtype=dt).cos()).numpy()
        np.testing.assert_allclose(got, np.sin(xd.astype(np.float64))*2 + np.cos(xd.astype(np.float64)), atol=atol)

  def test_one_branch_per_angle(self):
    x = Tensor.empty(64)
    self.assertEqual(ifs(x.sin()), 1)
    self.assertEqual(ifs(x.sin() + x.cos()), 1)  # cos(x) takes sin(x)'s condition and reduction
    self.assertEqual(ifs(x.tan()), 1)
    self.assertEqual(ifs(x.sin() + (x*2).cos()), 2)

  def test_no_branch_where_an_arm_is_a_constant(self):
    x = Tensor.empty(64)
    self.assertEqual(ifs(x.exp() * x.log() + x.exp2().sqrt()), 0)
    self.assertEqual(ifs((x > 0).where(x.sin(), 0)), 1)  # sin's own branch, not the mask's
    self.assertEqual(ifs((x > 0).where(x * 3, x.exp())), 0)  # small arms stay a select

  def test_vmapped_rotation(self):
    # a per-example kinematics step (sin, cos, tan of two angles per example), batched; some examples take the large-argument path
    def step(s:Tensor) -> Tensor: return Tensor.stack(s[0] + s[2].cos() * s[1], s[1] * s[2].sin(), s[3].tan() / s[3].cos())
    rng = np.random.default_rng(5)
    states = rng.uniform(-3, 3, (257, 4)).astype(np.float32)
    states[::7, 2], states[::11, 3] = rng.uniform(30, 1e4, len(states[::7])), -rng.uniform(30, 1e4, len(states[::11]))
    got = vmap(step)(Tensor(states)).numpy()
    want = np.stack([[s[0] + np.cos(s[2]) * s[1], s[1] * np.sin(s[2]), np.tan(s[3]) / np.cos(s[3])] for s in states.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    self.assertGreater(ifs(vmap(step)(Tensor(states))), 0)

def kernel_source(t:Tensor) -> str:
  """the C source of the last kernel that realizes t"""
  ren = Device["CPU"].renderer
  if LINEAR_SCHEDULE:
    from tinygrad.codegen import to_program
    from tinygrad.uop.ops import Ops
    return next(s.arg for s in to_program(last_kernel(t), ren).src if s.op is Ops.SOURCE)
  from tinygrad.codegen import get_program
  return get_program(last_kernel(t), ren).src

def clang_assembly(src:str, march:str|None=None) -> str:
  """src built with the CPU device's own clang command, as assembly (-S for -c); march: that x86 ISA forced in place of the host's"""
  import subprocess, unittest.mock
  comp = Device["CPU"].compiler
  if LINE_012: cmd = comp._cmd()   # 0.12: ClangJITCompiler's whole command
  else:   # 0.14: the command ClangCompiler.compile runs
    with unittest.mock.patch("subprocess.check_output", return_value=b"") as run: comp.compile(src)
    cmd = run.call_args.args[0]
  if march is not None: cmd = [f"-march={march}" if a.startswith("-march=") else a for a in cmd if a != "-mno-avx512f"]
  return subprocess.check_output(["-S" if a == "-c" else a for a in cmd], input=src.encode()).decode()

@unittest.skipUnless(Device.DEFAULT == "CPU" and platform.machine() in ("x86_64", "AMD64"), "x86's gather instructions")
class TestCPUNoGathers(unittest.TestCase):
  """clang 14 with AVX-512 (-march=native) gathered the strided scalar loads of a row reduce's rows with vgatherqps, 4-5x slower on Zen 4
  (bench W1). Without AVX-512 clang doesn't gather them, so this holds on every x86-64 and only catches a regression on an AVX-512 one"""
  def test_row_reduce_has_no_gather(self):
    x = Tensor.empty(100000, 64)   # bench W1 (at 1000 rows the heuristics pick other opts, which clang never gathered)
    self.assertNotIn("gather", clang_assembly(kernel_source(vmap(lambda r: (r * r).sum() * 2 + r.max())(x))))

def bicycle(s:Tensor, u:Tensor) -> Tensor:
  """bench W4's per-point Jacobian entries that take sin/cos/tan: two angles (th, de) a point"""
  th, v, de = s[2], s[3], u[1]
  return Tensor.stack(-0.1 * v * th.sin(), 0.1 * th.cos(), 0.1 * v * th.cos(), 0.04 * de.tan(), 0.04 * v / de.cos() ** 2)

def bicycle_np(S:np.ndarray, U:np.ndarray) -> np.ndarray:
  th, v, de = S[:, 2], S[:, 3], U[:, 1]
  return np.stack([-0.1 * v * np.sin(th), 0.1 * np.cos(th), 0.1 * v * np.cos(th), 0.04 * np.tan(de), 0.04 * v / np.cos(de) ** 2], 1)

def bicycle_inputs(n:int, npdt) -> tuple[np.ndarray, np.ndarray]:
  """states and controls, some of whose angles take the large-argument (Payne-Hanek) path, in lanes of their own"""
  rng = np.random.default_rng(6)
  S, U = rng.standard_normal((n, 4)), rng.uniform(-0.5, 0.5, (n, 2))
  S[::13, 2], U[::29, 1] = rng.uniform(30, 1e5, len(S[::13])), -rng.uniform(30, 1e4, len(U[::29]))
  # float64's reduction is off past ~1e15 with or without lanes (cos(1e200) by 0.23): its large arguments stay within 1e5
  S[5, 2], U[7, 1] = 1e30 if npdt is np.float32 else 1e5, -29.999
  return S.astype(npdt), U.astype(npdt)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics")
class TestCPUVectorLanes(unittest.TestCase):
  """an elementwise kernel of decomposed transcendentals (sin, cos, tan) upcasts its batch to one 32-byte vector, and the lanes run as
  vector ALUs (0.12: its codegen keeps vectors; 0.14: codegen/late/cpu_vectors.py's vector_lanes joins the lanes' scalar ops), with one
  cold branch per vector taken when any lane needs Payne-Hanek (bench W4)"""
  def test_against_numpy(self):
    for dt, npdt, rtol in ((dtypes.float32, np.float32, 2e-5), (dtypes.float64, np.float64, 1e-10)):
      with self.subTest(dtype=dt):
        S, U = bicycle_inputs(512, npdt)
        got = vmap(bicycle)(Tensor(S, dtype=dt), Tensor(U, dtype=dt)).numpy()
        np.testing.assert_allclose(got, bicycle_np(S.astype(np.float64), U.astype(np.float64)), rtol=rtol, atol=rtol)

  def test_exp2_log2_against_numpy(self):
    x = np.random.default_rng(7).uniform(0.01, 40, (256, 3)).astype(np.float32)
    got = vmap(lambda r: Tensor.stack(r[0].exp2() * r[1].log2(), r[2].exp()))(Tensor(x)).numpy()
    want = np.stack([np.exp2(x[:, 0].astype(np.float64)) * np.log2(x[:, 1].astype(np.float64)), np.exp(x[:, 2].astype(np.float64))], 1)
    np.testing.assert_allclose(got, want, rtol=3e-6)

  def test_lanes_are_one_vector(self):
    out = lambda: vmap(bicycle)(Tensor.empty(4096, 4), Tensor.empty(4096, 2))   # a fresh one each time: a schedule takes its kernels
    self.assertIn((OptOps.UPCAST, 8), kernel_opts(out()))
    src = kernel_source(out())
    # the arithmetic of the 8 points' sin (Cody-Waite's reduction, the polynomial) as float8 ops, and one branch per angle: th, de
    self.assertGreater(len(re.findall(r"\bfloat8 \w+ = \([^;]*\*", src)), 10)
    self.assertEqual(len(re.findall(r"\bif \(", src)), 2)

  @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64"), "x86's vector registers")
  def test_vector_math_in_ymm_for_avx2_and_avx512(self):
    # each ISA forced, whatever this machine has: the kernel's multiplies are 8-wide (ymm) on both
    src = kernel_source(vmap(bicycle)(Tensor.empty(4096, 4), Tensor.empty(4096, 2)))
    for march in ("x86-64-v3", "x86-64-v4"):
      with self.subTest(march=march):
        asm = clang_assembly(src, march)
        self.assertRegex(asm, r"vmulps\s+[^\n]*ymm")
        self.assertRegex(asm, r"vfmadd\w*ps\s+[^\n]*ymm|vaddps\s+[^\n]*ymm")

@unittest.skipIf(LINE_012, "0.14's vector_lanes (the 0.12 line keeps vector ALUs in its codegen)")
@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics")
class TestCPUVectorLanesScalar(unittest.TestCase):
  def test_same_as_scalar_lanes(self):
    # joining the lanes changes how the same ops are issued and where clang fuses a multiply-add (measured: up to 7e-6 relative in
    # float32, 5e-11 in float64, at large angles): the values are the scalar lanes' (vector_lanes off) within test_against_numpy's bounds
    ren = Device["CPU"].renderer
    for dt, npdt, tol in ((dtypes.float32, np.float32, 2e-5), (dtypes.float64, np.float64, 1e-10)):
      S, U = bicycle_inputs(256, npdt)
      got = []
      for on in (True, False):
        fresh_compile()
        try:
          ren.vector_lanes = on
          with Context(PARALLEL=0): got.append(vmap(bicycle)(Tensor(S, dtype=dt), Tensor(U, dtype=dt)).numpy())
        finally:
          del ren.vector_lanes
          fresh_compile()
      with self.subTest(dtype=dt): np.testing.assert_allclose(got[0], got[1], rtol=tol, atol=tol)

@unittest.skipIf(LINE_012, "0.14's vector_alus (the 0.12 line's codegen keeps every vector ALU)")
@skip_unless("cpu-vector-alus")
@unittest.skipUnless(Device.DEFAULT == "CPU", "the clang renderer's vector ALUs")
class TestCPUVectorALUs(unittest.TestCase):
  """(0.14, cpu-vector-alus) a batch upcast's arithmetic stays ops of shape (8,) from devectorize2 on (codegen/late/vector_alus.py): the
  decompositions build sin/cos once, not once a lane; comparisons and WHEREs split into lanes in the final rewrite. VECTOR_ALUS=0 is
  cpu-vector-lanes' scalar lanes, joined after linearizing; both against numpy, each ISA forced"""
  def sink(self, on:int):
    from tinygrad.codegen import full_rewrite_to_sink
    with Context(VECTOR_ALUS=on, QUICK_OPTS=0):
      return full_rewrite_to_sink(last_kernel(vmap(bicycle)(Tensor.empty(4096, 4), Tensor.empty(4096, 2))), Device["CPU"].renderer)

  def test_one_copy_of_the_lanes(self):
    from tinygrad.uop.ops import Ops
    on, off = self.sink(1).toposort(), self.sink(0).toposort()
    vec = [u for u in on if u.op in (Ops.MUL, Ops.ADD) and u._shape == (8,)]
    self.assertGreater(len(vec), 40)   # Cody-Waite's reduction and the polynomials of th's and de's sin and cos, 8 lanes each
    self.assertFalse([u for u in off if u.op in (Ops.MUL, Ops.ADD) and u._shape == (8,)])
    self.assertLess(len(on), 0.8 * len(off))
    # the lanes' compares are scalar (C has no _Bool vectors), the branch one per angle
    self.assertFalse([u for u in on if u.dtype is dtypes.bool and u._shape not in (None, ())])

  def test_against_numpy_both_ways(self):
    for on in (1, 0):
      for dt, npdt, rtol in ((dtypes.float32, np.float32, 2e-5), (dtypes.float64, np.float64, 1e-10)):
        with self.subTest(VECTOR_ALUS=on, dtype=dt), Context(VECTOR_ALUS=on, PARALLEL=0):
          fresh_compile()
          S, U = bicycle_inputs(512, npdt)
          got = vmap(bicycle)(Tensor(S, dtype=dt), Tensor(U, dtype=dt)).numpy()
          np.testing.assert_allclose(got, bicycle_np(S.astype(np.float64), U.astype(np.float64)), rtol=rtol, atol=rtol)
      with self.subTest(VECTOR_ALUS=on, fn="exp2 log2"), Context(VECTOR_ALUS=on, PARALLEL=0):
        fresh_compile()
        x = np.random.default_rng(7).uniform(0.01, 40, (256, 3)).astype(np.float32)
        got = vmap(lambda r: Tensor.stack(r[0].exp2() * r[1].log2(), r[2].exp(), r[1].sin()))(Tensor(x)).numpy()
        want = np.stack([np.exp2(x[:, 0].astype(np.float64)) * np.log2(x[:, 1].astype(np.float64)), np.exp(x[:, 2].astype(np.float64)),
                         np.sin(x[:, 1].astype(np.float64))], 1)
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)
    fresh_compile()

  @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64"), "x86's vector registers")
  def test_vector_form_for_avx2_and_avx512(self):
    # float8 multiplies in the source, ymm multiplies and FMAs in each ISA's assembly (forced, whatever this machine has), 2 branches
    with Context(VECTOR_ALUS=1, PARALLEL=0):
      fresh_compile()
      src = kernel_source(vmap(bicycle)(Tensor.empty(4096, 4), Tensor.empty(4096, 2)))
    fresh_compile()
    self.assertGreater(len(re.findall(r"\bfloat8 \w+ = \([^;]*\*", src)), 10)
    self.assertEqual(len(re.findall(r"\bif \(", src)), 2)
    self.assertNotIn("_Bool8", src)
    for march in ("x86-64-v3", "x86-64-v4"):
      with self.subTest(march=march):
        asm = clang_assembly(src, march)
        self.assertRegex(asm, r"vmulps\s+[^\n]*ymm")
        self.assertRegex(asm, r"vfmadd\w*ps\s+[^\n]*ymm|vaddps\s+[^\n]*ymm")

  def test_other_renderers_keep_upstreams_lanes(self):
    # the gate: only a renderer with vector_lanes (clang's) keeps vector ALUs; OpenCL's, the Python emulator's split every ALU as upstream
    from tinygrad.codegen.late.vector_alus import vector_alu_lanes
    from tinygrad.renderer.cstyle import OpenCLRenderer
    from tinygrad.runtime.ops_python import PythonRenderer
    from tinygrad.codegen.opt.postrange import apply_opts
    ast = apply_opts(last_kernel(vmap(bicycle)(Tensor.empty(4096, 4), Tensor.empty(4096, 2))), Device["CPU"].renderer)
    self.assertEqual(vector_alu_lanes(ast, Device["CPU"].renderer), 8)
    for ren in (OpenCLRenderer, PythonRenderer): self.assertEqual(vector_alu_lanes(ast, ren), 0)   # the class: its flags
    with Context(VECTOR_ALUS=0): self.assertEqual(vector_alu_lanes(ast, Device["CPU"].renderer), 0)

  # vmap(jacfwd(step)) (bench W4's jacfwd row): the tangents' one-hot seeds are constants that differ from lane to lane
  @staticmethod
  def step_jacobian(S:Tensor, U:Tensor) -> Tensor:
    from tinygrad import jacfwd
    def step(s, u): return Tensor.stack(s[0] + 0.1 * s[3] * s[2].cos(), s[1] + 0.1 * s[3] * s[2].sin(), s[2] + 0.04 * s[3] * u[1].tan(), s[3] + 0.1 * u[0])
    return Tensor.cat(*vmap(jacfwd(step, argnums=(0, 1)))(S, U), dim=2)

  def test_tangent_seeds_fold(self):
    # an op on a seed's lanes is split, so each lane folds (x*0, x*1): vector ops are the batch's (8,) only, never the 6 tangents' x 8
    # batch lanes (48,), which computed every zero (AVX2: 1.6 -> 2.9 ms a call for the (48,) ops, 1.1 ms with them folded)
    from tinygrad.codegen import full_rewrite_to_sink
    from tinygrad.uop.ops import Ops
    with Context(VECTOR_ALUS=1, QUICK_OPTS=0):
      sink = full_rewrite_to_sink(last_kernel(self.step_jacobian(Tensor.empty(4096, 4), Tensor.empty(4096, 2))), Device["CPU"].renderer)
    shapes = [u._shape for u in sink.toposort() if u.op in (Ops.MUL, Ops.ADD) and u._shape not in (None, ())]
    self.assertGreater(len(shapes), 40)   # th's and de's sin, cos and tan as vector math
    self.assertEqual(set(shapes), {(8,)})

  def test_tangent_seeds_against_numpy_both_ways(self):
    rng = np.random.default_rng(11)
    S, U = rng.standard_normal((512, 4)), rng.uniform(-0.5, 0.5, (512, 2))
    th, v, de = S[:, 2], S[:, 3], U[:, 1]
    want = np.zeros((512, 4, 6))
    want[:, 0, 0] = want[:, 1, 1] = want[:, 2, 2] = want[:, 3, 3] = 1
    want[:, 0, 2], want[:, 0, 3] = -0.1 * v * np.sin(th), 0.1 * np.cos(th)
    want[:, 1, 2], want[:, 1, 3] = 0.1 * v * np.cos(th), 0.1 * np.sin(th)
    want[:, 2, 3], want[:, 2, 5] = 0.04 * np.tan(de), 0.04 * v / np.cos(de) ** 2
    want[:, 3, 4] = 0.1
    for on in (1, 0):
      for dt, rtol in ((dtypes.float32, 2e-5), (dtypes.float64, 1e-12)):
        with self.subTest(VECTOR_ALUS=on, dtype=dt), Context(VECTOR_ALUS=on, PARALLEL=0):
          fresh_compile()
          np.testing.assert_allclose(self.step_jacobian(Tensor(S, dtype=dt), Tensor(U, dtype=dt)).numpy(), want, rtol=rtol, atol=rtol)
    fresh_compile()

  # a reduce's unrolled lanes (bench W5: pairwise distances, a 4x4 output tile unrolled by 4 over the reduce, 64 lanes) as a vertical reduce
  @staticmethod
  def dist(A:Tensor, B:Tensor) -> Tensor: return ((A[:, None] - B[None]) ** 2).sum(-1).sqrt()

  def test_vertical_reduce_sink(self):
    from tinygrad.codegen import full_rewrite_to_sink
    from tinygrad.uop.ops import Ops
    def sink(on:int):
      with Context(VECTOR_ALUS=on, QUICK_OPTS=0):
        return full_rewrite_to_sink(last_kernel(self.dist(Tensor.empty(256, 16), Tensor.empty(256, 16))), Device["CPU"].renderer).toposort()
    on, off = sink(3), sink(1)   # 3: on any machine (2, the default, only where the CPU has AVX-512: test_vertical_reduce_isa)
    # each of the 4 unrolled steps one (16,) op of the output tile's lanes, added to the accumulators in the scalar code's order
    self.assertGreaterEqual(len([u for u in on if u.op in (Ops.ADD, Ops.MUL) and u._shape == (16,)]), 9)
    self.assertFalse([u for u in off if u.op in (Ops.ADD, Ops.MUL) and u._shape not in (None, ())])
    self.assertLess(len(on), 0.8 * len(off))

  def test_vertical_reduce_against_numpy(self):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((200, 16)).astype(np.float32), rng.standard_normal((120, 16)).astype(np.float32)
    want = np.sqrt(((a[:, None].astype(np.float64) - b[None]) ** 2).sum(-1))
    got = {}
    for on in (3, 1):   # 3: the vertical reduce on any machine (with AVX2, two ymm ops a (16,) op)
      with self.subTest(VECTOR_ALUS=on), Context(VECTOR_ALUS=on, PARALLEL=0):
        fresh_compile()
        got[on] = self.dist(Tensor(a), Tensor(b)).numpy()
        np.testing.assert_allclose(got[on], want, rtol=1e-5, atol=1e-6)
    fresh_compile()
    np.testing.assert_equal(got[3], got[1])   # the same sums in the same order

  def test_vertical_reduce_only_with_avx512(self):
    # the default (VECTOR_ALUS=2) keeps the (16,) steps where the CPU has AVX-512; with AVX2 their cross-lane shuffles cost more than the
    # scalar lanes clang vectorizes itself (bench W5 2.4 -> 4.3 ms): the ISA forced here, not the host's
    import tinygrad.codegen.late.cpu_vectors as cpu_vectors
    from tinygrad.codegen.late.vector_alus import vector_alu_lanes
    from tinygrad.codegen.opt.postrange import apply_opts
    for vb, lanes in ((32, 0), (64, 64)):
      with self.subTest(vector_bytes=vb), unittest.mock.patch.object(cpu_vectors, "tile_vector_bytes", lambda: vb), Context(VECTOR_ALUS=2):
        ast = apply_opts(last_kernel(self.dist(Tensor.empty(256, 16), Tensor.empty(256, 16))), Device["CPU"].renderer)
        self.assertEqual(vector_alu_lanes(ast, Device["CPU"].renderer), lanes)

  @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64"), "x86's vector registers")
  def test_vertical_reduce_isa(self):
    # float16 ops in the source (VECTOR_ALUS=3: on either ISA), built with AVX-512 only where the machine has it (forced here, not the
    # host's): an AVX2 machine's kernel has no zmm; each unrolled step is ymm FMAs either way (clang prefers 256-bit vectors)
    import tinygrad.codegen.late.cpu_vectors as cpu_vectors
    for vb, march in ((32, "x86-64-v3"), (64, "x86-64-v4")):
      with self.subTest(vector_bytes=vb), unittest.mock.patch.object(cpu_vectors, "tile_vector_bytes", lambda: vb), \
           Context(VECTOR_ALUS=3, PARALLEL=0):
        fresh_compile()
        src = kernel_source(self.dist(Tensor.empty(256, 16), Tensor.empty(256, 16)))
        self.assertGreaterEqual(len(re.findall(r"\bfloat16 \w+ = ", src)), 4)
        self.assertEqual('target("avx512f")' in src, vb == 64)
        asm = clang_assembly(src, march)
        self.assertRegex(asm, r"v(fmadd\w*|add|mul)ps\s+[^\n]*ymm")
        if vb == 32: self.assertNotIn("zmm", asm)
    fresh_compile()

@unittest.skipIf(LINE_012, "0.14's cpu_odd_rows (scalar ALUs; the 0.12 line's rows are its vector ALUs')")
@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics")
class TestCPUOddRows(unittest.TestCase):
  def test_rows_of_5_to_7_move_as_float8(self):
    # 8 examples' rows are 8n adjacent floats: n float8 loads and n float8 stores, no scalar access of the buffers
    for n in (5, 6, 7):
      fn = lambda r: Tensor.stack(*[r[(i+1) % n] * (i+1) for i in range(n)])
      with self.subTest(rows=n):
        self.assertEqual(kernel_opts(vmap(fn)(Tensor.empty(4096, n))), [(OptOps.UPCAST, 0), (OptOps.UPCAST, 8)])
        src = kernel_source(vmap(fn)(Tensor.empty(4096, n)))
        self.assertEqual((len(re.findall(r"= \(\*\(\(float8\*\)\(\(data1", src)), len(re.findall(r"\*\(\(float8\*\)\(\(data0", src))), (n, n), src)
        self.assertNotRegex(src, r"[^)]\(\*\(data[01]_|^\s*\*\(data0")
        x = np.random.default_rng(n).standard_normal((1000, n)).astype(np.float32)
        np.testing.assert_equal(vmap(fn)(Tensor(x)).numpy(), np.stack([x[:, (i+1) % n] * (i+1) for i in range(n)], 1))

class TestCPUSmallUnsignedCast(unittest.TestCase):
  """without AVX-512 (0.14's cpu-codegen builds without it; the fix is 0.14's fix-clang-small-uint-cast), clang's vector float -> uint8
  cast saturated a negative to 0 where its AVX-512 code and torch wrap (-1.8 -> 255): the cast goes through int32 (upstream's test_ops
  TestOpsUint8.test_cast, on an AVX-512 machine)"""
  def test_small_unsigned_cast_wraps(self):
    x = np.random.default_rng(0).uniform(-2, 2, (2, 3, 64, 64)).astype(np.float32)
    for dt, npdt in ((dtypes.uint8, np.uint8), (dtypes.uint16, np.uint16)):
      np.testing.assert_equal(Tensor(x).cast(dt).numpy(), x.astype(np.int32).astype(npdt))

@unittest.skipUnless(Device.DEFAULT == "CPU", "the clang renderer's vector types")
class TestCPUVectorAlignment(unittest.TestCase):
  """float8 loads and stores (both lines) are declared 16-byte aligned, as float4's are: tinygrad's own buffers are page aligned, but
  memory from malloc, numpy or from_blob is only 16-byte aligned, and a float8 declared 32-aligned loaded with vmovaps ymm and faulted"""
  def test_from_blob_16_past_a_32_byte_boundary(self):
    base = np.zeros(1024 + 8, dtype=np.float32)
    a = base[(off:=(32 - base.ctypes.data % 32) % 32 // 4 + 4):off + 1024]
    a[:] = np.random.default_rng(4).standard_normal(1024)
    self.assertEqual(a.ctypes.data % 32, 16)
    t = Tensor.from_blob(a.ctypes.data, (32, 32), dtype=dtypes.float32, device="CPU")
    np.testing.assert_allclose((t @ t).numpy(), a.reshape(32, 32).astype(np.float64) @ a.reshape(32, 32), rtol=1e-4, atol=1e-4)
    np.testing.assert_equal((t * 2).numpy(), a.reshape(32, 32) * 2)

  def test_slice_that_starts_mid_vector(self):
    a = np.arange(300, dtype=np.float32)
    np.testing.assert_equal((Tensor(a)[3:259].reshape(16, 16) * 2).numpy(), a[3:259].reshape(16, 16) * 2)

@unittest.skipUnless(LINEAR_SCHEDULE, "the 0.12 line's codegen keeps a reduce's float8 vector accumulators itself")
class TestCPUScalarALUs(unittest.TestCase):
  """0.14's ALUs are scalars, which clang vectorizes. It vectorizes a float reduction loop only where it may reorder the adds: the renderer
  lets it on a REDUCE range's loop (bench W1, four rows' sums from loads 64 floats apart, is then contiguous vector loads along the row:
  2.4 -> 1.3 ms), not on the other loops. And it packs stores that are adjacent in one iteration (cpu_store_rows)"""
  def test_reduce_loops_may_vectorize(self):
    src = kernel_source(vmap(lambda r: (r * r).sum() * 2 + r.max())(Tensor.empty(1000, 64)))
    loops = [l.strip() for l in src.splitlines() if "for (" in l]
    self.assertEqual([l.startswith('_Pragma("clang loop vectorize(enable)")') for l in loops], [False, True, True])

  def test_stacked_streams_store_rows(self):
    # a stack of streams along a batch (stack(dim=0) of columns) is a slot per stream (the stacked axis upcast): 4 adjacent examples of
    # each stream at once (cpu_store_rows), each slot one vector store
    x = np.random.default_rng(8).standard_normal((1000, 4))
    f = lambda t: Tensor.stack(t[:, 0] * 2, t[:, 1] * 3, t[:, 2] * 4, t[:, 3] * 5)
    self.assertEqual(kernel_opts(f(Tensor.empty(1000, 4))), [(OptOps.UPCAST, 0), (OptOps.UPCAST, 4)])
    np.testing.assert_equal(f(Tensor(x)).numpy(), (x * [2, 3, 4, 5]).T)

  def test_vmap_stacked_output_stored_per_example(self):
    # a vmap's stacked output is stored in its own order (the batch in front, not the stack's): an example's slots are one vector load
    # and one vector store
    x = np.random.default_rng(8).standard_normal((1000, 4))
    f = lambda e: Tensor.stack(e[0] * 2, e[1] * 3, e[2] * 4, e[3] * 5)
    self.assertEqual(kernel_opts(vmap(f)(Tensor.empty(1000, 4))), [(OptOps.UPCAST, 0)])
    src = kernel_source(vmap(f)(Tensor.empty(1000, 4)))
    self.assertEqual((len(re.findall(r"= \(\*\(\(float4\*\)", src)), len(re.findall(r"\*\(\(float4\*\)\(\(data0", src))), (1, 1), src)
    np.testing.assert_equal(vmap(f)(Tensor(x)).numpy(), x * [2, 3, 4, 5])

  def test_tile_accumulators_move_as_vectors(self):
    # the matmul tile's accumulator array is read and written a vector register at a time (memory_coalescing on a REG buffer), as are the
    # global floats: clang keeps it in vector registers and its FMAs full width (4 scalar-element stores a lane each were xmm FMAs: bench
    # W2 2x). AVX2: ymm (float8, double4); AVX-512: zmm (float16, double8), that kernel alone built with AVX-512
    for vb, dt, vec in ((32, dtypes.float32, "float8"), (32, dtypes.float64, "double4"), (64, dtypes.float32, "float16"),
                        (64, dtypes.float64, "double8")):
      with self.subTest(vector_bytes=vb, dtype=dt.name), isa(vb):
        src = kernel_source(Tensor.empty(64, 64, dtype=dt) @ Tensor.empty(64, 64, dtype=dt))
        acc = re.search(r"(\w+) (buf\d+)\[(\d+)\] __attribute__\(\(aligned\(32\)\)\);", src)
        self.assertIsNotNone(acc, src)
        self.assertEqual(int(acc[3]), 8 * vb // dt.itemsize)   # 8 registers of accumulators
        self.assertFalse(re.search(rf"\*\({acc[2]}\+\d+\) =", src), "a scalar store to the accumulators")
        # zeroed before the reduce, accumulated in it, one vector store a register each time
        self.assertEqual(len(re.findall(rf"\*\(\({vec}\*\)\(\({acc[2]}\+\d+\)\)\) =", src)), 2 * 8, src)
        self.assertEqual('__attribute__((target("avx512f")))' in src, vb == 64)

  def test_avx512_only_for_a_tile_whose_rows_fill_a_zmm(self):
    # with AVX-512, a tile whose rows are 8 floats (bench W2's second layer, 64 -> 8) keeps ymm: a zmm across two rows took 0.21 -> 0.35 ms.
    # Kernels that aren't a tile stay AVX2 (AVX-512's gathers: compiler_cpu.py)
    with isa(64):
      for name, t in (("64->8 layer", Tensor.empty(256, 64) @ Tensor.empty(64, 8)), ("row sums", (Tensor.empty(1000, 64) ** 2).sum(1)),
                      ("elementwise", Tensor.empty(1000, 64) * 2 + 1)):
        with self.subTest(name):
          src = kernel_source(t)
          self.assertNotIn("avx512f", src)
          self.assertNotIn("float16", src)

  def test_avx512_tile_assembly(self):
    # what clang makes of AVX-512's tile: FMAs on zmm registers, each taking A's element as an embedded broadcast ({1to16}), and no
    # spills of the accumulators to the stack
    with isa(64): asm = clang_assembly(kernel_source(Tensor.empty(64, 64) @ Tensor.empty(64, 64)))
    fmas = re.findall(r"vfmadd\w+\s+(.*)", asm)
    self.assertTrue(fmas and all("zmm" in f for f in fmas), asm)
    self.assertTrue(any("{1to16}" in f for f in fmas), asm)
    self.assertNotRegex(asm, r"vmovups\s+%zmm\d+, -?\d*\(%rsp\)", "an accumulator spilled")

  def test_row_sums_keep_scalar_accumulators(self):
    # four rows' sums load 64 floats apart: a float4 of them was SLP across the rows (2x slower on bench W1); scalars, which the loop
    # vectorizer vectorizes along each row
    src = kernel_source(vmap(lambda r: (r * r).sum() * 2 + r.max())(Tensor.empty(100000, 64)))   # bench W1: 4 rows upcast
    self.assertIsNotNone(re.search(r"float (buf\d+)\[4\]", src), src)
    self.assertNotRegex(src, r"\(\(float\d\*\)\(\(buf", "a vector access to the accumulators")

  def test_reassociated_sums_match_numpy(self):
    x = np.random.default_rng(7).standard_normal((1000, 64))
    np.testing.assert_allclose(vmap(lambda r: (r * r).sum() * 2 + r.max())(Tensor(x)).numpy(), (x * x).sum(1) * 2 + x.max(1), rtol=1e-12)

if __name__ == "__main__":
  unittest.main()
