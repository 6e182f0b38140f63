"""The CPU codegen patches the benchmarks led to (bench/analysis.md): the matmul register tile with float8 loads
(codegen/opt/heuristic.py, codegen/late/devectorizer.py) and cos sharing sin's Payne-Hanek reduction (uop/decompositions.py).
Results are checked against numpy; the kernel structure (opts, float8, reductions) is asserted exactly, never timed."""
import unittest, math
import numpy as np
from tinygrad import Tensor, Device, dtypes, vmap
from tinygrad.codegen import get_program
from tinygrad.codegen.opt import OptOps, Opt
from tinygrad.helpers import Context

def tile(p) -> list[tuple[OptOps, int]]: return [(o.op, o.arg) for o in p.applied_opts if o.op is not OptOps.THREAD]

def program(t:Tensor):
  """the ProgramSpec of the last kernel that realizes t"""
  return get_program([si for si in t.schedule() if si.ast.op.name == "SINK"][-1].ast, Device[Device.DEFAULT].renderer)

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
    # N unit-stride in B: 16 columns (two float8) by 4 rows of accumulators, the reduce not unrolled
    p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 64))
    self.assertEqual(tile(p), [(OptOps.UPCAST, 16), (OptOps.UPCAST, 4)])
    self.assertIn("float8", p.src)

  def test_tile_narrow_n(self):
    # N=8: one float8 per row, so 8 rows
    p = program(Tensor.empty(64, 64) @ Tensor.empty(64, 8))
    self.assertEqual(tile(p), [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)])

  def test_tile_float64(self):
    # the same 256 bytes of accumulators: 8 doubles by 4 rows
    p = program(Tensor.empty(64, 64, dtype=dtypes.float64) @ Tensor.empty(64, 64, dtype=dtypes.float64))
    self.assertEqual(tile(p), [(OptOps.UPCAST, 8), (OptOps.UPCAST, 4)])

  def test_transposed_b_keeps_generic_opts(self):
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
                     [[(OptOps.UPCAST, 16), (OptOps.UPCAST, 4)], [(OptOps.UPCAST, 8), (OptOps.UPCAST, 8)]])
    want = np.stack([np.maximum(e @ w1 + b1, 0) @ w2 + b2 for e in x.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

  def test_float8_not_on_stack_buffers(self):
    # a kernel-local buffer (PCONTIG's temp of a double matmul) is a stack array, not 32-byte aligned: float8 there segfaulted
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(3))
    for opts in [(Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 4))]:
      with Context(PCONTIG=2): got = (Tensor(a) @ Tensor(b) @ Tensor(c)).contiguous(arg=opts).numpy()
      np.testing.assert_allclose(got, a.astype(np.float64) @ b @ c, rtol=1e-4, atol=1e-4)

  def test_float8_from_blob_16_byte_aligned(self):
    # memory tinygrad didn't allocate (malloc, numpy, from_blob) is 16-byte aligned, not 32: float8 declared 32-aligned faulted here
    base = np.zeros(1024 + 8, dtype=np.float32)
    a = base[(off:=(32 - base.ctypes.data % 32) % 32 // 4 + 4):off + 1024]
    a[:] = np.random.default_rng(4).standard_normal(1024)
    self.assertEqual(a.ctypes.data % 32, 16)
    t = Tensor.from_blob(a.ctypes.data, (32, 32), dtype=dtypes.float32, device="CPU")
    np.testing.assert_allclose((t @ t).numpy(), a.reshape(32, 32).astype(np.float64) @ a.reshape(32, 32), rtol=1e-4, atol=1e-4)
    np.testing.assert_equal((t * 2).numpy(), a.reshape(32, 32) * 2)

  def test_float8_unaligned_offset(self):
    # float8 loads of a slice that starts mid-vector must not assume alignment the offset breaks
    a = np.arange(300, dtype=np.float32)
    np.testing.assert_equal((Tensor(a)[3:259].reshape(16, 16) * 2).numpy(), a[3:259].reshape(16, 16) * 2)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer decomposes SIN")
class TestCPUCosSharesSinReduction(unittest.TestCase):
  # the Payne-Hanek reduction is the only user of this word of 2/pi's table
  def reductions(self, t:Tensor) -> int: return program(t).src.count("920167782u")

  def test_cos_accurate_for_large_arguments(self):
    x = np.concatenate([np.random.default_rng(0).standard_normal(64) * s for s in (1, 30, 1e3, 1e6)] + [[1e30, -1e30, 31.6, -28.5]])
    x = x.astype(np.float32)
    # cos reduces |x| itself: no rounding of pi/2-x, so large arguments are as accurate as sin's
    np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x.astype(np.float64)), atol=2e-6)
    np.testing.assert_allclose(Tensor(x).sin().numpy(), np.sin(x.astype(np.float64)), atol=2e-6)

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

if __name__ == "__main__":
  unittest.main()
