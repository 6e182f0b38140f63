"""engine/first_graph.py (first-numpy-graph, 0.14 line): a function's first realize in a process runs as numpy over its tensor graph, with
no schedule; its next realize is scheduled (and its kernels' first run is engine/first_numpy.py's), the one after that compiled. Each test
realizes a function three times and compares every run with a numpy oracle in float64 (an independent computation, not first_graph's
code) on random, non-uniform data: the first run must be the graph's, the later ones must not. Functions numpy can't run as the kernels
would are scheduled at once."""
import unittest, unittest.mock
import numpy as np
from tinygrad import Tensor, TinyJit, Device, dtypes, Variable
from tinygrad.helpers import Context, GlobalCounters
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's first tier")
from fork_topics import skip_module_unless, applied
skip_module_unless('first-numpy-graph')
from tinygrad import vmap, jacfwd   # noqa: E402
from tinygrad.engine import first_graph   # noqa: E402

RNG = np.random.default_rng(7106)
def f32(*shape, lo=-2.0, hi=3.0) -> np.ndarray: return RNG.uniform(lo, hi, shape).astype(np.float32)
def f64(a:np.ndarray) -> np.ndarray: return a.astype(np.float64)

@unittest.skipUnless(Device.DEFAULT == "CPU", "numpy runs a CPU function's first realize only")
class GraphCase(unittest.TestCase):
  def setUp(self):
    self.enterContext(Context(FIRST_NUMPY=1, FIRST_GRAPH=1, TIERED=1))
    self.enterContext(unittest.mock.patch.object(first_graph, "seen", set()))   # each test's functions are new to the process
    self.runs = 0
    orig = first_graph.NumpyGraph.__call__
    def counting(g, *a, **kw):
      self.runs += 1
      return orig(g, *a, **kw)
    self.enterContext(unittest.mock.patch.object(first_graph.NumpyGraph, "__call__", counting))

  def graph_runs(self, f, *args) -> tuple[list[np.ndarray], int]:
    """f's outputs on Tensors of args (realized first), and how many functions numpy ran as graphs for them"""
    ts = [Tensor(a).realize() if isinstance(a, np.ndarray) else a for a in args]
    n = self.runs
    out = f(*ts)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    Tensor.realize(*outs)
    return [o.numpy() for o in outs], self.runs - n

  def check(self, f, want, *args, rtol=1e-5, atol=1e-5) -> None:
    """f's first run the graph's, its second and third not, each against want (a float64 oracle's outputs)"""
    want = want if isinstance(want, (tuple, list)) else (want,)
    for k in range(3):
      out, ran = self.graph_runs(f, *args)
      if k == 0: self.assertGreater(ran, 0, "the first run was not numpy's over the graph")
      else: self.assertEqual(ran, 0, f"run {k+1} was numpy's over the graph again")
      self.assertEqual(len(out), len(want))
      for o, w in zip(out, want): np.testing.assert_allclose(o, w, rtol=rtol, atol=atol)

  def scheduled_first(self, f, want, *args) -> None:
    """f's first run scheduled (not the graph's), against want"""
    out, ran = self.graph_runs(f, *args)
    self.assertEqual(ran, 0)
    for o, w in zip(out, want if isinstance(want, tuple) else (want,)): np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-6)

def step(s, u):   # bench W4's bicycle step: cos (sin of pi/2 - x), tan, a stack of four
  return Tensor.stack(s[0] + 0.1 * s[3] * s[2].cos(), s[1] + 0.1 * s[3] * s[2].sin(), s[2] + 0.1 * s[3] * u[1].tan() / 2.5, s[3] + 0.1 * u[0])
def step_jacobian(s:np.ndarray, u:np.ndarray) -> np.ndarray:
  """the analytic (n, 4, 6) Jacobian of step with respect to (s, u)"""
  s, u, n = f64(s), f64(u), len(s)
  J = np.zeros((n, 4, 6))
  J[:, [0, 1, 2, 3], [0, 1, 2, 3]] = 1
  J[:, 0, 2], J[:, 0, 3] = -0.1 * s[:, 3] * np.sin(s[:, 2]), 0.1 * np.cos(s[:, 2])
  J[:, 1, 2], J[:, 1, 3] = 0.1 * s[:, 3] * np.cos(s[:, 2]), 0.1 * np.sin(s[:, 2])
  J[:, 2, 3], J[:, 2, 5] = 0.1 * np.tan(u[:, 1]) / 2.5, 0.1 * s[:, 3] / np.cos(u[:, 1]) ** 2 / 2.5
  J[:, 3, 4] = 0.1
  return J

