"""`scan(f, init, xs, length, reverse)`: jax.lax.scan's semantics, against a Python loop over numpy (float64 where the recursion is long),
and its composition with vmap, jvp, jacfwd, jacrev, gradients, TinyJit, chunks and sharded batches."""
import unittest
import numpy as np
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("scan is the 0.14.0 line's (tinygrad/scan.py); the frozen 0.12.0 line has none")
from tinygrad import Tensor, TinyJit, Device, GlobalCounters, scan, vmap, jvp, jacfwd, jacrev
from vmap_oracle import VmapTestCase, rand, num_jac, cpu_devices_missing

DT, L = 0.1, 2.5

def bicycle(s, u):
  """a kinematic bicycle, one step: state (x, y, theta, v), control (accel, steer); y is the new state too"""
  x, y, th, v = s[0], s[1], s[2], s[3]
  ns = Tensor.stack(x + DT*v*th.cos(), y + DT*v*th.sin(), th + DT*v/L*u[1].tan(), v + DT*u[0])
  return ns, ns

def np_bicycle(s, u):
  x, y, th, v = s
  return np.array([x + DT*v*np.cos(th), y + DT*v*np.sin(th), th + DT*v/L*np.tan(u[1]), v + DT*u[0]])

def np_scan(f, init, xs, reverse=False):
  """the oracle: a Python loop, ys stacked in xs's order"""
  carry, ys = init, [None]*len(xs)
  for t in (reversed(range(len(xs))) if reverse else range(len(xs))): carry, ys[t] = f(carry, xs[t])
  return carry, np.stack(ys)

def np_rollout(s0, us): return np_scan(lambda s, u: (np_bicycle(s, u),)*2, s0, us)[1]

def controls(*shape): return 0.3 * rand(*shape)

def realized(*arrays): return [Tensor(a).realize() for a in arrays]

def kernels_to_realize(fn, *args):
  """the kernels that realizing fn(*args) runs (args realized first), and its results as numpy"""
  before = GlobalCounters.kernel_count
  outs = fn(*args)
  Tensor.realize(*outs)
  return GlobalCounters.kernel_count - before, [o.numpy() for o in outs]

