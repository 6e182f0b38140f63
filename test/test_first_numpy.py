"""engine/first_numpy.py (first-build-tier, 0.14 line): a CPU kernel's first run is numpy over the kernel's ranges, with no codegen and
no clang; the next time it is lowered (a second realize, TinyJit's capture) it is built and compiled. Each test runs a function twice:
the first run must be numpy's, the second a compiled kernel's, and both must agree with a numpy oracle in float64 (an independent
computation, not first_numpy's code) on random, non-uniform data. Kernels numpy can't run as the C program would are built at once."""
import unittest, unittest.mock
import numpy as np
from tinygrad import Tensor, TinyJit, Device, dtypes, Variable
from tinygrad.helpers import Context
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's first tier: 0.12's tiers are engine/tiered.py")
from fork_topics import skip_module_unless, applied
skip_module_unless('first-numpy')
from tinygrad import vmap, jacfwd   # noqa: E402
from tinygrad.engine import first_numpy, first_loop, first_tier   # noqa: E402
from tinygrad.scan_kernel import scan_kernel   # noqa: E402
from tinygrad.uop.ops import Ops   # noqa: E402

RNG = np.random.default_rng(5607)
def f32(*shape, lo=-2.0, hi=3.0) -> np.ndarray: return RNG.uniform(lo, hi, shape).astype(np.float32)
def f64(a:np.ndarray) -> np.ndarray: return a.astype(np.float64)

@unittest.skipUnless(Device.DEFAULT == "CPU", "numpy runs a CPU kernel's first run only")
class FirstNumpyCase(unittest.TestCase):
  def setUp(self):
    self.enterContext(Context(FIRST_NUMPY=1, TIERED=1))
    # the kernels' first run: a function's first realize is scheduled here, not run over its graph (test_first_graph.py)
    if applied('first-numpy-graph'): self.enterContext(Context(FIRST_GRAPH=0))
    self.runs = self.loop_runs = 0
    orig = first_numpy.NumpyKernel.__call__
    def counting(kernel, *a, **kw):
      self.runs += 1
      return orig(kernel, *a, **kw)
    self.enterContext(unittest.mock.patch.object(first_numpy.NumpyKernel, "__call__", counting))
    orig_loop = first_loop.LoopKernel.__call__
    def counting_loop(kernel, *a, **kw):
      self.runs, self.loop_runs = self.runs + 1, self.loop_runs + 1
      return orig_loop(kernel, *a, **kw)
    self.enterContext(unittest.mock.patch.object(first_loop.LoopKernel, "__call__", counting_loop))

  def numpy_runs(self, f, *args) -> tuple[list[np.ndarray], int]:
    """f's outputs on Tensors of args, and how many kernels numpy ran for them"""
    n = self.runs
    out = f(*[Tensor(a) for a in args])
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))], self.runs - n

  def check(self, f, want, *args, rtol=1e-5, atol=1e-5) -> list[np.ndarray]:
    """f's first run numpy's, its second compiled, both against want (a float64 oracle's outputs); the first run's outputs"""
    first, ran = self.numpy_runs(f, *args)
    second, ran_again = self.numpy_runs(f, *args)
    self.assertGreater(ran, 0, "the first run was not numpy's")
    self.assertEqual(ran_again, 0, "the second run was not compiled")
    want = want if isinstance(want, (tuple, list)) else (want,)
    self.assertEqual(len(first), len(want))
    for a, b, w in zip(first, second, want):
      np.testing.assert_allclose(a, w, rtol=rtol, atol=atol)
      np.testing.assert_allclose(b, w, rtol=rtol, atol=atol)
    return first

