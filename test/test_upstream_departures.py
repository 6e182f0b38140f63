"""Where the 0.14 line departs from upstream's own tests, each on purpose (bench/analysis-0.14.0.md, "Where the 0.14 line departs from
upstream's tests"); values against numpy.
- One Variable bound to several values in one schedule (vmap-chunks): vanilla 0.14.0 raises "bind mismatch on i", which upstream's
  test_stunning `test_indexing_two_bind` and test_assign `TestAssignOrdering::test_variable_slice_ordering` expect; the fork gives each
  CALL its own value. The error stays where a value would be wrong: a TinyJit input bound to several values (a replay keeps them).
- test_symbolic_jit `TestSymbolicJit::test_attention` (fix-variable-not-a-buffer): 4 kernels where vanilla 0.14.0 runs 5 (0.12: 4).
- test/null/test_memory_coalescing `TestFloat4::test_float4_multidim` and `test_float4_multidim_unaligned_load` (cpu-codegen): an axis
  upcast by 8 on clang loads and stores as float8, one AVX register, where upstream counts two float4s."""
import unittest
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's departures from upstream's tests (0.12 materialized here)")
import numpy as np
from dataclasses import replace
from fork_topics import skip_unless
from tinygrad import Tensor, Variable, TinyJit, GlobalCounters, Device
from tinygrad.uop.ops import Ops
from tinygrad.codegen import to_program
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.engine.realize import run_linear
from tinygrad.renderer.cstyle import ClangRenderer

A = np.arange(1000).reshape(100, 10)
def arange_rows() -> Tensor: return Tensor.arange(1000).reshape(100, 10).contiguous()

@skip_unless("vmap-chunks")
class TestTwoBindsOfOneVariable(unittest.TestCase):
  def setUp(self): self.i, self.x = Variable("i", 0, 99), Tensor(A.astype(np.int32)).realize()

  def test_indexing_two_bind(self):
    # upstream's test_stunning test_indexing_two_bind, which expects "bind mismatch on i"
    a, i = arange_rows(), self.i
    np.testing.assert_equal(a[i.bind(12)].cat(a[i.bind(76)]).numpy(), np.concatenate([A[12], A[76]]))

  def test_three_binds(self):
    x, i = self.x, self.i
    np.testing.assert_equal(x[i.bind(12)].cat(x[i.bind(76)], x[i.bind(3)]).numpy(), np.concatenate([A[12], A[76], A[3]]))

  def test_bind_reused(self):
    x, i, b12 = self.x, self.i, self.i.bind(12)
    np.testing.assert_equal((x[b12] + x[i.bind(76)] * 2 + x[i.bind(12)] * 3 - x[b12]).numpy(), A[76] * 2 + A[12] * 3)
    np.testing.assert_equal(Tensor.stack(x[i.bind(1)], x[i.bind(2)], x[i.bind(1)]).numpy(), A[[1, 2, 1]])

  def test_two_variables_two_values_each(self):
    x, i, j = self.x, self.i, Variable("j", 0, 99)
    np.testing.assert_equal((x[i.bind(1)] + x[j.bind(2)] * 10 + x[i.bind(3)] * 100 + x[j.bind(4)] * 1000).numpy(),
                            A[1] + A[2] * 10 + A[3] * 100 + A[4] * 1000)

  def test_reduces_over_two_slices(self):
    x, i = self.x, self.i
    np.testing.assert_equal((x[i.bind(5):i.bind(5)+3].sum(0) - x[i.bind(50):i.bind(50)+3].max(0)).numpy(), A[5:8].sum(0) - A[50:53].max(0))

  def test_shape_variable_two_values(self):
    # one kernel reads i and i_1 (its loop ends): its stats count the values its CALL binds (fix-jit-inner-variables)
    x, i = self.x, Variable("i", 1, 99)
    np.testing.assert_equal((x[:i.bind(3)].sum(0) + x[:i.bind(7)].sum(0) * 10).numpy(), A[:3].sum(0) + A[:7].sum(0) * 10)

  def test_variable_slice_assigns(self):
    # 0.14's test_assign TestAssignOrdering::test_variable_slice_ordering, which expects "bind mismatch on v": two assigns, one realize
    v, buf = Variable("v", 0, 3), Tensor.zeros(4, 3).contiguous().realize()
    buf[v.bind(0):v.bind(0)+1].assign(Tensor.ones(1, 3))
    buf[v.bind(1):v.bind(1)+1].assign(Tensor.full((1, 3), 2.0))
    np.testing.assert_equal(buf.numpy(), [[1]*3, [2]*3, [0]*3, [0]*3])

  def test_assigns_read_what_the_last_wrote(self):
    v, B = Variable("v", 0, 3), np.arange(12, dtype=np.float32).reshape(4, 3)
    buf = Tensor(B).realize()
    row = lambda k: buf[v.bind(k):v.bind(k)+1]
    row(0).assign(row(0) + row(1))
    row(3).assign(row(0) * 2)
    row(2).assign(row(2) + row(3) + row(2))
    for k in (1, 2): row(k).assign(row(k) - 1)
    ref = B.copy(); ref[0] += ref[1]; ref[3] = ref[0] * 2; ref[2] = ref[2] * 2 + ref[3]; ref[1:3] -= 1
    np.testing.assert_equal(buf.numpy(), ref)

  def test_jit_binds_inside(self):
    # binds the jitted function makes itself, from constants: every replay keeps them, on this call's data
    i, j = self.i, Variable("j", 0, 99)
    @TinyJit
    def f(x:Tensor, p) -> Tensor: return (x[i.bind(3)].cat(x[i.bind(5)]) + x[p].repeat(2)).realize()
    for s in range(5):
      X = np.random.default_rng(s).integers(0, 100, (100, 10)).astype(np.int32)
      np.testing.assert_equal(f(Tensor(X).realize(), j.bind(7*s)).numpy(), np.concatenate([X[3], X[5]]) + np.tile(X[7*s], 2))

  def test_jit_input_bound_twice_raises(self):
    # a CALL keeps the values it was captured with: a replay would compute rows 1 and 2 again
    @TinyJit
    def f(x:Tensor, p, q) -> Tensor: return x[p].cat(x[q]).realize()
    np.testing.assert_equal(f(self.x, self.i.bind(1), self.i.bind(2)).numpy(), np.concatenate([A[1], A[2]]))   # not captured yet
    with self.assertRaisesRegex(RuntimeError, "bind mismatch on i, 5 != 9"): f(self.x, self.i.bind(5), self.i.bind(9))

  def test_jit_input_bound_inside_too_raises(self):
    i = self.i
    @TinyJit
    def f(x:Tensor, p) -> Tensor: return (x[p] + x[i.bind(3)]).realize()
    np.testing.assert_equal(f(self.x, i.bind(7)).numpy(), A[7] + A[3])
    with self.assertRaisesRegex(RuntimeError, "bind mismatch on i, 3 != 8"): f(self.x, i.bind(8))