class TestScan(VmapTestCase):
  def test_cumulative_sum(self):
    xs = rand(7, 3)
    carry, ys = scan(lambda c, x: (c + x, c + x), Tensor.zeros(3, dtype="float64"), Tensor(xs))
    self.assert_close(carry.numpy(), xs.sum(0))
    self.assert_close(ys.numpy(), np.cumsum(xs, 0))

  def test_bicycle_long_rollout_float64(self):
    s0, us = np.array([0., 0., 0.3, 2.]), controls(200, 2)
    carry, ys = scan(bicycle, Tensor(s0), Tensor(us))
    want = np_rollout(s0, us)
    self.assertEqual(ys.dtype, Tensor(s0).dtype)
    self.assert_close(ys.numpy(), want)
    self.assert_close(carry.numpy(), want[-1])

  def test_pytrees(self):
    a, b, p0, q0 = rand(5, 2), rand(5), rand(2), rand(3)
    def f(c, x):
      xa, xb = x
      return {"p": c["p"] * xb + xa, "q": c["q"] + xb}, (c["p"].sum() * xb, None, {"q": c["q"]})
    carry, (ys0, none, ys2) = scan(f, {"p": Tensor(p0), "q": Tensor(q0)}, (Tensor(a), Tensor(b)))
    want_c, y0, y2 = {"p": p0, "q": q0}, [], []
    for t in range(5):
      y0.append(want_c["p"].sum() * b[t]), y2.append(want_c["q"])
      want_c = {"p": want_c["p"] * b[t] + a[t], "q": want_c["q"] + b[t]}
    self.assertIsNone(none)
    self.assertEqual(list(carry), ["p", "q"])
    self.assert_close(carry["p"].numpy(), want_c["p"])
    self.assert_close(carry["q"].numpy(), want_c["q"])
    self.assert_close(ys0.numpy(), np.stack(y0))
    self.assert_close(ys2["q"].numpy(), np.stack(y2))

  def test_reverse(self):
    xs, c0 = rand(6, 2), rand(2)
    f, nf = lambda c, x: (c * 0.5 + x, (c * x).sum()), lambda c, x: (c * 0.5 + x, (c * x).sum())
    carry, ys = scan(f, Tensor(c0), Tensor(xs), reverse=True)
    want_c, want = np_scan(nf, c0, xs, reverse=True)
    self.assert_close(carry.numpy(), want_c)
    self.assert_close(ys.numpy(), want)   # ys[i] is xs[i]'s
    self.assertFalse(np.allclose(want, np_scan(nf, c0, xs)[1]))

  def test_length_only(self):
    for n in (1, 4):
      c0 = rand(3)
      carry, ys = scan(lambda c, x: (c * 0.9 + 1, c.sum()), Tensor(c0), length=n)
      want_c, want = np_scan(lambda c, _: (c * 0.9 + 1, c.sum()), c0, [None]*n)
      self.assert_close(carry.numpy(), want_c)
      self.assert_close(ys.numpy(), want)

  def test_y_none(self):
    xs = rand(4, 2)
    carry, ys = scan(lambda c, x: (c + x, None), Tensor(np.zeros(2)), Tensor(xs))
    self.assertIsNone(ys)
    self.assert_close(carry.numpy(), xs.sum(0))

  def test_length_zero(self):
    c0 = rand(3)
    carry, ys = scan(lambda c, x: (c + x.sum(), (c * 2, x)), Tensor(c0), Tensor(np.zeros((0, 5))))
    self.assert_close(carry.numpy(), c0)
    self.assertEqual((ys[0].shape, ys[1].shape), ((0, 3), (0, 5)))
    self.assertEqual(ys[0].numpy().shape, (0, 3))

  def test_numpy_and_python_numbers(self):
    xs = rand(5)
    carry, ys = scan(lambda c, x: (c + x, c * x), 0., xs)   # a weakly typed init takes xs's dtype, as in JAX
    want_c, want = np_scan(lambda c, x: (c + x, c * x), 0., xs)
    self.assertEqual(carry.dtype, Tensor(xs).dtype)
    self.assert_close(carry.numpy(), np.array(want_c))
    self.assert_close(ys.numpy(), want)

  def test_unroll_is_accepted(self):
    # JAX's performance hint: the same results whatever it is
    xs = rand(6, 2)
    for unroll in (1, 3, True):
      _, ys = scan(lambda c, x: (c * 0.5 + x, c), Tensor.zeros(2, dtype="float64"), Tensor(xs), unroll=unroll)
      self.assert_close(ys.numpy(), np_scan(lambda c, x: (c * 0.5 + x, c), np.zeros(2), xs)[1])

  def test_nested_scans(self):
    xs = rand(4, 3)
    def outer(c, row): return scan(lambda ci, x: (ci * 0.5 + x, None), c, row)[0], c
    carry, ys = scan(outer, Tensor(np.zeros(())), Tensor(xs))
    def np_outer(c, row): return np_scan(lambda ci, x: (ci * 0.5 + x, 0.), c, row)[0], c
    want_c, want = np_scan(np_outer, 0., xs)
    self.assert_close(carry.numpy(), np.array(want_c))
    self.assert_close(ys.numpy(), want)

