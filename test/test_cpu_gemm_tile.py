"""The CPU matmul register tile of the cpu-codegen topic (codegen/opt/heuristic_cpu.py's cpu_gemm_tile) on either line: a matmul whose N
axis is unit-stride in B upcasts M and N into a tile of accumulators and leaves the reduce rolled. The 0.12 line keeps vector ALUs for
clang and takes a 4x16 float32 tile (8x16 with AVX-512); the 0.14 line's accumulators are scalars clang vectorizes, and its tile is one
32-byte vector of N by 4 rows (bench/analysis-0.14.0.md). The opts are asserted exactly and the results checked against numpy in float64,
never timed."""
from fork_topics import skip_module_unless
skip_module_unless('cpu-codegen')
import unittest
import numpy as np
from tinygrad import Tensor, Device
from tinygrad.codegen.opt import OptOps
from tinygrad.codegen.opt.heuristic_cpu import cpu_tile_bytes

def kernel_opts(t:Tensor) -> list[tuple[OptOps, int]]:
  """the opts the heuristics give the last kernel that realizes t (launch threads left out)"""
  ren = Device[Device.DEFAULT].renderer
  if hasattr(Tensor, "schedule_linear"):   # 0.14: the schedule is a LINEAR of CALLs, each CALL's src[0] its kernel's AST
    from tinygrad.codegen.opt.postrange import apply_opts
    opts = apply_opts(t.schedule_linear().src[-1].src[0], ren).arg.applied_opts
  else:
    from tinygrad.codegen import get_program
    opts = get_program([si for si in t.schedule() if si.ast.op.name == "SINK"][-1].ast, ren).applied_opts
  return [(o.op, o.arg) for o in opts if o.op is not OptOps.THREAD]

def tile(itemsize:int) -> list[tuple[OptOps, int]]:
  """this line's tile: the rows (M) upcast first, then the columns (N)"""
  if hasattr(Tensor, "schedule_linear"): return [(OptOps.UPCAST, 4), (OptOps.UPCAST, 32 // itemsize)]
  n = 64 // max(itemsize, 4)
  return [(OptOps.UPCAST, min(8, cpu_tile_bytes() // itemsize // n)), (OptOps.UPCAST, n)]

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's heuristics")
class TestCPUGemmTile(unittest.TestCase):
  def test_tile_float32(self): self.assertEqual(kernel_opts(Tensor.empty(64, 64) @ Tensor.empty(64, 64)), tile(4))
  def test_tile_float64(self):
    self.assertEqual(kernel_opts(Tensor.empty(64, 64, dtype="float64") @ Tensor.empty(64, 64, dtype="float64")), tile(8))
  def test_tile_of_a_vmapped_layer(self):
    # bench W2's first kernel: each example's row times a shared weight is one matmul over the batch
    from tinygrad import vmap
    self.assertEqual(kernel_opts(vmap(lambda x, w: x @ w, in_axes=(0, None))(Tensor.empty(256, 64), Tensor.empty(64, 64))), tile(4))

  def test_transposed_b_keeps_generic_opts(self):
    # N is not unit-stride in B.T: no tile, the generic upcasts (which unroll the reduce)
    self.assertNotEqual(kernel_opts(Tensor.empty(64, 64) @ Tensor.empty(64, 64).T), tile(4))

  def test_not_for_a_reduce_that_is_not_a_matmul(self):
    self.assertNotEqual(kernel_opts((Tensor.empty(64, 64, 64) * 2).sum(1)), tile(4))

  def test_against_numpy(self):
    rng = np.random.default_rng(7)
    for m, k, n, dtype, tb in [(64, 64, 64, np.float32, False), (20, 64, 8, np.float32, False), (12, 5, 4, np.float32, False),
                               (36, 7, 24, np.float32, False), (8, 33, 48, np.float32, False), (3, 4, 5, np.float32, False),
                               (16, 16, 1, np.float32, False), (64, 64, 64, np.float64, False), (12, 5, 8, np.float64, False),
                               (64, 64, 64, np.float32, True)]:
      with self.subTest(shape=(m, k, n), dtype=np.dtype(dtype).name, transposed_b=tb):
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        got = (Tensor(a) @ (Tensor(b).T if tb else Tensor(b))).numpy()
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, a.astype(np.float64) @ (b.T if tb else b).astype(np.float64), rtol=tol, atol=tol)

if __name__ == "__main__":
  unittest.main()