class TestWorkloads(FirstNumpyCase):
  """bench's W1..W6 and W4's Jacobian, small: a strided view for each affine index, a matmul, an einsum, a gated store"""
  def test_row_reduce(self):   # W1: a sum and a max over each row
    x = f32(300, 64)
    self.check(lambda X: vmap(lambda r: (r * r).sum() * 2 + r.max())(X), (f64(x) ** 2).sum(1) * 2 + x.max(1), x)

  def test_mlp(self):   # W2: the REDUCE ADD of a product with an outer product in it is np.matmul
    x, w1, b1, w2, b2 = f32(70, 64), f32(64, 48) / 8, f32(48), f32(48, 8) / 8, f32(8)
    want = np.maximum(f64(x) @ f64(w1) + b1, 0) @ f64(w2) + b2
    self.check(lambda X, W1, B1, W2, B2: vmap(lambda r: (r @ W1 + B1).relu() @ W2 + B2)(X), want, x, w1, b1, w2, b2, rtol=1e-4, atol=1e-4)

  def test_batched_small_matmuls(self):   # a batch axis on both sides of the matmul
    a, b = f32(33, 5, 7), f32(33, 7, 4)
    self.check(lambda A, B: vmap(lambda p, q: p @ q)(A, B), np.einsum("bij,bjk->bik", f64(a), f64(b)), a, b, rtol=1e-5, atol=1e-5)

  def test_stack_index(self):   # W3: rows of 3, each output a WHERE over the stacked lanes
    x, c = f32(90, 3), f32(3)
    want = np.stack([x * c[0], x * c[1], x * c[2]], axis=1).reshape(90, 9)[:, [0, 4, 8, 5, 1]]
    self.check(lambda X, C: vmap(lambda r: Tensor.stack(r * C[0], r * C[1], r * C[2]).flatten()[[0, 4, 8, 5, 1]])(X), want, x, c)

  def test_pairwise_distances(self):   # W5: a nested vmap, a product with no outer product in it (einsum)
    a, b = f32(40, 16), f32(30, 16)
    want = np.sqrt(((f64(a)[:, None] - f64(b)[None]) ** 2).sum(-1))
    self.check(lambda A, B: vmap(lambda p: vmap(lambda q: ((p - q) ** 2).sum().sqrt())(B))(A), want, a, b)

  def test_per_example_gradients(self):   # W6: five kernels of a gradient
    w1, b1, w2, x, y = f32(6, 10) / 3, f32(10), f32(10, 1) / 3, f32(50, 6), f32(50, 1)
    def grads(W1, B1, W2, X, Y):
      return vmap(lambda xi, yi: tuple(((xi @ W1 + B1).relu() @ W2 - yi).square().sum().gradient(W1, B1, W2)))(X, Y)
    h = f64(x) @ f64(w1) + b1
    d = 2 * (np.maximum(h, 0) @ f64(w2) - y)                       # (50, 1)
    dh = (d @ f64(w2).T) * (h > 0)                                 # (50, 10)
    want = (np.einsum("bi,bj->bij", f64(x), dh), dh, np.einsum("bi,bj->bij", np.maximum(h, 0), d))
    self.check(grads, want, w1, b1, w2, x, y, rtol=1e-4, atol=1e-4)

  def test_jacobian(self):   # W4's vmap(jacfwd): a store gated by its value
    s = f32(64, 3)
    f = lambda v: Tensor.stack(v[0] * v[1].sin(), v[2].cos() + v[0] * v[0], v[1] / (1 + v[2] * v[2]))
    x0, x1, x2 = f64(s).T
    z = np.zeros_like(x0)
    want = np.stack([np.stack([np.sin(x1), x0 * np.cos(x1), z], -1), np.stack([2 * x0, z, -np.sin(x2)], -1),
                     np.stack([z, 1 / (1 + x2 * x2), -2 * x1 * x2 / (1 + x2 * x2) ** 2], -1)], 1)
    self.check(lambda S: vmap(jacfwd(f))(S), want, s)