class TestScanErrors(VmapTestCase):
  def setUp(self):
    self.c0, self.a, self.b = rand(2), rand(3, 2), rand(4)
    self.C0, self.A, self.B = Tensor(self.c0), Tensor(self.a), Tensor(self.b)

  def tearDown(self):   # the caller's Tensors still read their data
    self.assert_close(self.C0.numpy(), self.c0)
    self.assert_close(self.A.numpy(), self.a)
    self.assert_close(self.B.numpy(), self.b)

  def test_leading_axes_disagree(self):
    with self.assertRaisesRegex(ValueError, r"different leading axis sizes: xs\[0\] has 3, xs\[1\] has 4"):
      scan(lambda c, x: (c, None), self.C0, (self.A, self.B))

  def test_length_disagrees(self):
    with self.assertRaisesRegex(ValueError, "`length` argument of 5 which disagrees with leading axis sizes 3"):
      scan(lambda c, x: (c + x, None), self.C0, self.A, length=5)

  def test_neither_xs_nor_length(self):
    with self.assertRaisesRegex(ValueError, "no values to scan over and `length` not provided"): scan(lambda c, x: (c, None), self.C0)

  def test_no_leading_axis(self):
    with self.assertRaisesRegex(ValueError, r"no leading axis to scan over: xs\['s'\]"):
      scan(lambda c, x: (c, None), self.C0, {"s": self.B.sum()})

  def test_carry_changes_shape(self):
    with self.assertRaisesRegex(TypeError, r"input carry component carry\[1\]\['w'\] has shape \(2,\).* output carry component has shape \(1, 2\)"):
      scan(lambda c, x: ((c[0], {"w": (c[1]["w"] + x).reshape(1, 2)}), None), (self.B.sum(), {"w": self.C0}), self.A)

  def test_carry_changes_dtype(self):
    with self.assertRaisesRegex(TypeError, r"carry component carry has shape \(2,\) dtype dtypes.double but .* dtype dtypes.int"):
      scan(lambda c, x: ((c + x).cast("int32"), None), self.C0, self.A)

  def test_carry_changes_structure(self):
    with self.assertRaisesRegex(TypeError, "must have the same pytree structure"): scan(lambda c, x: ((c, c), None), self.C0, self.A)

  def test_carry_tuple_comes_back_a_list(self):
    # as JAX's treedefs: a list isn't a tuple (the carry was taken as it was)
    with self.assertRaisesRegex(TypeError, "must have the same pytree structure"): scan(lambda c, x: ([c[0] + x], None), (self.C0,), self.A)

  def test_not_a_pair(self):
    with self.assertRaisesRegex(TypeError, "scan body output must be a pair"): scan(lambda c, x: c + x, self.C0, self.A)

  def test_bad_unroll(self):
    with self.assertRaisesRegex(ValueError, "unroll must be a positive int"): scan(lambda c, x: (c, x), self.C0, self.A, unroll=0)

  def test_not_a_tensor(self):
    with self.assertRaisesRegex(TypeError, r"init\[1\] is a str"): scan(lambda c, x: (c, None), (self.C0, "a"), self.A)