class TestWorkloads(GraphCase):
  """bench's workloads, small"""
  def test_row_reduce(self):   # W1: REDUCEs over a permuted view
    x = f32(301, 64)
    self.check(lambda X: vmap(lambda r: (r * r).sum() * 2 + r.max())(X), (f64(x) ** 2).sum(1) * 2 + x.max(1), x)

  def test_mlp(self):   # W2: each REDUCE ADD of a product an einsum, the product never made
    x, w1, b1, w2, b2 = f32(71, 64), f32(64, 48) / 8, f32(48), f32(48, 8) / 8, f32(8)
    want = np.maximum(f64(x) @ f64(w1) + b1, 0) @ f64(w2) + b2
    self.check(lambda X, W1, B1, W2, B2: vmap(lambda r: (r @ W1 + B1).relu() @ W2 + B2)(X), want, x, w1, b1, w2, b2, rtol=1e-4, atol=1e-4)

  def test_stack_index(self):   # W3: a stack, a flatten, a strided slice
    x, c = f32(91, 3), f32(3)
    want = np.stack([f64(x) * c[0], f64(x) * c[1], f64(x) * c[2]], axis=1).reshape(91, 9)[:, 1::3]
    self.check(lambda X, C: vmap(lambda r: Tensor.stack(r * C[0], r * C[1], r * C[2]).flatten()[1::3])(X), want, x, c)

  def test_jacobian(self):   # W4's vmap(jacfwd): pads, a cat, cos as cos of x
    s, u = f32(200, 4), f32(200, 2, lo=-1.0, hi=1.0)
    jac = vmap(jacfwd(step, argnums=(0, 1)))
    self.check(lambda S, U: (lambda A, B: A.cat(B, dim=2))(*jac(S, U)), step_jacobian(s, u), s, u, rtol=1e-5, atol=1e-5)

  def test_pairwise_distances(self):   # W5: a nested vmap, x**2
    a, b = f32(41, 16), f32(31, 16)
    want = np.sqrt(((f64(a)[:, None] - f64(b)[None]) ** 2).sum(-1))
    self.check(lambda A, B: vmap(lambda p: vmap(lambda q: ((p - q) ** 2).sum().sqrt())(B))(A), want, a, b)

  def test_per_example_gradients(self):   # W6: three stores in one function
    w1, b1, w2, x, y = f32(6, 10) / 3, f32(10), f32(10, 1) / 3, f32(51, 6), f32(51, 1)
    def grads(W1, B1, W2, X, Y):
      return vmap(lambda xi, yi: tuple(((xi @ W1 + B1).relu() @ W2 - yi).square().sum().gradient(W1, B1, W2)))(X, Y)
    h = f64(x) @ f64(w1) + b1
    g = 2 * (np.maximum(h, 0) @ f64(w2) - y)                    # (n, 1)
    dh = (g @ f64(w2).T) * (h > 0)                              # (n, 10)
    want = (x[:, :, None] * dh[:, None, :], dh, np.maximum(h, 0)[:, :, None] * g[:, None, :])
    self.check(grads, want, w1, b1, w2, x, y, rtol=1e-4, atol=1e-4)