class TestOps(FirstNumpyCase):
  """numpy computes what the C program does: C's integer division, tinygrad's max, casts, transcendentals to the last bits of float32"""
  def test_transcendentals(self):
    x = f32(200, lo=-40, hi=40)
    want = np.sin(f64(x)) * 2 + np.exp(f64(x) / 40) - np.log(f64(x) ** 2 + 1) + np.sqrt(np.abs(f64(x))) + 1 / (f64(x) ** 2 + 0.5)
    self.check(lambda X: X.sin() * 2 + (X / 40).exp() - (X * X + 1).log() + X.abs().sqrt() + 1 / (X * X + 0.5), want, x, rtol=1e-5, atol=2e-5)

  def test_cos_of_large_arguments(self):   # Tensor.cos is sin(pi/2 - x): cos of x itself, as fix-cos-large-arguments' decomposition
    x = np.concatenate([f32(50, lo=1e3, hi=1e4), f32(50, lo=-1e5, hi=-1e3)])
    self.check(lambda X: X.cos(), np.cos(f64(x)), x, atol=1e-6)
    self.check(lambda X: (X * 3.5).cos(), np.cos(f64(x * np.float32(3.5))), x, atol=1e-6)

  def test_float64(self):
    x = RNG.uniform(-5, 5, (20, 30))
    self.check(lambda X: (X * 1e-3).exp().sum(1) + X.max(1) / 7, np.exp(x * 1e-3).sum(1) + x.max(1) / 7, x, rtol=1e-13, atol=1e-13)

  def test_int_division_and_modulo(self):   # tinygrad's // and % floor, as Python's, on negative operands too
    a, b = RNG.integers(-1000, 1000, 300).astype(np.int32), (RNG.integers(1, 40, 300) * RNG.choice([-1, 1], 300)).astype(np.int32)
    first = self.check(lambda A, B: (A // B, A % B, A // 7, A % -5), (a // b, a % b, a // 7, a % -5), a, b, rtol=0, atol=0)
    self.assertEqual(first[0].dtype, np.int32)

  def test_integer_bits(self):
    a, b = RNG.integers(-2**30, 2**30, 200).astype(np.int32), RNG.integers(0, 8, 200).astype(np.int32)
    want = ((a << 3) ^ (a >> b), (a & 0xff) | b, a * 1664525 + 1013904223)
    self.check(lambda A, B: ((A << 3) ^ (A >> B), (A & 0xff) | B, A * 1664525 + 1013904223), want, a, b, rtol=0, atol=0)

  def test_casts(self):   # float to int truncates toward zero; uint8 wraps
    x = f32(100, lo=-300, hi=300)
    want = (x.astype(np.int32), (x.astype(np.int32) & 0xff).astype(np.uint8), (x > 0).astype(np.float32) * 2)
    self.check(lambda X: (X.cast(dtypes.int32), X.cast(dtypes.int32).cast(dtypes.uint8), (X > 0).float() * 2), want, x, rtol=0, atol=0)

  def test_half(self):
    x = f32(64, 8).astype(np.float16)
    self.check(lambda X: (X * X + 1).sum(1), (f64(x) ** 2 + 1).sum(1), x, rtol=2e-3, atol=2e-2)

  def test_max_of_nan_as_compiled(self):   # tinygrad's max keeps its first operand where the comparison fails: as the compiled kernel
    x = f32(40)
    x[::5] = np.nan
    first, ran = self.numpy_runs(lambda X: (X.maximum(0.5), X.relu()), x)
    self.assertGreater(ran, 0)
    with Context(FIRST_NUMPY=0, TIERED=0): compiled = [(Tensor(x) + 0).maximum(0.5).numpy(), (Tensor(x) + 0).relu().numpy()]
    for a, b in zip(first, compiled): np.testing.assert_array_equal(np.isnan(a), np.isnan(b))

class TestMovement(FirstNumpyCase):
  """indexes that are not a plain strided view: gated (pad, cat), reversed (flip), gathered (a Tensor index), broadcast into a reduce"""
  def test_pad(self):
    x = f32(30, 9)
    self.check(lambda X: vmap(lambda r: r.pad((2, 1)).reshape(3, 4).sum(0) * 3)(X), np.pad(f64(x), ((0, 0), (2, 1))).reshape(30, 3, 4).sum(1) * 3, x)

  def test_cat_and_flip(self):
    a, b = f32(20, 5), f32(20, 3)
    self.check(lambda A, B: A.cat(B.flip(1), dim=1) * 2, np.concatenate([a, b[:, ::-1]], 1) * 2, a, b)

  def test_stencil(self):
    x = f32(4, 10, 12)
    def st(g):
      p = g.pad(((1, 1), (1, 1)))
      return p[:-2, 1:-1] + p[2:, 1:-1] - p[1:-1, :-2] * 2
    p = np.pad(f64(x), ((0, 0), (1, 1), (1, 1)))
    self.check(lambda X: vmap(st)(X), p[:, :-2, 1:-1] + p[:, 2:, 1:-1] - p[:, 1:-1, :-2] * 2, x)

  def test_gather(self):
    x, idx = f32(50, 8), RNG.integers(0, 50, 30).astype(np.int32)
    self.check(lambda X, I: X[I] * 2, f64(x)[idx] * 2, x, idx)

  def test_reduce_of_a_broadcast(self):   # the reduced axis is not one the value depends on: each element added that many times
    x, y = f32(12), f32(12)
    self.check(lambda X: X.reshape(12, 1).expand(12, 9).sum(1) + X.reshape(1, 12).expand(5, 12).max(0), f64(x) * 9 + x, x)
    self.check(lambda X, Y: (X.reshape(12, 1).expand(12, 7) * Y.reshape(12, 1).expand(12, 7)).sum(1), f64(x) * y * 7, x, y)

class TestTiers(FirstNumpyCase):
  def test_tinyjit_captures_compiled(self):
    x = f32(40, 6)
    jf, outs, want = TinyJit(lambda X: vmap(lambda r: (r.exp() * r).sum())(X).realize()), [], (np.exp(f64(x)) * x).sum(1)
    for i in range(4):
      n = self.runs
      outs.append(jf(Tensor(x)).numpy())
      self.assertEqual(self.runs - n, int(i == 0))   # the first call numpy's; the capture and the replays compiled
    for o in outs: np.testing.assert_allclose(o, want, rtol=1e-5)
    self.assertTrue(all(u.src[-1].op is Ops.BINARY for u in jf.captured._linear.toposort() if u.op is Ops.PROGRAM))

  def test_assign_in_place(self):   # each element read where it is written: read first, in numpy as in the loop
    xn = f32(31)
    def f(X):
      X.assign(X * 2 + 1).realize()
      return X
    self.check(f, f64(xn) * 2 + 1, xn)

  def test_counters_as_compiled(self):
    # GlobalCounters count a numpy run: the bytes the compiled loop moves, its ops before the codegen's algebra (sum(x+1) is sum(x)+n there)
    from tinygrad import GlobalCounters
    x = f32(300, 48)
    counts = []
    for on in (1, 0):
      with Context(FIRST_NUMPY=on, TIERED=on):
        X = Tensor(x).realize()
        GlobalCounters.reset()
        ((X * X + 1).sum(1) * 3).realize()
        counts.append((GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.kernel_count))
    (ops, mem, kernels), (ops_c, mem_c, kernels_c) = counts
    self.assertEqual((mem, kernels), (mem_c, kernels_c))
    self.assertTrue(ops_c <= ops <= 2 * ops_c, (ops, ops_c))

  def test_off(self):
    x = f32(23, 4)
    with Context(FIRST_NUMPY=0):
      out, ran = self.numpy_runs(lambda X: X.exp().sum(1), x)
    self.assertEqual(ran, 0)
    np.testing.assert_allclose(out[0], np.exp(f64(x)).sum(1), rtol=1e-5)

  def test_error_keeps_data(self):
    # numpy raising in a first run leaves the inputs' data and the outputs computable (fix-realize-error-keeps-data's promise)
    xn = f32(17, 3)
    x = Tensor(xn)
    y = (x * 1.25).exp()
    with unittest.mock.patch.object(first_numpy, "_Run", side_effect=RuntimeError("boom")), self.assertRaises(RuntimeError): y.realize()
    np.testing.assert_equal(x.numpy(), xn)
    np.testing.assert_allclose(y.numpy(), np.exp(f64(xn) * 1.25), rtol=1e-6)

  def test_sharded_devices_synchronized(self):
    # a shard's copy runs on a device's queue: numpy reads after every device finished what it was given
    x = f32(8, 5)
    self.check(lambda X: (X.shard(("CPU:0", "CPU:1"), axis=0).sin() * 2).sum(1), np.sin(f64(x)).sum(1) * 2, x)

class TestLoopKernel(FirstNumpyCase):
  """engine/first_loop.py: a scan's kernel (a LOOP range, the carry in registers) run as numpy, the steps in Python, the batch an axis"""
  @staticmethod
  def scan(step, n_init:int, length:int, reverse=False, batch=None, batched=None):
    def f(*leaves):
      c, y = scan_kernel(step, list(leaves[:n_init]), list(leaves[n_init:]), length, reverse, batch=batch, batched=batched)
      return [*c, *y]
    return f

  @staticmethod
  def oracle(step, init:list[np.ndarray], xs:list[np.ndarray], reverse=False) -> list[np.ndarray]:
    """the scan in float64 numpy, one example and one step at a time: (the final carries, the stacked ys), over a leading batch axis"""
    outs = []
    for b in range(len(init[0])):
      c, ys = [f64(i[b]) for i in init], {}
      for t in (reversed if reverse else iter)(range(xs[0].shape[1])):
        c, y = step(c, [f64(x[b, t]) for x in xs])
        ys[t] = y
      outs.append([*c, *[np.stack([ys[t][i] for t in sorted(ys)]) for i in range(len(ys[0]))]])
    return [np.stack(o) for o in zip(*outs)]

  def test_bicycle_rollout(self):   # W7's rollout: sin, cos and a carry of 4 over 30 steps, 6 examples
    def step(c, x, m=np):
      (s,), (u,) = c, x
      px, py, th, v = s[0], s[1], s[2], s[3]
      stk = Tensor.stack if m is Tensor else np.stack
      n = stk([px + 0.1 * v * th.cos(), py + 0.1 * v * th.sin(), th + 0.1 * v * (u[1] * 0.5).tanh(), v + 0.1 * u[0]]) if m is Tensor else \
          np.stack([px + 0.1 * v * np.cos(th), py + 0.1 * v * np.sin(th), th + 0.1 * v * np.tanh(u[1] * 0.5), v + 0.1 * u[0]])
      return [n], [n[:2] * 2]
    s0, us = f32(6, 4, lo=-1, hi=1), f32(6, 30, 2, lo=-1, hi=1)
    for reverse in (False, True):
      with self.subTest(reverse=reverse):
        self.check(self.scan(lambda c, x: step(c, x, Tensor), 1, 30, reverse, batch=6), self.oracle(step, [s0], [us], reverse), s0, us,
                   rtol=1e-4, atol=1e-5)

  def test_permuting_carry(self):   # each register read as the step began, though symbolic drops the AFTERs that said so
    def step(c, x, stk=Tensor.stack):
      (v, n), (w, k) = c, x
      return [stk([v[2], v[0] * w.sum(), v[1] + k]), n + 1], [v.max(), (v * w[:3]).sum() + k]
    v0, n0, ws, ks = f32(3, 3).astype(np.float64), np.zeros(3), f32(3, 9, 5, lo=0.5, hi=1.0).astype(np.float64), f32(3, 9).astype(np.float64)
    want = self.oracle(lambda c, x: step(c, x, np.stack), [v0, n0], [ws, ks])
    self.check(self.scan(step, 2, 9, batch=3), want, v0, n0, ws, ks, rtol=1e-12, atol=1e-12)

  def test_shared_leaf_and_closed_over(self):   # an xs leaf every example reads, a Tensor the step closes over
    w = f32(4, 4) / 4
    def step(c, x, W=None):
      (h,), (a, e) = c, x
      return ([(W @ h + a * e).relu()], [h.sum()]) if W is not None else ([np.maximum(f64(w) @ h + a * e, 0)], [h.sum()])
    h0, xa, xe = f32(5, 4), f32(5, 7, 4), f32(7, 4)
    want = self.oracle(step, [h0], [xa, np.broadcast_to(xe, (5, 7, 4))])
    self.check(lambda H, A, E, W: self.scan(lambda c, x: step(c, x, W), 1, 7, batch=5, batched=[True, True, False])(H, A, E), want,
               h0, xa, xe, w, rtol=1e-4, atol=1e-5)

  @unittest.skipUnless(applied('jit-first-call-numpy'), "TinyJit's hook")
  def test_tinyjit_first_call_keeps_numpy(self):
    # a kernel lowered again in a TinyJit's first call (an iteration run twice) stays numpy's: the capture builds it, the first call doesn't
    x = f32(30, 5, lo=-1, hi=1)
    for budget, numpy_runs, k in ((first_tier.BUILD_S, 2, 1.5), (0.0, 1, 1.25)):   # (another kernel each: none compiled yet)
      def twice(X):
        for _ in range(2): X = vmap(lambda r: (r.sin() * k - r * 0.5).exp() * 0.5)(X).realize()
        return X
      want = f64(x)
      for _ in range(2): want = np.exp(np.sin(want) * k - want * 0.5) * 0.5
      with self.subTest(budget=budget), unittest.mock.patch.object(first_tier, "BUILD_S", budget), \
           unittest.mock.patch.object(first_tier, "BUILD_S_PER_NODE", first_tier.BUILD_S_PER_NODE if budget else 0.0):
        Device["CPU"].synchronize()
        jf, n = TinyJit(twice), self.runs
        first = jf(Tensor(x)).numpy()
        self.assertEqual(self.runs - n, numpy_runs)   # without the budget, the second lowering is built in full as outside a jit
        for _ in range(2): np.testing.assert_allclose(jf(Tensor(x)).numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(first, want, rtol=1e-5)
        self.assertEqual(self.runs - n, numpy_runs)

  def test_eager_second_lowering_compiled(self):   # outside a jit the second lowering is built in full, as for any kernel
    s0, us = f32(4, 3), f32(4, 6, 3)
    f = self.scan(lambda c, x: ([c[0] * 0.5 + x[0]], [c[0].exp()]), 1, 6, batch=4)
    def step(c, x): return [c[0] * 0.5 + x[0]], [np.exp(c[0])]
    self.check(f, self.oracle(step, [s0], [us]), s0, us, rtol=1e-5)

class TestBuilt(FirstNumpyCase):
  """kernels numpy can't run as the C program does are built and compiled at their first run"""
  def built_first(self, f, want, *args):
    out, ran = self.numpy_runs(f, *args)
    self.assertEqual(ran, 0)
    for o, w in zip(out, want if isinstance(want, tuple) else (want,)): np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-6)

  def test_symbolic_size(self):
    x = f32(20)
    v = Variable("n", 1, 20).bind(13)
    self.built_first(lambda X: X[:v].exp().sum(), np.exp(f64(x[:13])).sum(), x)

  def test_too_much_work(self):
    x = f32(64, 64)
    with unittest.mock.patch.object(first_numpy, "MAX_WORK", 1000): self.built_first(lambda X: (X * X).sum(1), (f64(x) ** 2).sum(1), x)

  def test_loop_kernel_too_much_work(self):   # (the ys' copy out of the scan's one output buffer is numpy's)
    s0, us = f32(2, 3), f32(2, 40, 3)
    want = [s0 + us.astype(np.float64).sum(1), np.cumsum(f64(us), 1) + s0[:, None]]
    # (no worker pool: a worker builds without the mock)
    with unittest.mock.patch.object(first_numpy, "MAX_WORK", 100), Context(PARALLEL=0):
      out, _ = self.numpy_runs(TestLoopKernel.scan(lambda c, x: ([c[0] + x[0]],) * 2, 1, 40, batch=2), s0, us)
    self.assertEqual(self.loop_runs, 0)
    for o, w in zip(out, want): np.testing.assert_allclose(o, w, rtol=1e-5)

if __name__ == "__main__":
  unittest.main()