class TestScanComposes(VmapTestCase):
  def test_vmap_of_scan(self):
    s0, us = rand(5, 4), controls(5, 20, 2)   # a batch of initial states and control sequences
    carry, ys = vmap(lambda s, u: scan(bicycle, s, u))(Tensor(s0), Tensor(us))
    want = np.stack([np_rollout(s, u) for s, u in zip(s0, us)])
    self.assert_close(ys.numpy(), want)
    self.assert_close(carry.numpy(), want[:, -1])

  def test_vmap_of_scan_chunked(self):
    s0, us = rand(5, 4), controls(5, 8, 2)
    _, ys = vmap(lambda s, u: scan(bicycle, s, u), chunk_size=2)(Tensor(s0), Tensor(us))
    self.assert_close(ys.numpy(), np.stack([np_rollout(s, u) for s, u in zip(s0, us)]))

  def test_scan_of_vmapped_body(self):
    s0, us = rand(5, 4), controls(12, 5, 2)   # the batch inside the carry, the controls (T, B, 2)
    carry, ys = scan(vmap(bicycle), Tensor(s0), Tensor(us))
    want = np.stack([np_rollout(s0[b], us[:, b]) for b in range(5)], axis=1)
    self.assert_close(ys.numpy(), want)
    self.assert_close(carry.numpy(), want[-1])

  def test_jvp_of_rollout(self):
    s0, us, ds = rand(4), controls(15, 2), rand(4)
    _, tangent = jvp(lambda s: scan(bicycle, s, Tensor(us))[1], (Tensor(s0),), (Tensor(ds),))
    self.assert_close(tangent.numpy(), num_jac(np_rollout)(s0, us) @ ds, atol=1e-7, rtol=1e-6)

  def test_jacfwd_and_jacrev_of_rollout(self):
    s0, us = rand(4), controls(15, 2)
    want = num_jac(np_rollout)(s0, us)   # (15, 4, 4)
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        self.assert_close(jac(lambda s: scan(bicycle, s, Tensor(us))[1])(Tensor(s0)).numpy(), want, atol=1e-7, rtol=1e-6)

  def test_per_example_gradient_through_rollout(self):
    s0, us = rand(3, 4), controls(3, 10, 2)
    def loss(s, u): return (scan(bicycle, s, u)[1][:, :2] ** 2).sum()
    grads = vmap(lambda s, u: loss(s, u).gradient(u)[0])(Tensor(s0), Tensor(us))
    def np_loss(u, s): return (np_rollout(s, u)[:, :2] ** 2).sum()
    want = np.stack([num_jac(np_loss)(u, s) for s, u in zip(s0, us)])
    self.assert_close(grads.numpy(), want, atol=1e-7, rtol=1e-6)

  def test_tinyjit(self):
    @TinyJit
    def rollout(s, u): return scan(bicycle, s, u)[1].realize()
    for _ in range(3):   # capture on the second call, replay on the third: each with new data
      s0, us = rand(4), controls(6, 2)
      self.assert_close(rollout(Tensor(s0), Tensor(us)).numpy(), np_rollout(s0, us))

  def test_sharded_batch(self):
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    devs = ("CPU:0", "CPU:1")
    s0, us = rand(4, 4), controls(4, 6, 2)
    S0 = Tensor(s0).shard(devs, axis=0)
    _, ys = vmap(lambda s, u: scan(bicycle, s, u))(S0, Tensor(us).shard(devs, axis=0))
    self.assertEqual(ys.device, S0.device)   # sharded like the batch
    self.assert_close(ys.numpy(), np.stack([np_rollout(s, u) for s, u in zip(s0, us)]))

  def test_sharded_batch_zero_initial_state(self):
    # an RNN's zero initial state, made in the function: the per-example gradient over a sharded batch (it raised "uses a Tensor on CPU")
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    devs = ("CPU:0", "CPU:1")
    w, xs = 0.5 * rand(3, 3), rand(4, 5, 3)
    def loss(w, x): return scan(lambda h, xt: ((h @ w + xt).tanh(),)*2, Tensor.zeros(3, dtype=x.dtype), x)[1].sum()
    g = vmap(lambda w, x: loss(w, x).gradient(w)[0], in_axes=(None, 0))(Tensor(w).to(devs), Tensor(xs).shard(devs, axis=0))
    self.assertEqual(g.device, tuple(Device.canonicalize(d) for d in devs))
    def np_loss(w, x): return np_scan(lambda h, xt: (np.tanh(h @ w + xt),)*2, np.zeros(3), x)[1].sum()
    self.assert_close(g.numpy(), np.stack([num_jac(np_loss)(w, x) for x in xs]), atol=1e-7, rtol=1e-6)

  def test_bicycle_is_one_kernel_at_any_length(self):
    """the fused lowering (tinygrad/scan_kernel.py): the carry in registers across a LOOP range, one kernel whatever the length"""
    for T in (10, 50, 200):
      s0, us = rand(4), controls(T, 2)
      S0, US = Tensor(s0).realize(), Tensor(us).realize()
      before = GlobalCounters.kernel_count
      carry, ys = scan(bicycle, S0, US)
      Tensor.realize(carry, ys)
      self.assertEqual(GlobalCounters.kernel_count - before, 1, f"T={T}")
      self.assert_close(ys.numpy(), np_rollout(s0, us))
      self.assert_close(carry.numpy(), np_rollout(s0, us)[-1])

  def test_gradient_through_the_fused_kernel(self):
    # outside vmap the forward is one kernel; its gradient is the unrolled graph's, recomputed from the kernel's inputs
    s0, us = rand(4), controls(12, 2)
    S0, US = Tensor(s0), Tensor(us)
    gs, gu = (scan(bicycle, S0, US)[1][:, :2] ** 2).sum().gradient(S0, US)
    def np_loss(s, u): return (np_rollout(s, u)[:, :2] ** 2).sum()
    self.assert_close(gs.numpy(), num_jac(lambda s: np_loss(s, us))(s0), atol=1e-7, rtol=1e-6)
    self.assert_close(gu.numpy(), num_jac(lambda u: np_loss(s0, u))(us), atol=1e-7, rtol=1e-6)

def np_rollouts(s0, us): return np.stack([np_rollout(s, u) for s, u in zip(s0, us)])