class TestOps(GraphCase):
  def test_movement(self):   # pad, flip, shrink, permute, expand
    x = f32(5, 7)
    want = np.pad(x[:, ::-1], ((1, 2), (0, 3)))[1:6].T[None].repeat(3, 0) * 2
    self.check(lambda X: X.flip(1).pad(((1, 2), (0, 3)))[1:6].T.reshape(1, 10, 5).expand(3, 10, 5) * 2, want, x)

  def test_weak_constants(self):   # Python numbers in float64 until they meet the float32 value
    x = f32(33)
    self.check(lambda X: (X * 2.5 + 1 / 3) * X.exp2(), (f64(x) * 2.5 + 1 / 3) * np.exp2(f64(x)), x, rtol=1e-6)

  def test_transcendentals_and_pow(self):
    x = f32(64, lo=0.1, hi=4.0)
    self.check(lambda X: X.sin() + X.cos() * X.log2() + X.sqrt() + X.pow(1.7),
               np.sin(f64(x)) + np.cos(f64(x)) * np.log2(f64(x)) + np.sqrt(f64(x)) + f64(x) ** 1.7, x, rtol=1e-5, atol=1e-5)

  def test_int_division_and_modulo(self):   # // and % floor, on negative operands too
    a, b = RNG.integers(-50, 50, 40).astype(np.int32), RNG.integers(1, 9, 40).astype(np.int32) * RNG.choice([-1, 1], 40).astype(np.int32)
    self.check(lambda A, B: ((A // B) * 3 + A % B).cast(dtypes.float32), ((a // b) * 3 + a % b).astype(np.float64), a, b)

  def test_comparisons_to_bool(self):
    x, y = f32(21), f32(21)
    out, ran = self.graph_runs(lambda X, Y: (X < Y) | (X * 2 > Y + 1), x, y)
    self.assertEqual(ran, 1)
    np.testing.assert_equal(out[0], (x < y) | (f64(x) * 2 > f64(y) + 1))

  def test_float64(self):
    x = RNG.uniform(-3, 3, 50)
    self.check(lambda X: (X * X).sum() / X.exp().max(), (x * x).sum() / np.exp(x).max(), x, rtol=1e-12)

  def test_symbolic_folds_as_the_codegen(self):   # a region of ALUs rewritten by symbolic, as a kernel is: x/x is 1, even at 0
    x = np.array([0.0, 1.5, -2.0, 0.0], dtype=np.float32)
    self.check(lambda X: X / X + X, 1 + f64(x), x)

  def test_cos_gradient_of_large_arguments(self):   # sin(pi/2 - (pi/2 - x)) is sin(x) itself, not of a rounded argument
    x = np.array([1e5, -3e4 + 0.5, 12345.678, 0.25], dtype=np.float32)
    def grad(X): return X.cos().sum().gradient(X)[0]
    self.check(grad, -np.sin(f64(x)), x, rtol=1e-5, atol=1e-5)

class TestScanKernel(GraphCase):
  """a scan's kernel in the function (scan_kernel.py's CALL): run by engine/first_loop.py on the function's arrays, the graph around it"""
  def test_scan_between_ops(self):   # its inputs made in the function, its carry and ys read after it
    from tinygrad.scan_kernel import scan_kernel
    s0, us = f32(5, 3, lo=-1, hi=1), f32(5, 8, 3, lo=-1, hi=1)
    def f(S, U):
      (c,), (y,) = scan_kernel(lambda c, x: ([c[0] * 0.75 + x[0].sin()], [c[0].cos() * x[0]]), [S * 2], [U + 0.5], 8, reverse=True, batch=5)
      return c.sum(1) + 1, y * 3
    c, ys = f64(s0) * 2, {}
    for t in reversed(range(8)):
      x = f64(us[:, t]) + 0.5
      ys[t] = np.cos(c) * x
      c = c * 0.75 + np.sin(x)
    self.check(f, (c.sum(1) + 1, np.stack([ys[t] for t in range(8)], 1) * 3), s0, us)

  def test_trajopt_iteration(self):   # examples/trajopt.py: the backward and forward passes' scans in one function, against numpy's iLQR
    from test_trajopt import trajopt, ilqr_numpy
    starts, T = trajopt.start_poses(2, seed=4), 12
    solver = trajopt.Solver(starts, T, dtypes.float64)
    for k in range(2):
      n = self.runs
      cost = solver.iterate().numpy()
      if k == 0: self.assertGreater(self.runs - n, 0, "the iteration's function was not numpy's over the graph")
      for b in range(2):
        X, U, costs = ilqr_numpy(starts[b], T, k + 1)
        np.testing.assert_allclose(cost[b], costs[-1], rtol=1e-9)
        np.testing.assert_allclose(solver.X.numpy()[b], X, atol=1e-9)
        np.testing.assert_allclose(solver.U.numpy()[b], U, atol=1e-9)

class TestStores(GraphCase):
  def test_assign_into_a_slice(self):   # a store into a view of a buffer keeps its other elements
    base, x = f32(6, 4), f32(6)
    out, X = Tensor(base).realize(), Tensor(x).realize()
    out[:, 2].assign(X.exp() * 2).realize()
    want = f64(base)
    want[:, 2] = np.exp(f64(x)) * 2
    self.assertEqual(self.runs, 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)

  def test_input_copied_from_numpy(self):   # a Tensor of a numpy array, realized with the function: its COPY runs before the graph
    x = f32(50, 8)
    before, n = GlobalCounters.kernel_count, self.runs
    out = vmap(lambda r: (r.exp() * r).sum())(Tensor(x)).numpy()
    self.assertEqual((self.runs - n, GlobalCounters.kernel_count - before), (1, 2))
    np.testing.assert_allclose(out, (np.exp(f64(x)) * x).sum(1), rtol=1e-5)

  def test_read_where_written_is_scheduled(self):   # x += 1 reads the buffer it writes: the schedule orders that
    xn = f32(9)
    x = Tensor(xn).realize()
    x.assign(x * 2 + 1).realize()
    self.assertEqual(self.runs, 0)
    np.testing.assert_allclose(x.numpy(), f64(xn) * 2 + 1, rtol=1e-6)

  def test_error_keeps_data(self):   # a graph that raises while it runs leaves its inputs as they were
    xn = f32(17, 3)
    x = Tensor(xn).realize()
    y = (x * 1.25).exp()
    with unittest.mock.patch.object(first_graph, "_GraphRun", side_effect=RuntimeError("boom")), self.assertRaises(RuntimeError): y.realize()
    np.testing.assert_equal(x.numpy(), xn)

class TestScheduled(GraphCase):
  """functions numpy can't run as the kernels would, or that don't run at once, are scheduled"""
  def test_symbolic_shrink(self):
    x = f32(20)
    v = Variable("n", 1, 20).bind(13)
    self.scheduled_first(lambda X: X[:v].exp().sum(), np.exp(f64(x[:13])).sum(), x)

  def test_too_large_a_value(self):
    x = f32(64, 64)
    with unittest.mock.patch.object(first_graph, "MAX_VALUE", 1000): self.scheduled_first(lambda X: X.exp().sum(1), np.exp(f64(x)).sum(1), x)

  def test_tinyjit_captures_kernels(self):   # the first call is the graph's, the capture schedules and compiles: no graph is kept
    x = f32(40, 8)
    f = TinyJit(lambda X: vmap(lambda r: (r.exp() * r).sum())(X))
    for k in range(4):
      out, ran = self.graph_runs(f, x)
      self.assertEqual(ran, 1 if k == 0 else 0)
      np.testing.assert_allclose(out[0], (np.exp(f64(x)) * x).sum(1), rtol=1e-5)
    self.assertFalse(any(first_graph.is_graph_program(c.src[0]) for c in f.captured.linear.src if c.op is first_graph.Ops.CALL))

  @unittest.skipUnless(applied('jit-first-call-numpy'), "TinyJit's hook")
  def test_tinyjit_first_call_keeps_the_graph(self):
    # a function realized again in a TinyJit's first call (an iteration run twice) is the graph's again while that costs less than its
    # schedule: the capture schedules it next
    x = f32(30, 6)
    for per_node, graph_runs, k in ((first_graph.SCHEDULE_S_PER_NODE, 2, 0.5), (0.0, 1, 0.25)):   # (another function each)
      def twice(X):
        for _ in range(2): X = vmap(lambda r: (r * k + r.sin()).exp() * 0.25)(X).realize()
        return X
      want = f64(x)
      for _ in range(2): want = np.exp(want * k + np.sin(want)) * 0.25
      with self.subTest(per_node=per_node), unittest.mock.patch.object(first_graph, "SCHEDULE_S_PER_NODE", per_node):
        jf = TinyJit(twice)
        for i in range(3):
          out, ran = self.graph_runs(jf, x)
          self.assertEqual(ran, graph_runs if i == 0 else 0)
          np.testing.assert_allclose(out[0], want, rtol=1e-5)

  def test_schedule_linear_is_scheduled(self):   # a linear looked at, not run: the kernels, never the graph
    t = Tensor(f32(8)).realize().exp() + 1
    linear = t.schedule_linear()
    self.assertFalse(any(first_graph.is_graph_program(c.src[0]) for c in linear.src))

  def test_off(self):
    x = f32(12)
    with Context(FIRST_GRAPH=0): self.scheduled_first(lambda X: X.exp() * 3, np.exp(f64(x)) * 3, x)

  def test_counts_one_kernel(self):   # GlobalCounters: a graph is one kernel with the function's estimates
    x = Tensor(f32(100)).realize()
    before = GlobalCounters.kernel_count
    self.graph_runs(lambda X: (X * 2).exp(), x)
    self.assertEqual(GlobalCounters.kernel_count - before, 1)

if __name__ == "__main__":
  unittest.main()