def attention(q:Tensor, k:Tensor, v:Tensor) -> Tensor:
  return Tensor.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).realize()

def attention_np(q:np.ndarray, k:np.ndarray, v:np.ndarray) -> np.ndarray:
  q, k, v = (t.transpose(0, 2, 1, 3).astype(np.float64) for t in (q, k, v))
  s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v

@skip_unless("fix-variable-not-a-buffer")
class TestSymbolicAttention(unittest.TestCase):
  def test_attention(self):
    # upstream's test_symbolic_jit TestSymbolicJit::test_attention: the softmax's normalized value reads three buffers and i, so it is
    # recomputed in the matmul with v instead of being a kernel of its own (vanilla 0.14.0 counted i as a buffer: 5 kernels)
    rng = np.random.default_rng(0)
    Q, K, V = (rng.random(s, dtype=np.float32) for s in ((2, 1, 4, 8), (2, 10, 4, 8), (2, 10, 4, 8)))
    q, k, v = Tensor(Q).realize(), Tensor(K).realize(), Tensor(V).realize()
    jf = TinyJit(attention)
    for n in (1, 2, 3, 10, 4, 7):
      vi = Variable("i", 1, 10).bind(n)
      GlobalCounters.reset()
      out = jf(q, k[:, :vi], v[:, :vi])[:2, :4, :1, :8].numpy()
      np.testing.assert_allclose(out, attention_np(Q, K[:, :n], V[:, :n]), atol=1e-6, rtol=1e-5)
      if jf.captured is not None: self.assertEqual(GlobalCounters.kernel_count, 4)
    self.assertEqual(len([c for c in jf.captured.linear.src if c.op is Ops.CALL and c.src[0].op is Ops.PROGRAM]), 4)

@skip_unless("cpu-codegen")
@unittest.skipUnless(isinstance(Device[Device.DEFAULT].renderer, ClangRenderer), "clang's AVX-wide loads and stores")
class TestCoalesceToOneRegister(unittest.TestCase):
  # upstream's test/null/test_memory_coalescing TestFloat4: an axis of 8 upcast by 4 and by 2 counts (4, 2) float4 loads and stores,
  # (0, 2) where the loads are unaligned; on clang the fork coalesces up to one AVX register (float8), and computes the same values
  def _run(self, A:np.ndarray, B:np.ndarray, shrink, opts:tuple[Opt, ...]) -> list[tuple]:
    c = Tensor(A).realize().shrink(shrink) + Tensor(B).realize().shrink(shrink)
    linear = c.schedule_linear()
    call = linear.src[0]
    ast = call.src[0].replace(arg=replace(call.src[0].arg, opts_to_apply=opts))
    uops = to_program(ast, Device[Device.DEFAULT].renderer).src[1].src
    run_linear(linear.replace(src=(call.replace(src=(ast,)+call.src[1:]),)))
    sl = tuple(slice(*s) for s in shrink)
    np.testing.assert_equal(c.numpy(), A[sl] + B[sl])
    return [(u.op, u.shape if u.op is Ops.LOAD else u.src[1].shape) for u in uops if u.op in (Ops.LOAD, Ops.STORE)]

  def test_float4_multidim(self):
    rng = np.random.default_rng(0)
    A, B = rng.random((2, 8), dtype=np.float32), rng.random((2, 8), dtype=np.float32)
    got = self._run(A, B, ((0, 2), (0, 8)), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 0, 2)))
    self.assertEqual(got, [(Ops.LOAD, (8,)), (Ops.LOAD, (8,)), (Ops.STORE, (8,))])

  def test_float4_multidim_unaligned_load(self):
    rng = np.random.default_rng(1)
    A, B = rng.random((2, 9), dtype=np.float32), rng.random((2, 9), dtype=np.float32)
    got = self._run(A, B, ((0, 2), (1, 9)), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 1, 2)))
    self.assertEqual(got, [(Ops.LOAD, ())]*16 + [(Ops.STORE, (8,))])   # unaligned: scalar loads, one float8 store

if __name__ == "__main__":
  unittest.main()