class TestScanInVmap(VmapTestCase):
  """vmap(scan) as ONE kernel (tinygrad/scan.py _batched_fused): the batch parallel, the steps a loop inside, the results per example"""
  def rollouts(self, s0, us, **kw):
    S0, US = Tensor(s0).realize(), Tensor(us).realize()
    before = GlobalCounters.kernel_count
    carry, ys = vmap(lambda s, u: scan(bicycle, s, u), **kw)(S0, US)
    Tensor.realize(carry, ys)
    return GlobalCounters.kernel_count - before, carry.numpy(), ys.numpy()

  def test_one_kernel_at_any_length_and_batch(self):
    for B in (8, 64):
      for T in (10, 100):
        with self.subTest(B=B, T=T):
          s0, us = rand(B, 4), controls(B, T, 2)
          kernels, carry, ys = self.rollouts(s0, us)
          self.assertEqual(kernels, 1)
          self.assert_close(ys, np_rollouts(s0, us))
          self.assert_close(carry, np_rollouts(s0, us)[:, -1])

  def test_closed_over_init(self):
    # one initial state for every example, closed over (not inside the scope): each example reads it, no copy to the batch
    s0, us = rand(4), controls(6, 9, 2)
    S0, US = realized(s0, us)
    kernels, (ys,) = kernels_to_realize(lambda: (vmap(lambda u: scan(bicycle, S0, u)[1])(US),))
    self.assertEqual(kernels, 1)
    self.assert_close(ys, np_rollouts([s0]*6, us))

  def test_init_set_per_example_in_the_function(self):
    # the init a clone of an unmapped argument with an item set per example (setitem took an example): scan kept that Tensor for its
    # recompute and tangents as long as its results lived, and vmap refused it as one that outlives the function
    a, b = rand(3, 4), rand(4)
    def f(x, y):
      v = y.clone()
      v[2] = x.sum()
      return scan(lambda c, t: (c * 0.5 + t, c), v, x.unsqueeze(0).expand(2, 4))[1]
    def nf(x, y):
      c = y.copy()
      c[2] = x.sum()
      ys = []
      for _ in range(2): ys.append(c); c = c * 0.5 + x
      return np.stack(ys)
    self.assert_close(vmap(f, in_axes=(0, None))(Tensor(a), Tensor(b)).numpy(), np.stack([nf(x, b) for x in a]))

  def test_shared_controls(self):
    s0, us = rand(6, 4), controls(9, 2)   # every initial state under the same controls
    S0, US = realized(s0, us)
    kernels, (ys,) = kernels_to_realize(lambda: (vmap(lambda s: scan(bicycle, s, US)[1])(S0),))
    self.assertEqual(kernels, 1)
    self.assert_close(ys, np_rollouts(s0, [us]*6))

  def test_gradient_of_shared_controls(self):
    # the batch's gradient in the controls every example reads: the sum of the examples' gradients
    s0, us = rand(3, 4), controls(8, 2)
    S0, US = Tensor(s0), Tensor(us)
    gu, = (vmap(lambda s: scan(bicycle, s, US)[1])(S0)[..., :2] ** 2).sum().gradient(US)
    def np_loss(u): return sum((np_rollout(s, u)[:, :2] ** 2).sum() for s in s0)
    self.assert_close(gu.numpy(), num_jac(np_loss)(us), atol=1e-7, rtol=1e-6)

  def test_jvp_in_shared_controls(self):
    s0, us, dus = rand(3, 4), controls(8, 2), rand(8, 2)
    _, dys = jvp(lambda u: vmap(lambda s: scan(bicycle, s, u)[1])(Tensor(s0)), (Tensor(us),), (Tensor(dus),))
    want = np.stack([np.tensordot(num_jac(lambda u: np_rollout(s, u))(us), dus, axes=2) for s in s0])
    self.assert_close(dys.numpy(), want, atol=1e-7, rtol=1e-6)

  def test_reverse(self):
    s0, us = rand(5, 4), controls(5, 12, 2)
    S0, US = Tensor(s0).realize(), Tensor(us).realize()
    before = GlobalCounters.kernel_count
    carry, ys = vmap(lambda s, u: scan(bicycle, s, u, reverse=True))(S0, US)
    Tensor.realize(carry, ys)
    self.assertEqual(GlobalCounters.kernel_count - before, 1)
    want = [np_scan(lambda c, u: (np_bicycle(c, u),)*2, s, u, reverse=True) for s, u in zip(s0, us)]
    self.assert_close(ys.numpy(), np.stack([y for _, y in want]))
    self.assert_close(carry.numpy(), np.stack([c for c, _ in want]))

  def test_xs_mapped_on_axis_1(self):
    s0, us = rand(5, 4), controls(11, 5, 2)   # the controls (T, B, 2)
    _, ys = vmap(lambda s, u: scan(bicycle, s, u), in_axes=(0, 1))(Tensor(s0), Tensor(us))
    self.assert_close(ys.numpy(), np_rollouts(s0, us.transpose(1, 0, 2)))

  def test_value_computed_in_the_scope(self):
    # the init is made in the function from the example: its batch is the rules' batch of that graph
    s0, us = rand(5, 4), controls(5, 7, 2)
    _, ys = vmap(lambda s, u: scan(bicycle, s * 2 + 1, u))(Tensor(s0), Tensor(us))
    self.assert_close(ys.numpy(), np_rollouts(s0 * 2 + 1, us))

  def test_nested_vmap(self):
    # the batch of both scopes is the kernel's, flattened: kernels don't grow with the length
    counts = set()
    for T in (6, 30):
      with self.subTest(T=T):
        s0, us = rand(3, 4), controls(2, 3, T, 2)   # every initial state against each of 2 sets of 3 control sequences
        S0, US = realized(s0, us)
        kernels, (ys,) = kernels_to_realize(lambda: (vmap(lambda u: vmap(lambda s, v: scan(bicycle, s, v)[1])(S0, u))(US),))
        counts.add(kernels)
        self.assert_close(ys, np.stack([np_rollouts(s0, u) for u in us]))
    self.assertEqual(len(counts), 1, counts)

  def test_nested_vmap_leaves_of_one_scope_each(self):
    s0, us = rand(3, 4), controls(5, 7, 2)   # the initial states mapped by the outer vmap, the controls by the inner
    ys = vmap(lambda s: vmap(lambda u: scan(bicycle, s, u)[1])(Tensor(us)))(Tensor(s0))
    self.assert_close(ys.numpy(), np.stack([np_rollouts([s]*5, us) for s in s0]))

  def test_per_example_gradient_through_chained_scans(self):
    # the second scan's init is the first one's carry: the gradient in the scope recomputes both (the fuzzer's case)
    s0, us = rand(3, 4), controls(3, 5, 2)
    def loss(s, u): return (scan(bicycle, scan(bicycle, s, u)[0], u)[1][:, :2] ** 2).sum()
    g = vmap(lambda s, u: loss(s, u).gradient(s)[0])(Tensor(s0), Tensor(us))
    def np_loss(s, u): return (np_rollout(np_rollout(s, u)[-1], u)[:, :2] ** 2).sum()
    self.assert_close(g.numpy(), np.stack([num_jac(lambda s: np_loss(s, u))(s) for s, u in zip(s0, us)]), atol=1e-7, rtol=1e-6)

  def test_per_example_gradient_in_nested_vmap(self):
    s0, us = rand(3, 4), controls(2, 3, 6, 2)
    def loss(s, u): return (scan(bicycle, s, u)[1][:, :2] ** 2).sum()
    g = vmap(lambda u: vmap(lambda s, v: loss(s, v).gradient(s)[0])(Tensor(s0), u))(Tensor(us))
    def np_loss(s, u): return (np_rollout(s, u)[:, :2] ** 2).sum()
    want = np.stack([np.stack([num_jac(lambda s: np_loss(s, v))(s) for s, v in zip(s0, u)]) for u in us])
    self.assert_close(g.numpy(), want, atol=1e-7, rtol=1e-6)

  def test_chunked(self):
    s0, us = rand(7, 4), controls(7, 10, 2)   # 3 chunks, the last shorter
    _, carry, ys = self.rollouts(s0, us, chunk_size=3)
    self.assert_close(ys, np_rollouts(s0, us))
    self.assert_close(carry, np_rollouts(s0, us)[:, -1])

  def test_gradient_of_the_batch(self):
    # a gradient outside the vmap, through the batched kernel: the vmap of the unrolled graph, recomputed from the kernel's inputs
    s0, us = rand(3, 4), controls(3, 8, 2)
    S0, US = Tensor(s0), Tensor(us)
    gs, = (vmap(lambda s, u: scan(bicycle, s, u))(S0, US)[1][..., :2] ** 2).sum().gradient(S0)
    def np_loss(s, u): return (np_rollout(s, u)[:, :2] ** 2).sum()
    self.assert_close(gs.numpy(), np.stack([num_jac(lambda s: np_loss(s, u))(s) for s, u in zip(s0, us)]), atol=1e-7, rtol=1e-6)

def np_jvp_rollout(s0, us, ds, dus):
  """the oracle's tangent of the rollout along (ds, dus): float64 central differences of both arguments"""
  return num_jac(np_rollout)(s0, us) @ ds + np.tensordot(num_jac(lambda u, s: np_rollout(s, u))(us, s0), dus, axes=2)

class TestScanTangents(VmapTestCase):
  """forward mode through the fused kernel: the tangent carry in a loop of its own beside the carry, so kernels don't grow with length"""
  def test_jvp_kernels_independent_of_length(self):
    counts = set()
    for T in (10, 60):
      with self.subTest(T=T):
        s0, us, ds, dus = rand(4), controls(T, 2), rand(4), rand(T, 2)
        def f(S, U, dS, dU): return jvp(lambda s, u: scan(bicycle, s, u)[1], (S, U), (dS, dU))
        kernels, (ys, dys) = kernels_to_realize(f, *realized(s0, us, ds, dus))
        counts.add(kernels)
        self.assert_close(ys, np_rollout(s0, us))
        self.assert_close(dys, np_jvp_rollout(s0, us, ds, dus), atol=1e-7, rtol=1e-6)
    self.assertEqual(len(counts), 1, counts)

  def test_jacfwd_kernels_independent_of_length(self):
    counts = set()
    for T in (10, 60):
      with self.subTest(T=T):
        s0, us = rand(4), controls(T, 2)
        kernels, (jac,) = kernels_to_realize(lambda S, U: (jacfwd(lambda s: scan(bicycle, s, U)[1])(S),), *realized(s0, us))
        counts.add(kernels)
        self.assert_close(jac, num_jac(np_rollout)(s0, us), atol=1e-7, rtol=1e-6)
    self.assertEqual(len(counts), 1, counts)

  def test_jvp_per_example_in_vmap(self):
    # the primal and the tangent both per example: the batched kernel's tangent is the batched scan of the step's jvp
    counts = set()
    for T in (8, 40):
      with self.subTest(T=T):
        s0, us, ds = rand(5, 4), controls(5, T, 2), rand(5, 4)
        def f(S, U, dS): return (vmap(lambda s, u, d: jvp(lambda s: scan(bicycle, s, u)[1], (s,), (d,))[1])(S, U, dS),)
        kernels, (dys,) = kernels_to_realize(f, *realized(s0, us, ds))
        counts.add(kernels)
        self.assert_close(dys, np.stack([num_jac(np_rollout)(s, u) @ d for s, u, d in zip(s0, us, ds)]), atol=1e-7, rtol=1e-6)
    self.assertEqual(len(counts), 1, counts)

  def test_jvp_of_vmapped_scan(self):
    s0, us, ds = rand(3, 4), controls(3, 9, 2), rand(3, 4)
    _, dys = jvp(lambda s: vmap(lambda s, u: scan(bicycle, s, u)[1])(s, Tensor(us)), (Tensor(s0),), (Tensor(ds),))
    self.assert_close(dys.numpy(), np.stack([num_jac(np_rollout)(s, u) @ d for s, u, d in zip(s0, us, ds)]), atol=1e-7, rtol=1e-6)

  def test_jvp_of_reverse_scan_with_ys(self):
    xs, c0, dxs, dc = rand(7, 3), rand(3), rand(7, 3), rand(3)
    def f(c, x): return c * x.sin() + (c * 0.5).cos(), (c * x).sum()
    def np_f(c, x): return c * np.sin(x) + np.cos(c * 0.5), (c * x).sum()
    def np_run(c, x): return np.concatenate([a.reshape(-1) for a in np_scan(np_f, c, x, reverse=True)])
    (_, _), (tc, tys) = jvp(lambda c, x: scan(f, c, x, reverse=True), (Tensor(c0), Tensor(xs)), (Tensor(dc), Tensor(dxs)))
    want = num_jac(np_run)(c0, xs) @ dc + np.tensordot(num_jac(lambda x, c: np_run(c, x))(xs, c0), dxs, axes=2)
    self.assert_close(np.concatenate([tc.numpy(), tys.numpy()]), want, atol=1e-7, rtol=1e-6)

  def test_vmap_of_scan_over_a_batch_of_constants(self):
    # a batch with no device (an eye: constants on 0.14) is read from a buffer, not taken as the first example's constant
    us = controls(6, 2)
    _, ys = vmap(lambda s: scan(bicycle, s, Tensor(us)))(Tensor.eye(4, dtype="float64"))
    self.assert_close(ys.numpy(), np.stack([np_rollout(e, us) for e in np.eye(4)]))

def np_rnn(h, xs, W, b):
  """the oracle of rnn_step over a sequence: the last state and each step's output"""
  return np_scan(lambda h, x: (np.tanh(W @ h + x + b),)*2, h, xs)

def rnn_step(W, b):
  """an RNN step that closes over its parameters W and b (Tensors), as users write it in JAX"""
  def step(h, x):
    h = (W @ h + x + b).tanh()
    return h, h
  return step

class TestScanClosures(VmapTestCase):
  """a body that closes over Tensors (parameters): they are inputs of the one kernel, and differentiable through it"""
  def setUp(self): self.W, self.b, self.h0, self.xs = rand(3, 3) * 0.5, rand(3), rand(3), rand(9, 3)
  def num_jac_W(self, fn):
    """float64 central differences of fn(W) (the last state or the outputs) in W"""
    return num_jac(lambda w: fn(np_rnn(self.h0, self.xs, w, self.b)))(self.W)

  def test_one_kernel(self):
    W, b, h0, xs = realized(self.W, self.b, self.h0, self.xs)
    kernels, (h, ys) = kernels_to_realize(lambda: scan(rnn_step(W, b), h0, xs))
    self.assertEqual(kernels, 1)
    want_h, want_ys = np_rnn(self.h0, self.xs, self.W, self.b)
    self.assert_close(h, want_h)
    self.assert_close(ys, want_ys)

  def test_gradient_of_a_closed_over_parameter(self):
    W, b = Tensor(self.W), Tensor(self.b)
    gW, = (scan(rnn_step(W, b), Tensor(self.h0), Tensor(self.xs))[1] ** 2).sum().gradient(W)
    self.assert_close(gW.numpy(), self.num_jac_W(lambda r: (r[1] ** 2).sum()), atol=1e-7, rtol=1e-6)

  def test_jacobians_in_a_closed_over_parameter(self):
    want = self.num_jac_W(lambda r: r[0])
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        got = jac(lambda w: scan(rnn_step(w, Tensor(self.b)), Tensor(self.h0), Tensor(self.xs))[0])(Tensor(self.W))
        self.assert_close(got.numpy(), want, atol=1e-7, rtol=1e-6)

  def test_vmap_with_shared_parameters(self):
    H0 = rand(4, 3)
    hs = vmap(lambda h: scan(rnn_step(Tensor(self.W), Tensor(self.b)), h, Tensor(self.xs))[0])(Tensor(H0))
    self.assert_close(hs.numpy(), np.stack([np_rnn(h, self.xs, self.W, self.b)[0] for h in H0]))

  def test_vmap_over_the_parameters(self):
    # a parameter of one example is closed over in the scope: not a kernel input for the batch (unrolled), still right
    Ws = rand(2, 3, 3) * 0.5
    hs = vmap(lambda w: scan(rnn_step(w, Tensor(self.b)), Tensor(self.h0), Tensor(self.xs))[0])(Tensor(Ws))
    self.assert_close(hs.numpy(), np.stack([np_rnn(self.h0, self.xs, w, self.b)[0] for w in Ws]))

  def test_jvp_in_a_closed_over_parameter_per_example(self):
    H0, dWs = rand(4, 3), rand(4, 3, 3)
    def per_example(h, d): return jvp(lambda w: scan(rnn_step(w, Tensor(self.b)), h, Tensor(self.xs))[0], (Tensor(self.W),), (d,))[1]
    got = vmap(per_example)(Tensor(H0), Tensor(dWs)).numpy()
    want = [np.tensordot(num_jac(lambda w: np_rnn(h, self.xs, w, self.b)[0])(self.W), d, axes=2) for h, d in zip(H0, dWs)]
    self.assert_close(got, np.stack(want), atol=1e-7, rtol=1e-6)

if __name__ == "__main__":
  unittest.main()
