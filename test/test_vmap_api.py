"""`vmap(fn, in_axes, out_axes, axis_size, chunk_size, randomness)`: JAX's semantics on the native VMAPIN/VMAPOUT scopes.
Every result is compared with a numpy loop over examples on random float64 data."""
import collections, unittest, unittest.mock
import numpy as np
from tinygrad import Tensor, TinyJit, GlobalCounters, vmap, dtypes, Device
from tinygrad.uop.ops import UOp, AxisType
from tinygrad.fork_line import LINE_012
from tinygrad.helpers import Context
from tinygrad.vmap import vmap_range, varg
from fork_topics import skip_unless
from vmap_oracle import VmapTestCase, ScheduledTestCase, rand, np_loop, kernels, np_softmax, set_items, realize_with_buffers, schedule_cache_size, jit_kernels, training, compiled_programs

def per_row(x): return (x*x).sum()*2 + x.max()   # reads the same on a Tensor and an ndarray

def np_vmap(fn, in_axes=0, out_axes=0):
  """the oracle of a vmap with int/None in_axes and an int out_axes: a numpy loop"""
  return lambda *xs: np_loop(fn, *xs, in_axes=tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,)*len(xs), out_axis=out_axes)

def np_nested(fn, axes):
  for a in reversed(axes): fn = np_vmap(fn, a)
  return fn

def nested(fn, axes, **kw):
  for a in reversed(axes): fn = vmap(fn, in_axes=a, **kw)
  return fn

class TestInAxes(VmapTestCase):
  def check_vmap(self, fn, *xs, in_axes=0, out_axes=0, nfn=None):
    got = vmap(fn, in_axes=in_axes, out_axes=out_axes)(*[Tensor(x) if isinstance(x, np.ndarray) else x for x in xs]).numpy()
    self.assert_close(got, np_vmap(nfn or fn, in_axes, out_axes)(*xs))

  def test_default_axis_0(self): self.check_vmap(per_row, rand(7, 5))
  def test_int_for_every_argument(self): self.check_vmap(lambda a, b: a*b - b, rand(3, 4), rand(3, 4), in_axes=1)
  def test_negative_axis(self): self.check_vmap(per_row, rand(5, 6), in_axes=-1)
  def test_negative_axis_of_3d(self): self.check_vmap(lambda x: x.sum(0), rand(2, 6, 3), in_axes=-2)
  def test_tuple_mixed_with_none(self):
    w = rand(4)
    self.check_vmap(lambda x, w: (x*w).sum(), rand(6, 4), w, in_axes=(0, None))
  def test_list_in_axes(self): self.check_vmap(lambda a, b: a@b, rand(5, 3), rand(3, 5), in_axes=[0, 1])
  def test_different_axes_same_size(self): self.check_vmap(lambda a, b, c: a*b.sum()+c, rand(5, 3), rand(2, 5), rand(3, 5), in_axes=(0, 1, 1))
  def test_python_number_passes_through(self):
    x = rand(4, 3)
    self.assert_close(vmap(lambda x, s: x*s)(Tensor(x), 2.5).numpy(), x*2.5)
  def test_numpy_scalar_argument(self):
    # a numpy scalar is a 0-d array, as in JAX: passed to every example with in_axes None (np.float32 isn't a float: Tensor * it failed)
    x = rand(4, 3)
    for c in (np.float32(2.5), np.float64(2.5), np.int64(2)):
      with self.subTest(dtype=type(c).__name__):
        self.assert_close(vmap(lambda x, s: x * s, in_axes=(0, None))(Tensor(x), c).numpy(), x * c)
    with self.assertRaisesRegex(ValueError, "map argument s along axis 0, which implies that its rank should be at least 1"):
      vmap(lambda x, s: x * s)(Tensor(x), np.float32(2.5))

  def test_numpy_array_is_mapped(self):
    # as jax.vmap maps a numpy array: it becomes a Tensor and in_axes applies to it
    x, y = rand(4, 3), rand(3, 4)
    self.assert_close(vmap(lambda x, y: x*y, in_axes=(0, 1))(Tensor(x), y).numpy(), x*y.T)
    self.assert_close(vmap(lambda x, d: x*d["w"], in_axes=(0, None))(Tensor(x), {"w": y[:, 0]}).numpy(), x*y[:, 0])
  def test_none_leaf_passes_through(self):
    x = rand(4, 3)
    self.assert_close(vmap(lambda x, n: x.sum() if n is None else x, in_axes=(0, None))(Tensor(x), None).numpy(), x.sum(1))

  def test_out_axes_int(self): self.check_vmap(lambda x: x*2, rand(4, 3, 2), out_axes=2)
  def test_out_axes_negative(self): self.check_vmap(lambda x: x.exp(), rand(4, 3, 2), out_axes=-1, nfn=np.exp)
  def test_out_axes_negative_middle(self): self.check_vmap(lambda x: x+1, rand(4, 3, 2), out_axes=-2)

  def test_kwargs_map_axis_0(self):
    x, y = rand(5, 3), rand(5, 3)
    self.assert_close(vmap(lambda x, y: x*y)(Tensor(x), y=Tensor(y)).numpy(), x*y)

  def test_axis_size_without_mapped_input(self):
    w = rand(3)
    self.assert_close(vmap(lambda w: w*2, in_axes=None, axis_size=4)(Tensor(w)).numpy(), np.stack([w*2]*4))

  def test_numpy_int_axis_size_and_chunk_size(self):
    # numpy's integers are ints, as JAX takes axis_size (it raised a ValueError)
    x = rand(5, 2)
    self.assert_close(vmap(lambda: Tensor.ones(2), in_axes=(), axis_size=np.int64(3))().numpy(), np.ones((3, 2)))
    self.assert_close(vmap(lambda x: x * 2, chunk_size=np.int32(2))(Tensor(x)).numpy(), x * 2)
  def test_decorator(self):
    @vmap
    def f(x): return x.sum()
    x = rand(4, 3)
    self.assert_close(f(Tensor(x)).numpy(), x.sum(1))

  def test_decorator_with_arguments(self):
    @vmap(in_axes=1)
    def f(x): return x.max()
    x = rand(4, 3)
    self.assert_close(f(Tensor(x)).numpy(), x.max(0))

  def test_empty_batch(self):
    y = vmap(lambda x: x.sum(-1))(Tensor(rand(0, 3, 2)))
    self.assertEqual(y.shape, (0, 3))
    self.assertEqual(y.numpy().shape, (0, 3))

  def test_batch_of_one(self): self.check_vmap(per_row, rand(1, 5))

  def test_very_large_batch_allocates_only_the_output(self):
    x = Tensor(np.arange(10**7, dtype=np.float32)).realize()   # data, not an arange (0.14 computes an arange where it is read)
    y = vmap(lambda e: (e*2+1).sqrt() + e)(x)
    self.assertEqual([b.nbytes for b in realize_with_buffers(y) if b is not x.uop.base.buffer], [y.nbytes()])
    np.testing.assert_allclose(y[[0, 12345, 10**7-1]].numpy(), [np.sqrt(2*v+1) + v for v in (0, 12345, 10**7-1)], rtol=1e-6)

class TestPytrees(VmapTestCase):
  def test_dict_subclasses_keep_their_type(self):
    # as in JAX: an OrderedDict or a defaultdict goes in and comes out as itself (a defaultdict keeps its default_factory)
    from collections import OrderedDict, defaultdict
    x = rand(4, 3)
    out = vmap(lambda x: OrderedDict(b=x.sum(), a=x * 2))(Tensor(x))
    self.assertIs(type(out), OrderedDict)
    self.assertEqual(list(out), ["b", "a"])
    self.assert_close(out["a"].numpy(), x * 2)
    seen = []
    got = vmap(lambda d: (seen.append(type(d)), d["x"].sum() if d["missing"] is None else d["x"])[1])(defaultdict(lambda: None, {"x": Tensor(x)}))
    self.assertEqual(seen, [defaultdict])
    self.assert_close(got.numpy(), x.sum(1))

  def test_dict_in_axes_per_key(self):
    a, b = rand(5, 3), rand(3, 5)
    got = vmap(lambda d: d["a"] * d["b"].sum(), in_axes=({"a": 0, "b": 1},))({"a": Tensor(a), "b": Tensor(b)}).numpy()
    self.assert_close(got, np.stack([a[i] * b[:, i].sum() for i in range(5)]))

  def test_int_stands_for_subtree(self):
    a, b = rand(4, 2), rand(4, 3)
    got = vmap(lambda t: t[0].sum() + t[1].max(), in_axes=(0,))((Tensor(a), Tensor(b))).numpy()
    self.assert_close(got, a.sum(1) + b.max(1))

  def test_nested_tuple_with_none(self):
    a, w, s = rand(4, 3), rand(3), 2.0
    got = vmap(lambda t: (t[0][0] * t[0][1]).sum() * t[1], in_axes=(((0, None), None),))(((Tensor(a), Tensor(w)), s)).numpy()
    self.assert_close(got, (a*w).sum(1) * s)

  def test_tuple_output(self):
    x = rand(5, 3)
    s, m = vmap(lambda x: (x.sum(), x*2))(Tensor(x))
    self.assert_close(s.numpy(), x.sum(1))
    self.assert_close(m.numpy(), x*2)

  def test_dict_output_with_out_axes_tree(self):
    x = rand(5, 3)
    out = vmap(lambda x: {"s": x.sum(), "p": [x*2, x+1]}, out_axes={"s": 0, "p": 1})(Tensor(x))
    self.assertEqual(set(out), {"s", "p"})
    self.assert_close(out["s"].numpy(), x.sum(1))
    self.assert_close(out["p"][0].numpy(), (x*2).T)
    self.assert_close(out["p"][1].numpy(), (x+1).T)

  def test_out_axes_none_for_unbatched_output(self):
    x, w = rand(5, 3), rand(3)
    ys, ws = vmap(lambda x, w: (x*w, w*2), in_axes=(0, None), out_axes=(0, None))(Tensor(x), Tensor(w))
    self.assert_close(ys.numpy(), x*w)
    self.assert_close(ws.numpy(), w*2)

  def test_none_in_output(self):
    # None is an empty subtree (JAX): it comes back None, also from a chunked vmap with a tail
    x = rand(5, 3)
    for chunk_size in (None, 2):
      y, aux = vmap(lambda x: (x*2, None), chunk_size=chunk_size)(Tensor(x))
      self.assertIsNone(aux)
      self.assert_close(y.numpy(), x*2)
      self.assertIsNone(vmap(lambda x: {"y": x.sum(), "aux": None}, chunk_size=chunk_size)(Tensor(x))["aux"])

  def test_python_number_output_is_broadcast(self):
    self.assert_close(vmap(lambda x: 1.5)(Tensor(rand(5, 3))).numpy(), np.full(5, 1.5))
  def test_constant_output_is_on_the_inputs_device(self):
    # a Tensor of constants alone has no device on 0.14 (and would realize on the CPU): vmap's constant outputs are on its inputs' device
    x = Tensor(rand(5, 3))
    for kw in ({}, {"out_axes": None}, {"chunk_size": 2}):
      with self.subTest(**kw): self.assertEqual(vmap(lambda x: 1.5, **kw)(x).device, x.device)
    self.assertEqual(vmap(lambda x: x.sum()*0 + Tensor.ones(2))(x).device, x.device)
  def test_numpy_output_is_broadcast(self):
    c = rand(2)
    self.assert_close(vmap(lambda x: c)(Tensor(rand(5, 3))).numpy(), np.broadcast_to(c, (5, 2)))
  def test_numpy_scalar_output_is_broadcast(self):
    # np.float64 is a float subclass, np.float32 and np.int64 aren't: each keeps its dtype, as a 0-d array would
    for c in (np.float64(2.5), np.float32(1.5), np.int64(3)):
      with self.subTest(dtype=type(c).__name__):
        got = vmap(lambda x: (x.sum(), c))(Tensor(rand(5, 3)))[1].numpy()
        self.assertEqual(got.dtype, c.dtype)
        np.testing.assert_array_equal(got, np.full(5, c))

  def test_unbatched_output_with_int_out_axes_is_broadcast(self):
    x, w = rand(5, 3), rand(3)
    self.assert_close(vmap(lambda x, w: w*2, in_axes=(0, None))(Tensor(x), Tensor(w)).numpy(), np.stack([w*2]*5))

class TestNesting(VmapTestCase):
  def check_nest(self, fn, axes, shape=(4,), nfn=None, **kw):
    full = list(shape)
    sizes = (2, 3, 2, 3, 2, 2)
    for a, b in zip(reversed(axes), reversed(sizes[:len(axes)])): full.insert(a, b)
    x = rand(*full)
    self.assert_close(nested(fn, axes, **kw)(Tensor(x)).numpy(), np_nested(nfn or fn, axes)(x))

  def test_depth_2(self): self.check_nest(per_row, (0, 0))
  def test_depth_2_mixed_axes(self): self.check_nest(per_row, (1, 0))
  def test_depth_3_mixed_axes(self): self.check_nest(per_row, (2, 0, 1))
  def test_depth_4(self): self.check_nest(per_row, (0, 1, 0, 1))
  def test_depth_5(self): self.check_nest(per_row, (1, 0, 2, 0, 1))
  def test_depth_6(self): self.check_nest(lambda x: x.sum(), (0, 0, 1, 0, 1, 0))
  def test_depth_3_softmax(self): self.check_nest(lambda x: x.softmax(), (1, 0, 0), nfn=np_softmax)

  def test_reductions_between_levels(self):
    # each level reduces what the inner level returns: sum of inner maxes of per-row sums
    x = rand(3, 4, 5, 6)
    f = vmap(lambda a: vmap(lambda b: vmap(lambda c: c.sum())(b).max())(a).sum() * a.mean())
    want = np.stack([np.stack([np.stack([c.sum() for c in b]).max() for b in a]).sum() * a.mean() for a in x])
    self.assert_close(f(Tensor(x)).numpy(), want)

  def test_inner_uses_outer_example(self):
    # pairwise distances: the inner vmap closes over the outer example
    a, b = rand(5, 3), rand(4, 3)
    got = vmap(lambda p, bs: vmap(lambda q: ((p-q)**2).sum().sqrt())(bs), in_axes=(0, None))(Tensor(a), Tensor(b)).numpy()
    self.assert_close(got, np.sqrt(((a[:, None]-b[None])**2).sum(-1)))

  def test_outer_vmap_around_hand_built_scope(self):
    # a hand-built inner scope with RANGE id -1 (g * stack(x*g), as in test_vmap_autodiff.py's TestInnerScopeJacobian)
    # inside a vmap: vmap's RANGEs never alias it
    z = rand(4, 3)
    def f(z):
      r = UOp.range(1, -1, AxisType.LOOP)
      xv = z[:2].reshape(2, 1).vmapin(varg(2, {1: r}))
      g = z[2:]
      y = xv * g
      return (g * Tensor.stack(y[0], y[1])).vmapout(varg(2, {1: r})).flatten()
    self.assert_close(vmap(f)(Tensor(z)).numpy(), np.stack([e[2] * e[:2] * e[2] for e in z]))

  def test_inside_hand_built_scope(self):
    x = rand(3, 4, 5)
    r = vmap_range(3)
    got = vmap(per_row)(Tensor(x).vmapin(varg(3, {0: r}))).vmapout(varg(2, {0: r})).numpy()
    self.assert_close(got, np_nested(per_row, (0, 0))(x))

class TestReuse(VmapTestCase):
  def test_twice(self):
    f, x1, x2 = vmap(per_row), rand(6, 4), rand(6, 4)
    self.assert_close(f(Tensor(x1)).numpy(), np_vmap(per_row)(x1))
    self.assert_close(f(Tensor(x2)).numpy(), np_vmap(per_row)(x2))

  def test_other_batch_sizes(self):
    f = vmap(per_row)
    for n in (1, 5, 17):
      x = rand(n, 4)
      self.assert_close(f(Tensor(x)).numpy(), np_vmap(per_row)(x))

  def test_two_calls_in_one_graph(self):
    x = rand(6, 4)
    f = vmap(lambda e: e*2)
    self.assert_close((f(Tensor(x)) + f(Tensor(x)[::-1])).numpy(), x*2 + x[::-1]*2)

  def test_composed_calls(self):
    x = rand(6, 4)
    self.assert_close(vmap(per_row)(vmap(lambda e: e.exp())(Tensor(x))).numpy(), np_vmap(per_row)(np.exp(x)))

  def test_tinyjit_capture_and_replay(self):
    w = rand(4, 3)
    jf = TinyJit(vmap(lambda a, w: (a@w).relu().sum(), in_axes=(0, None)))
    W = Tensor(w).realize()
    for _ in range(4):
      a = rand(7, 4)
      self.assert_close(jf(Tensor(a).realize(), W).numpy(), np.maximum(a@w, 0).sum(1))
    self.assertEqual(jit_kernels(jf), 1)

  def test_tinyjit_replay_counts_its_kernels(self):
    # JIT=2: no graph, which would count as one launch
    jf = TinyJit(vmap(lambda a: (a*2).softmax() + a.max()))
    with Context(JIT=2):
      for _ in range(3): jf(Tensor(rand(6, 5)).realize())
      x = Tensor(rand(6, 5)).realize()
      GlobalCounters.reset()
      out = jf(x)
    self.assertEqual(GlobalCounters.kernel_count, jit_kernels(jf))
    self.assert_close(out.numpy(), np_loop(lambda a: np_softmax(a*2) + a.max(), x.numpy()))

  def test_tinyjit_replay_after_freeing_intermediates(self):
    # a captured function's intermediate buffers can be freed between calls; the next replay allocates them again
    jf = TinyJit(vmap(lambda a: (a*2).softmax() * a.max()))
    for _ in range(3): jf(Tensor(rand(4, 7)).realize())
    jf.captured.free_intermediates()
    for _ in range(2):
      x = rand(4, 7)
      self.assert_close(jf(Tensor(x).realize()).numpy(), np_loop(lambda a: np_softmax(a*2) * a.max(), x))

  def test_tinyjit_reads_a_closed_over_tensor_assigned_in_place(self):
    # a replay reads the buffers it captured: a closed-over weight written in place is seen, as an argument's is
    w = rand(4)
    W = Tensor(w).realize()
    jf = TinyJit(vmap(lambda a: (a*W).sum()))
    for _ in range(5):
      w, a = rand(4), rand(3, 4)
      W.assign(Tensor(w)).realize()
      self.assert_close(jf(Tensor(a).realize()).numpy(), (a*w).sum(1))

  def test_tinyjit_keeps_the_captured_closure(self):
    # TinyJit replays the kernels of its capture (as jax.jit keeps what it traced): a closure rebound to another Tensor after the
    # capture is not read (docs/vmap.md, "Calling it again"); pass what changes as an argument
    box, ws = [None], [rand(4) for _ in range(5)]
    jf = TinyJit(vmap(lambda a: (a*box[0]).sum()))
    for i, w in enumerate(ws):
      box[0], a = Tensor(w).realize(), rand(3, 4)
      self.assert_close(jf(Tensor(a).realize()).numpy(), (a*ws[min(i, 1)]).sum(1))   # captured on the second call

  def test_tinyjit_chunked(self):
    # a chunk is an OUTER range: its kernels run once per chunk with another value of the range's variable, also when replayed
    jf = TinyJit(vmap(lambda x: x.softmax(), chunk_size=3))
    for _ in range(4):
      x = rand(7, 3)
      self.assert_close(jf(Tensor(x).realize()).numpy(), np_softmax(x))

def np_dot_max(a, w): return (a*w).sum(1) + a.max(1)

@unittest.skipIf(LINE_012, "0.14's jit-call-cost topic: the 0.12 line's TinyJit is its own")
@skip_unless("jit-call-cost")
class TestJitCallCost(VmapTestCase):
  """a TinyJit call's own cost (jit-call-cost): the inputs' preparation kept per input UOps, a CPU kernel launched from kept ctypes args"""
  def jitted(self): return TinyJit(vmap(lambda a, w: (a*w).sum() + a.max(), in_axes=(0, None)))

  def test_same_tensors_take_the_kept_inputs(self):
    jf, a, w = self.jitted(), rand(5, 3), rand(3)
    A, W = Tensor(a).realize(), Tensor(w).realize()
    for _ in range(4): self.assert_close(jf(A, W).numpy(), np_dot_max(a, w))
    self.assertEqual(jf.input_cache.hits, 3)   # every call but the first

  def test_new_tensors_of_the_same_shape_miss(self):
    jf, w = self.jitted(), Tensor(rand(3)).realize()
    for _ in range(3):
      a = rand(5, 3)
      self.assert_close(jf(Tensor(a).realize(), w).numpy(), np_dot_max(a, w.numpy()))
    self.assertEqual(jf.input_cache.hits, 0)

  def test_data_written_in_place_is_read(self):
    jf, a, w = self.jitted(), rand(5, 3), rand(3)
    A, W = Tensor(a).realize(), Tensor(w).realize()
    for _ in range(3): jf(A, W)
    a2 = rand(5, 3)
    A.assign(Tensor(a2)).realize()
    self.assert_close(jf(A, W).numpy(), np_dot_max(a2, w))

  def test_errors_still_raised_after_hits(self):
    from tinygrad.engine.jit import JitError
    jf, a, w = self.jitted(), rand(5, 3), rand(3)
    A, W = Tensor(a).realize(), Tensor(w).realize()
    for _ in range(4): jf(A, W)
    for bad in [(Tensor(rand(6, 3)).realize(), W), (A, Tensor(rand(3)).cast(dtypes.float32).realize()), (A, Tensor(2.0)), (A, A[0])]:
      with self.assertRaises(JitError): jf(*bad)
    g, x = TinyJit(vmap(lambda a, b: a*b)), Tensor(rand(4, 2)).realize()
    for _ in range(3): g(x, Tensor(rand(4, 2)).realize())
    with self.assertRaises(JitError): g(x, x)   # duplicate inputs
    h, y = TinyJit(lambda a, b: (a*b).realize()), Tensor(rand(4, 2)).realize()
    for _ in range(3): h(x, b=y)
    with self.assertRaises(JitError): h(x, y)   # the same Tensors, but passed by position: the names differ
    self.assert_close(jf(A, W).numpy(), np_dot_max(a, w))

  def test_variable_bound_to_another_value_misses(self):
    jf, a = TinyJit(lambda x: (x+1).realize()), rand(3, 10)
    A, v = Tensor(a).realize(), UOp.variable("i", 1, 10)
    views = {i: A[:, :v.bind(i)] for i in (2, 3)}
    for i in (2, 3, 2, 3, 3): self.assert_close(jf(views[i])[:, :i].numpy(), a[:, :i]+1)
    self.assertEqual(jf.input_cache.hits, 1)   # the last call: the view of the call before, bound to the same value

  def test_input_on_another_device_copied_in(self):
    # upstream's test_slice_copy test_jit_rebinds_new_buffers: a replay mapped every input into each kernel's device, a PYTHON one too
    @TinyJit
    def write(a:Tensor, b:Tensor): a[5:13].assign(b[7:15].to(a.device)).realize()
    held = []
    for i in range(5):
      av, bv = np.full(32, -100.-i, dtype=np.float32), np.arange(32, dtype=np.float32)+1000*i
      a, b = Tensor(av.copy()).realize(), Tensor(bv.copy(), device="PYTHON").realize()
      write(a, b)
      av[5:13] = bv[7:15]
      held.append((a, av))
    for a, av in held: np.testing.assert_equal(a.numpy(), av)

  @unittest.skipUnless(Device.DEFAULT == "CPU", "CPULaunch is the CPU's (make test's emulator rerun and test-cl run this file on PYTHON, CL)")
  def test_cpu_kernels_launch_from_kept_args(self):
    from tinygrad.device import Buffer
    w, a = rand(3), rand(5, 3)
    W = Tensor(w).realize()   # not an argument: a buffer the plan keeps
    jf = TinyJit(vmap(lambda a: (a*W).sum() + a.max()))
    for _ in range(3): jf(Tensor(a).realize())
    steps = [s for s in jf.captured._plan if hasattr(s, "fast")]
    self.assertTrue(steps, f"no kernel step in the plan: {jf.captured._plan}")
    for s in steps:
      self.assertIsNotNone(s.fast, f"{s.device} dims={s.dims} vals={s.vals} ops={s.ops!r} mem={s.mem!r} runtime={type(s.runtime).__name__} "
                                   f"bufs={[b if isinstance(b, int) else (b.device, b.is_allocated()) for b in s.bufs]}")
    # W's memory freed and allocated again elsewhere: that launch takes run_linear's path
    buf = W.uop.buffer
    buf.deallocate()
    other = Buffer(buf.device, buf.size, buf.dtype).allocate()   # takes the freed memory from the allocator's cache
    buf.allocate().copy_from(Tensor(w).realize().uop.buffer)
    self.assertFalse(all(s.fast.valid() for s in steps))
    self.assert_close(jf(Tensor(a).realize()).numpy(), np_dot_max(a, w))
    del other

class TestScheduleCache(ScheduledTestCase):
  def schedule_misses(self, fn, *shapes) -> list[int]:
    """how many schedules each call of fn on fresh data of `shapes` adds to the schedule cache"""
    ret = []
    for _ in range(3):
      xs = [Tensor(rand(*s)).realize() for s in shapes]
      before = schedule_cache_size()
      fn(*xs).realize()
      ret.append(schedule_cache_size() - before)
    return ret

  def test_repeat_calls_hit(self): self.assertEqual(self.schedule_misses(vmap(per_row), (9, 4))[1:], [0, 0])
  def test_repeat_nested_calls_hit(self): self.assertEqual(self.schedule_misses(vmap(vmap(per_row)), (3, 9, 4))[1:], [0, 0])
  def test_repeat_chunked_calls_hit(self): self.assertEqual(self.schedule_misses(vmap(per_row, chunk_size=4), (9, 4))[1:], [0, 0])
  def test_new_shape_misses(self):
    f = vmap(per_row)
    f(Tensor(rand(9, 4))).realize()
    x = Tensor(rand(10, 4)).realize()
    before = schedule_cache_size()
    f(x).realize()
    self.assertEqual(schedule_cache_size(), before+1)

  def test_hit_gives_new_numbers(self):
    f = vmap(lambda e: e.softmax())
    for _ in range(3):
      x = rand(5, 4)
      self.assert_close(f(Tensor(x)).numpy(), np_softmax(x))

  def test_nested_scopes_with_same_size_do_not_alias(self):
    # two scopes of the same size: their RANGEs are renamed for the cache, but stay two RANGEs
    x = rand(3, 3)
    self.assert_close(vmap(lambda a: vmap(lambda b: a.sum()*b)(Tensor(x)))(Tensor(x)).numpy(), x.sum(1)[:, None, None]*x[None])

  # a kernel's output is numbered past the inputs' LUNIQUEs; an input folded out of the graph (z*0) still has its number, and an output given
  # that number was mapped back to the input's buffer and overwrote it (vanilla 0.12.0 too, outside vmap as well)
  def assert_input_intact(self, fn):
    x = rand(4, 3)
    xt = Tensor(x).realize()
    outs = [fn(xt).numpy() for _ in range(2)]
    np.testing.assert_equal(xt.numpy(), x)
    return outs
  def test_folded_input_not_overwritten(self):
    for out in self.assert_input_intact(lambda x: (x*0+5).contiguous()): np.testing.assert_equal(out, np.full((4, 3), 5.0))
  def test_folded_input_in_vmap_not_overwritten(self):
    for out in self.assert_input_intact(vmap(lambda z: (z*0+1).contiguous())): np.testing.assert_equal(out, np.ones((4, 3)))
  def test_constant_gradient_does_not_overwrite_input(self):
    # the gradient of x**1 is 1 everywhere: x folds out of its graph
    for out in self.assert_input_intact(lambda x: (x**1).sum().gradient(x)[0]): np.testing.assert_equal(out, np.ones((4, 3)))

  def test_custom_kernels_keyed_by_function(self):
    # every CustomKernel printed the same, so two custom kernels of one graph shape shared a cache entry: the second ran the first's kernel
    from tinygrad.uop.ops import KernelInfo
    def scaled(c):
      def kernel(B, A):
        i = UOp.range(3, 0)
        return B[i].store(A[i] * c).end(i).sink(arg=KernelInfo(name="scaled"))
      return kernel
    x = rand(3)
    a = Tensor(x).realize()
    for c in (2.0, 10.0, -3.0):
      with self.subTest(c=c): self.assert_close(Tensor.empty(3, dtype=dtypes.float64).custom_kernel(a, fxn=scaled(c))[0].numpy(), x * c)

class TestKernelCounts(VmapTestCase):
  def setUp(self): self.x = Tensor(rand(6, 5, 4)).realize()
  def test_one_example_is_one_kernel(self): self.assertEqual(kernels(lambda: per_row(self.x[0, 0]).realize()), 1)
  def test_vmap_one_kernel(self): self.assertEqual(kernels(lambda: vmap(per_row)(self.x[0]).realize()), 1)
  def test_vmap_vmap_one_kernel(self): self.assertEqual(kernels(lambda: vmap(vmap(per_row))(self.x).realize()), 1)
  def test_vmap_vmap_mixed_axes_one_kernel(self):
    self.assertEqual(kernels(lambda: vmap(vmap(per_row, in_axes=1), in_axes=2)(self.x).realize()), 1)
  def test_constants_made_in_the_function_are_one_kernel(self):
    # full_like, zeros and ones made by the function are constants of its kernel (0.14 fills a buffer for each, in a kernel of its own;
    # vmap reads them as the values they hold): bench W4's Jacobian of stacked zeros, ones and entries is one kernel
    x = self.x[0].numpy()
    f = lambda e: Tensor.stack(e.sum(), e.sum().full_like(0.0), Tensor.ones(()) * 2 + e[0], Tensor.zeros(()))
    self.assertEqual(kernels(lambda: vmap(f)(self.x[0]).realize()), 1)
    self.assert_close(vmap(f)(self.x[0]).numpy(), np.stack([x.sum(1), np.zeros(len(x)), 2 + x[:, 0], np.zeros(len(x))], 1))

  def test_constants_shared_by_outputs_are_read_as_each_output_alone_reads_them(self):
    # fn's outputs are looked at together for such constants (one toposort for all): each output's graph is the very one looking at it
    # alone gives, also where another output writes the constant (made contiguous, it keeps its kernel there)
    from tinygrad.vmap import _filled_consts, _filled_consts_as_values, _filled_consts_one_by_one
    x = self.x[0].numpy()
    def f(e):
      z, o = e.sum().full_like(0.0), e.sum().full_like(1.5)
      return e * o + z, (e.max() + z) * o
    def g(e):
      z = e.sum().full_like(2.0)
      return e + z, z.contiguous() * 1
    for fn, want in [(f, [x * 1.5, x.max(1) * 1.5]), (g, [x + 2, np.full(len(x), 2.0)])]:
      with self.subTest(fn=fn.__name__):
        outs = fn(Tensor(x[0]))
        shared = (_filled_consts(roots:=[t.uop for t in outs]), set(roots))
        if not LINE_012: self.assertEqual(shared[0] is None, fn is g)   # 0.12's full_like is a constant, no buffer to fill
        for t in outs: self.assertIs(_filled_consts_as_values(t, shared).uop, _filled_consts_one_by_one(t).uop)
        for got, w in zip(vmap(fn)(self.x[0]), want): self.assert_close(got.numpy(), w)

  def test_kernels_do_not_grow_with_batch(self):
    f = lambda e: e.softmax()
    self.assertEqual(kernels(lambda: vmap(f)(Tensor(rand(3, 4)).realize()).realize()),
                     kernels(lambda: vmap(f)(Tensor(rand(30, 4)).realize()).realize()))

class TestChunks(VmapTestCase):
  def check_chunks(self, fn, x, chunk_size, nfn=None, **kw):
    self.assert_close(vmap(fn, chunk_size=chunk_size, **kw)(Tensor(x)).numpy(), np_vmap(nfn or fn, **kw)(x))

  def test_divisible(self): self.check_chunks(per_row, rand(12, 4), 3)
  def test_not_divisible(self): self.check_chunks(per_row, rand(11, 4), 3)
  def test_one_chunk_and_a_tail(self):
    # one full chunk is an OUTER range of size 1
    for n, k in [(3, 2), (4, 3), (7, 4)]:
      with self.subTest(n=n, chunk_size=k): self.check_chunks(lambda x: x.softmax(), rand(n, 4), k, nfn=np_softmax)
  def test_python_number_output_with_a_tail(self):
    # the chunks' outputs are joined with cat, a pad of each: a constant's pad once lost its zeros (fix-weak-const-pad)
    for n, k in [(4, 3), (5, 2)]:
      with self.subTest(n=n, chunk_size=k): self.check_chunks(lambda x: 1.5, rand(n, 3), k, nfn=lambda x: np.float64(1.5))
  def test_chunk_of_one_is_a_sequential_map(self): self.check_chunks(per_row, rand(5, 4), 1)
  def test_chunk_larger_than_batch(self): self.check_chunks(per_row, rand(5, 4), 8)
  def test_softmax(self): self.check_chunks(lambda x: x.softmax(), rand(10, 6), 4, nfn=np_softmax)
  def test_in_and_out_axes(self): self.check_chunks(lambda x: x*2+x.sum(), rand(3, 10), 4, in_axes=1, out_axes=1)
  def test_unmapped_input(self):
    x, w = rand(10, 3), rand(3)
    self.assert_close(vmap(lambda x, w: (x*w).sum(), in_axes=(0, None), chunk_size=4)(Tensor(x), Tensor(w)).numpy(), x@w)
  def test_pytree_output(self):
    x = rand(7, 3)
    s, d = vmap(lambda x: (x.sum(), {"d": x*2}), chunk_size=3)(Tensor(x))
    self.assert_close(s.numpy(), x.sum(1))
    self.assert_close(d["d"].numpy(), x*2)

  def test_nested_chunked(self):
    x = rand(5, 7, 4)
    f = vmap(vmap(lambda e: e.softmax(), chunk_size=3), chunk_size=2)
    self.assert_close(f(Tensor(x)).numpy(), np_softmax(x))

  def test_nested_inner_chunked(self):
    x = rand(5, 7, 4)
    self.assert_close(vmap(vmap(per_row, chunk_size=2))(Tensor(x)).numpy(), np_nested(per_row, (0, 0))(x))

  def intermediate_bytes(self, chunk_size:int|None, n=12, d=16) -> int:
    """the largest buffer a vmap with a realized (d, d) per-example intermediate allocates, besides its input and output"""
    X = Tensor(x:=rand(n, d)).realize()
    y = vmap(lambda e: (e[:, None] * e[None, :]).contiguous().sum(0), chunk_size=chunk_size)(X)
    bufs = realize_with_buffers(y)
    ends = {id(X.uop.base.buffer), id(y.uop.base.buffer)}
    sizes = [b.nbytes for b in bufs if id(b) not in ends]
    self.assert_close(y.numpy(), x * x.sum(1, keepdims=True))
    return max(sizes)

  def test_chunks_compile_once(self):
    # the chunks run one set of kernels, compiled once, however many chunks there are (0.12: a scope over an OUTER range of chunks;
    # 0.14: each chunk's CALLs bind its start). 32 chunks here: 0.12 compiles 8 programs (a quick and a full build of each), 0.14 7
    # (the softmax's 2 reduces, and the join of the chunks' outputs, a few kernels as a cat reads so many buffers each); before, 0.14
    # compiled every chunk's kernels, 65
    X, before = Tensor(x:=rand(128, 4)).realize(), compiled_programs()
    self.assert_close(vmap(lambda e: (e * 3.0).softmax(), chunk_size=4)(X).numpy(), np_softmax(x * 3.0))
    self.assertLess(compiled_programs() - before, 32 // 2)

  def test_memory_scales_with_chunk(self):
    self.assertEqual(self.intermediate_bytes(None), 12*16*16*8)
    self.assertEqual(self.intermediate_bytes(4), 4*16*16*8)
    self.assertEqual(self.intermediate_bytes(1), 16*16*8)

  def test_chunk_whose_kernel_drops_an_input(self):
    # fix-variable-param-slots (0.14): a kernel of a chunk (its start a bound Variable) whose read of one input folds away in codegen (a
    # cat padded and shrunk back) gave the Variable that input's parameter slot, and segfaulted
    def f(a, b):
      v = b.cat(a)
      return set_items(v, (-2,), v.log_softmax(0).sum()).pad(((1, 1),)).shrink(((1, 4),))
    def nf(a, b):
      v = np.concatenate([b, a])
      ls = v - v.max() - np.log(np.exp(v - v.max()).sum())
      return np.pad(set_items(v, (-2,), ls.sum()), (1, 1))[1:4]
    a, b = rand(4, 1), rand(1, 4)
    for chunk in (1, 2):
      with self.subTest(chunk_size=chunk):
        got = vmap(f, in_axes=(-2, -1), chunk_size=chunk)(Tensor(a), Tensor(b)).numpy()
        self.assert_close(got, np.stack([nf(a[i], b[:, i]) for i in range(4)]))

class TestRandomness(VmapTestCase):
  N = 2000
  def draws(self, rand_fn, randomness, n=N, shape=(3,)):
    return vmap(lambda x: x + rand_fn(*shape), randomness=randomness)(Tensor.zeros(n, *shape)).numpy()

  def test_error_is_default(self):
    with self.assertRaisesRegex(RuntimeError, "randomness"): vmap(lambda x: x + Tensor.rand(3))(Tensor.zeros(4, 3))

  def test_error_for_dropout(self):
    with self.assertRaisesRegex(RuntimeError, "randomness"):
      with training(): vmap(lambda x: x.dropout(0.5))(Tensor.ones(4, 3))

  def test_error_does_not_leak(self):
    with self.assertRaises(RuntimeError): vmap(lambda x: x + Tensor.rand(3))(Tensor.zeros(4, 3))
    self.assertEqual(Tensor.rand(5).shape, (5,))
    self.assert_close(vmap(per_row)(Tensor(x:=rand(3, 4))).numpy(), np_vmap(per_row)(x))

  def test_same_rows_equal(self):
    d = self.draws(Tensor.rand, "same", n=5)
    for row in d[1:]: np.testing.assert_array_equal(row, d[0])

  def test_different_rows_differ(self):
    d = self.draws(Tensor.rand, "different", n=50)
    self.assertEqual(len({tuple(r) for r in d}), 50)

  def test_different_uniform(self):
    d = self.draws(Tensor.rand, "different").ravel()
    self.assertTrue(0 <= d.min() and d.max() < 1)
    # mean 1/2, variance 1/12, each decile holds a tenth: loose bounds for 6000 draws
    self.assertAlmostEqual(d.mean(), 0.5, delta=0.02)
    self.assertAlmostEqual(d.var(), 1/12, delta=0.01)
    np.testing.assert_allclose(np.histogram(d, bins=10, range=(0, 1))[0] / d.size, 0.1, atol=0.02)

  def test_different_normal(self):
    d = self.draws(Tensor.randn, "different").ravel()
    self.assertAlmostEqual(d.mean(), 0, delta=0.06)
    self.assertAlmostEqual(d.std(), 1, delta=0.05)
    self.assertAlmostEqual((np.abs(d) < 1).mean(), 0.6827, delta=0.03)

  def test_different_randint(self):
    d = vmap(lambda x: x + Tensor.randint(8, low=0, high=5), randomness="different")(Tensor.zeros(500, 8, dtype="int32")).numpy()
    self.assertEqual(set(np.unique(d)), {0, 1, 2, 3, 4})
    self.assertAlmostEqual((d == 4).mean(), 0.2, delta=0.03)
    self.assertGreater(len({tuple(r) for r in d}), 490)  # 5**8 possible rows

  def test_different_dropout(self):
    with training():
      d = vmap(lambda x: x.dropout(0.5), randomness="different")(Tensor.ones(400, 32)).numpy()
    self.assertEqual(set(np.unique(d)), {0.0, 2.0})
    self.assertAlmostEqual((d == 0).mean(), 0.5, delta=0.03)
    self.assertEqual(len({tuple(r) for r in d}), 400)  # 2**32 possible rows

  def test_different_chunked(self):
    d = vmap(lambda x: x + Tensor.rand(3), randomness="different", chunk_size=4)(Tensor.zeros(10, 3)).numpy()
    self.assertEqual(len({tuple(r) for r in d}), 10)

  def test_same_chunked_with_tail(self):
    # the tail of an uneven chunked vmap is traced again: it shares the chunks' draw (it used to draw its own)
    d = vmap(lambda x: x + Tensor.rand(3), randomness="same", chunk_size=2)(Tensor.zeros(5, 3)).numpy()
    for row in d[1:]: np.testing.assert_array_equal(row, d[0])

  def test_chunks_keep_the_stream(self):
    # chunked or not, the draws are Tensor.rand(N, *shape)'s ("different") or Tensor.rand(*shape)'s ("same"): the same seed, the same batch
    for mode, draw in (("same", lambda: np.broadcast_to(Tensor.rand(3).numpy(), (7, 3))), ("different", lambda: Tensor.rand(7, 3).numpy())):
      for chunk_size in (None, 2, 3, 1):
        Tensor.manual_seed(7)
        want = draw()
        Tensor.manual_seed(7)
        np.testing.assert_array_equal(vmap(lambda x: x + Tensor.rand(3), randomness=mode, chunk_size=chunk_size)(Tensor.zeros(7, 3)).numpy(), want)

  def test_tinyjit_draws_anew_each_replay(self):
    # a TinyJit of a vmap that draws replays no kept draw: each call is the next Tensor.rand(N, *shape) ("different") or
    # Tensor.rand(*shape) ("same") of the stream its seed, set before the capture, starts
    for mode, draw in (("same", lambda: np.broadcast_to(Tensor.rand(3).numpy(), (4, 3))), ("different", lambda: Tensor.rand(4, 3).numpy())):
      Tensor.manual_seed(3)
      want = [draw() for _ in range(5)]
      Tensor.manual_seed(3)
      jf, zeros = TinyJit(vmap(lambda x: x + Tensor.rand(3), randomness=mode)), Tensor.zeros(4, 3).contiguous().realize()
      for i, w in enumerate(want): np.testing.assert_array_equal(jf(zeros).numpy(), w, err_msg=f"{mode}: call {i}")
      self.assertEqual(len({w.tobytes() for w in want}), 5)

  def test_nested_chunked_tails(self):
    # an outer "different" chunked with a tail around an inner "same" chunked with a tail: one draw per outer example, shared inside
    f = vmap(vmap(lambda x: x + Tensor.rand(2), randomness="same", chunk_size=3), randomness="different", chunk_size=2)
    d = f(Tensor.zeros(5, 4, 2)).numpy()
    for rows in d: np.testing.assert_array_equal(rows, np.broadcast_to(rows[0], rows.shape))
    self.assertEqual(len({tuple(rows[0]) for rows in d}), 5)

  def test_nested_different(self):
    d = vmap(vmap(lambda x: x + Tensor.rand(2), randomness="different"), randomness="different")(Tensor.zeros(4, 5, 2)).numpy()
    self.assertEqual(len({tuple(r) for r in d.reshape(-1, 2)}), 20)

  def test_nested_same_outer_different_inner(self):
    d = vmap(vmap(lambda x: x + Tensor.rand(2), randomness="different"), randomness="same")(Tensor.zeros(4, 5, 2)).numpy()
    for row in d[1:]: np.testing.assert_array_equal(row, d[0])
    self.assertEqual(len({tuple(r) for r in d[0]}), 5)

  def test_bad_mode(self):
    with self.assertRaisesRegex(ValueError, "randomness must be one of"): vmap(per_row, randomness="sometimes")

class TestAssign(ScheduledTestCase):
  """assign inside a vmapped function: a Tensor made in the function takes the per-example value; a buffer shared by the examples, or a
  Tensor that outlives the function (closed over), refuses"""
  def test_clone(self):
    x = rand(4, 3)
    self.assert_close(vmap(lambda a: a.clone() * 2)(Tensor(x)).numpy(), x * 2)   # clone is empty().assign(a): every row was the last one

  def test_assign_to_unrealized(self):
    x = rand(4, 3)
    self.assert_close(vmap(lambda a: Tensor.empty(3, dtype=a.dtype).assign(a.exp()) + 1)(Tensor(x)).numpy(), np.exp(x) + 1)
    self.assert_close(vmap(lambda a: Tensor.zeros(3, dtype=a.dtype).contiguous().assign(a * 3))(Tensor(x)).numpy(), x * 3)

  def test_result_assigned_into_a_row_is_computed_in_place(self):
    # buf[:, k].assign(vmap(f)(...)) writes f's results straight into the row, as realizing them into a buffer of their own does: they
    # were computed into a temporary and copied, a kernel more (examples/trajopt.py pays it at every knot)
    d = rand(3, 5, 4, 4)
    def f(m): return (m * m.sum(0)).sum(1)
    D, out = Tensor(d).realize(), Tensor.zeros(3, 5, 4, dtype=dtypes.float64).contiguous().realize()
    fresh = kernels(lambda: vmap(f)(D[:, 1]).realize())
    self.assertEqual(kernels(lambda: out[:, 2].assign(vmap(f)(D[:, 1])).realize()), fresh)
    want = np.zeros((3, 5, 4))
    want[:, 2] = np_loop(f, d[:, 1])
    self.assert_close(out.numpy(), want)

  def test_inplace_on_shared_buffer_raises(self):
    def f(a):
      b = Tensor.ones(3, dtype=a.dtype).contiguous().realize()
      b *= a    # every example would write b: it multiplied the whole batch into it
      return b
    with self.assertRaisesRegex(RuntimeError, "depends on a vmapped example to a Tensor that doesn't"): vmap(f)(Tensor(rand(4, 3)))

  def test_setitem_on_shared_buffer_raises(self):
    def f(a):
      b = Tensor.zeros(5, dtype=a.dtype).contiguous().realize()
      b[1:4] = a   # the write was dropped: every row came back zeros
      return b
    with self.assertRaisesRegex(RuntimeError, "every example would write the same buffer"): vmap(f)(Tensor(rand(4, 3)))

  def test_outer_tensor_is_left_intact(self):
    acc_np = rand(3)
    acc = Tensor(acc_np).realize()
    def f(a, acc):
      acc += a
      return acc * 1
    with self.assertRaisesRegex(RuntimeError, "every example would write the same buffer"): vmap(f, in_axes=(0, None))(Tensor(rand(4, 3)), acc)
    self.assert_close(acc.numpy(), acc_np)

  def test_closed_over_lazy_tensor_raises_and_is_left_intact(self):
    # Tensor.zeros has no buffer yet, but it is data: it took the last example's value and read back "inside a vmap scope" later
    acc = Tensor.zeros(3, dtype=dtypes.float64)
    def f(a):
      acc.assign(acc + a)
      return a * 2
    with self.assertRaisesRegex(RuntimeError, "outlives the vmapped function"): vmap(f)(Tensor(rand(4, 3)))
    self.assert_close(acc.numpy(), np.zeros(3))

  def test_closed_over_returned_raises(self):
    acc = Tensor.zeros(3, dtype=dtypes.float64)
    with self.assertRaisesRegex(RuntimeError, "outlives the vmapped function"): vmap(lambda a: acc.assign(a))(Tensor(rand(4, 3)))
    self.assert_close(acc.numpy(), np.zeros(3))

  def test_closed_over_intact_when_fn_raises(self):
    acc = Tensor.zeros(3, dtype=dtypes.float64)
    def f(a):
      acc.assign(acc + a)
      raise KeyError("fn's own error")
    with self.assertRaises(KeyError): vmap(f)(Tensor(rand(4, 3)))
    self.assert_close(acc.numpy(), np.zeros(3))

  def test_batchnorm_running_stats_raise(self):
    # torch.func refuses this too: the running statistics would get one example's batch statistics
    from tinygrad import nn
    bn = nn.BatchNorm(4)
    with training():
      with self.assertRaisesRegex(RuntimeError, "outlives the vmapped function"): vmap(lambda im: bn(im[None])[0])(Tensor(rand(5, 4, 3, 3).astype(np.float32)))
    self.assert_close(bn.running_mean.numpy(), np.zeros(4, dtype=np.float32))

  def test_local_of_outer_function_in_inner_vmap_raises(self):
    def outer(row):
      buf = Tensor.zeros(3, dtype=row.dtype).contiguous()
      vmap(lambda y: buf.assign(y * row))(Tensor.ones(2, 3, dtype=row.dtype))
      return buf
    with self.assertRaisesRegex(RuntimeError, "outlives the vmapped function"): vmap(outer)(Tensor(rand(4, 3)))

  def test_setitem_of_outer_example_in_inner_vmap_raises(self):
    # the outer example's clone takes the inner batch's values: refused like assign, not left holding an open inner scope
    def outer(a):
      b = a.clone()
      def inner(r):
        b[0] = r
        return r * 2
      vmap(inner)(a)
      return b
    with self.assertRaisesRegex(RuntimeError, "outlives the vmapped function"): vmap(outer)(Tensor(rand(3, 4)))

  def test_local_setitem_per_example_index_constant_value(self):
    # JAX's jnp.zeros(4).at[i].set(1.0): the index is the example's, the value isn't
    idx = np.array([[0, 3], [1, 1], [2, 0]], np.int32)
    w = rand(4)
    def np_set(base, i, v):
      ret = base.copy()
      ret[i] = v
      return ret
    for name, make in [("zeros", lambda: Tensor.zeros(4, dtype=dtypes.float64).contiguous()), ("clone", lambda: Tensor(w).clone())]:
      with self.subTest(target=name):
        def f(i):
          b = make()
          b[i] = 1.0
          return b
        base = np.zeros(4) if name == "zeros" else w
        self.assert_close(vmap(f)(Tensor(idx)).numpy(), np.stack([np_set(base, i, 1.0) for i in idx]))

  def test_local_setitem(self):
    x = rand(4, 3)
    def f(a):
      out = Tensor.zeros(5, dtype=a.dtype).contiguous()
      out[1:4] = a
      return out
    want = np.zeros((4, 5))
    want[:, 1:4] = x
    self.assert_close(vmap(f)(Tensor(x)).numpy(), want)

class TestSetitem(VmapTestCase):
  """setitem inside a vmapped function sets the items of each example, as jax's x.at[idx].set(v) and torch.func.vmap's in-place ops"""
  BASIC = [1, -1, (slice(None), 2), (slice(1, 3), slice(None, None, 2)), (slice(None, None, -1), slice(4, 0, -2)), (Ellipsis, 3),
           (None, 2, slice(1, 4)), (2, 5), (slice(None), slice(None))]
  def check_set(self, idx, value):
    x, v = rand(5, 4, 6), rand(5, 6)
    self.assert_close(vmap(lambda a, b: set_items(a, idx, value(a, b)))(Tensor(x), Tensor(v)).numpy(),
                      np_loop(lambda a, b: set_items(a, idx, value(a, b)), x, v))

  def test_basic_indices_per_example_value(self):
    for idx in self.BASIC:
      with self.subTest(idx=repr(idx)): self.check_set(idx, lambda a, b: b.sum() * a[0, 0])

  def test_basic_indices_row_value(self):
    for idx in [1, (slice(1, 3),), (slice(None, None, -2),), (Ellipsis, slice(None), slice(None))]:
      with self.subTest(idx=repr(idx)): self.check_set(idx, lambda a, b: b)   # broadcast over the rows set

  def test_constant_value(self):
    for idx in self.BASIC:
      with self.subTest(idx=repr(idx)): self.check_set(idx, lambda a, b: 7.5)

  def test_unbatched_value(self):
    x, w = rand(5, 4, 6), rand(6)
    f = lambda a, w: set_items(a, (slice(1, 3),), w * 2)
    self.assert_close(vmap(f, in_axes=(0, None))(Tensor(x), Tensor(w)).numpy(), np_loop(f, x, w, in_axes=(0, None)))

  def test_list_indices_last_write_wins(self):
    for idx in [[0, 2], (slice(None), [1, 3, 1])]:
      with self.subTest(idx=repr(idx)): self.check_set(idx, lambda a, b: b.sum())

  def test_tensor_and_basic_indices(self):
    # the slices' view gets the items set: upstream's masked setitem set them in every row of self
    for idx in [(slice(1, 3), [0, 5]), (2, [1, 3]), (slice(None, None, -1), [2]), (None, slice(1, None), [4, 0]), (Ellipsis, [5, 1])]:
      with self.subTest(idx=repr(idx)): self.check_set(idx, lambda a, b: b[0] * a[0, 0])

  def test_per_example_tensor_index(self):
    x = rand(5, 4, 6)
    self.assert_close(vmap(lambda a: set_items(a, a[:, 0].argmax(), 0.0))(Tensor(x)).numpy(),
                      np_loop(lambda a: set_items(a, a[:, 0].argmax(), 0.0), x))

  def test_target_with_no_data_takes_per_example_value(self):
    x = rand(4, 3)
    def f(a, mod):
      b = mod.zeros(5, dtype=a.dtype)
      if isinstance(a, Tensor): b = b.contiguous()
      b[1:4] = a
      return b
    self.assert_close(vmap(lambda a: f(a, Tensor))(Tensor(x)).numpy(), np_loop(lambda a: f(a, np), x))

  def test_realized_per_example_target(self):
    x = rand(5, 6)
    def f(a):
      y = (a * 2).contiguous().realize() if isinstance(a, Tensor) else a * 2   # realized inside the scope: still one example
      y[1:3] = a[0]
      return y
    self.assert_close(vmap(f)(Tensor(x)).numpy(), np_loop(f, x))

  def test_augmented_setitem(self):
    x = rand(5, 6)
    def f(a):
      y = a.clone() if isinstance(a, Tensor) else a.copy()
      y[2:4] += 5.0
      return y
    self.assert_close(vmap(f)(Tensor(x)).numpy(), np_loop(f, x))

  def test_in_tinyjit(self):
    jf = TinyJit(vmap(lambda a: set_items(a, slice(0, 2), a.sum())))
    for _ in range(4):   # captured on the 2nd call, replayed after: every call's own values
      x = rand(5, 6)
      self.assert_close(jf(Tensor(x)).numpy(), np_loop(lambda a: set_items(a, slice(0, 2), a.sum()), x))

  def test_nested_and_chunked(self):
    x = rand(3, 5, 4)
    f = lambda a: set_items(a * 1, slice(1, 3), -a[0])
    self.assert_close(vmap(vmap(f), chunk_size=2)(Tensor(x)).numpy(), np_loop(lambda e: np_loop(f, e), x))

  def test_one_kernel(self):
    x = Tensor(rand(5, 4)).realize()
    self.assertEqual(kernels(lambda: vmap(lambda a: set_items(a * a, slice(1, 3), a[0] * 3))(x).realize()), 1)

  def test_jacobians_through_setitem(self):
    from tinygrad.jacobian import jacfwd, jacrev
    x = rand(5, 4)
    f = lambda a: set_items(a * a, slice(1, 3), a[0] * 3)
    def jac(a):
      j = np.diag(2 * a)
      j[1:3], j[1:3, 0] = 0, 3
      return j
    for transform in (jacfwd, jacrev):
      with self.subTest(transform=transform.__name__): self.assert_close(vmap(transform(f))(Tensor(x)).numpy(), np_loop(jac, x))

  def test_full_flip_outside_vmap(self):
    # t[::-1] is a view of t with t's shape: upstream took it for a copy and assigned t reversed into t, dropping v
    x, v = rand(6), rand(6)
    t = Tensor(x).contiguous().realize()
    t[::-1] = Tensor(v)
    self.assert_close(t.numpy(), set_items(x, slice(None, None, -1), v))

  def test_tensor_and_basic_indices_outside_vmap(self):
    x = rand(4, 6)
    for idx in [(slice(1, None), [0]), (2, [1, 3]), (slice(None, None, -2), [5, 0])]:
      with self.subTest(idx=repr(idx)):
        t = Tensor(x).contiguous().realize()
        t[idx] = -1.0
        self.assert_close(t.numpy(), set_items(x, idx, -1.0))

@unittest.skipIf(LINE_012, "0.14's batch_scope, per output: 0.12 lowers a scope in rangeify, for all its outputs at once")
class TestOutputsShareBatching(VmapTestCase):
  def test_shared_nodes_batched_once(self):
    import tinygrad.batching as batching
    def f(x):
      h = (x * 2).exp() + x
      return h.sum(), h.max(), h * 3
    x, rules, batched = rand(8, 5), batching.pm_batch.rewrite, []
    with unittest.mock.patch.object(batching.pm_batch, "rewrite", side_effect=lambda u, ctx: batched.append(u) or rules(u, ctx)):
      got = vmap(f)(Tensor(x))
    self.assertEqual(len(batched), len(set(batched)))
    h = np.exp(x * 2) + x
    for g, want in zip(got, (h.sum(1), h.max(1), h * 3)): self.assert_close(g.numpy(), want)

class TestErrors(unittest.TestCase):
  def raises(self, exc, msg, fn, *args, **kw):
    with self.assertRaisesRegex(exc, msg): vmap(fn, **kw)(*args)

  def test_bool_axes(self):
    # a bool is an int to Python, not an axis: JAX's TypeError, not a rank error that contradicts itself
    x = Tensor(rand(4, 3))
    self.raises(TypeError, "in_axes must be an int, None, or a \\(nested\\) tuple/list/dict of those, got True for argument a",
                lambda a, b: a*b, x, x, in_axes=(True, 0))
    self.raises(TypeError, "out_axes must be an int, None, .* got False for output", lambda a: a*2, x, out_axes=False)

  def test_inconsistent_sizes(self):
    self.raises(ValueError, r"inconsistent sizes for array axes to be mapped: axis 0 of argument a had size 3, axis 1 of argument b had size 2",
                lambda a, b: a+b, Tensor.empty(3, 2), Tensor.empty(2, 2), in_axes=(0, 1))
  def test_inconsistent_with_axis_size(self):
    self.raises(ValueError, "axis 0 of argument a had size 3, but axis_size=4", lambda a: a, Tensor.empty(3, 2), axis_size=4)
  def test_in_axes_out_of_range(self):
    self.raises(ValueError, r"map argument a along axis 2, which implies that its rank should be at least 3, but is only 2",
                lambda a: a, Tensor.empty(3, 2), in_axes=2)
  def test_in_axes_negative_out_of_range(self):
    self.raises(ValueError, "map argument a along axis -3", lambda a: a, Tensor.empty(3, 2), in_axes=-3)
  def test_in_axes_length(self):
    self.raises(ValueError, r"len\(in_axes\)=1, len\(args\)=2", lambda a, b: a, Tensor.empty(3), Tensor.empty(3), in_axes=(0,))
  def test_in_axes_tuple_for_tensor(self):
    self.raises(ValueError, "structure the value doesn't have: argument a is a Tensor", lambda a: a, Tensor.empty(3, 2), in_axes=((0, 1),))
  def test_in_axes_node_type_differs(self):
    # JAX's prefix rule compares node types: a tuple spec for a list (or a namedtuple) argument is a ValueError, not mapped as if it matched
    NT = collections.namedtuple("NT", "a b")
    self.raises(ValueError, r"structure the value doesn't have: argument l is a list, not a tuple", lambda l: l[0] + l[1],
                [Tensor.empty(4, 3), Tensor.empty(3)], in_axes=((0, None),))
    self.raises(ValueError, r"argument p is a NT, not a tuple", lambda p: p.a * p.b, NT(Tensor.empty(4, 3), Tensor.empty(3)), in_axes=((0, None),))
  def test_out_axes_node_type_differs(self):
    self.raises(ValueError, r"out_axes \(1, 0\) for output has a structure the value doesn't have: output is a list, not a tuple",
                lambda a: [a, a * 2], Tensor.empty(4, 3), out_axes=(1, 0))
  def test_in_axes_dict_keys_differ(self):
    self.raises(ValueError, r"keys \['y'\], but the value has keys \['x'\]", lambda a: a["x"], {"x": Tensor.empty(3)}, in_axes=({"y": 0},))
  def test_in_axes_bad_type(self):
    with self.assertRaisesRegex(TypeError, "in_axes must be an int, None, or a tuple"): vmap(per_row, in_axes="0")
  def test_in_axes_bad_entry(self):
    self.raises(TypeError, "in_axes entries must be an int, None", lambda a: a, Tensor.empty(3), in_axes=(1.5,))
  def test_nested_argument_named(self):
    self.raises(ValueError, r"axis 1 of argument t\[1\] had size 4", lambda t: t[0], (Tensor.empty(3), Tensor.empty(2, 4)), in_axes=((0, 1),))
  def test_all_unmapped(self):
    self.raises(ValueError, "at least one non-None value in in_axes", lambda a: a, Tensor.empty(3), in_axes=None)
  def test_returns_non_tensor(self):
    self.raises(TypeError, "must return a Tensor, a Python number, None or a tuple/list/dict of those, got object at output",
                lambda a: object(), Tensor.empty(3))
  def test_returns_structure_with_non_tensor(self):
    self.raises(TypeError, r"got str at output\[1\]", lambda a: (a, "s"), Tensor.empty(3))
  def test_out_axes_out_of_range(self):
    self.raises(ValueError, "out_axes 2 for output is out of range: the batched output has 2 axes", lambda a: a, Tensor.empty(3, 2), out_axes=2)
  def test_out_axes_negative_out_of_range(self):
    self.raises(ValueError, "out_axes -3 for output is out of range", lambda a: a, Tensor.empty(3, 2), out_axes=-3)
  def test_out_axes_structure(self):
    self.raises(ValueError, "out_axes for output has 1 entries, but the value has 2", lambda a: (a, a), Tensor.empty(3), out_axes=(0,))
  def test_out_axes_none_for_mapped_output(self):
    self.raises(ValueError, "mapped output but out_axes is None", lambda a: a*2, Tensor.empty(3, 2), out_axes=None)
  def test_bad_chunk_size(self):
    with self.assertRaisesRegex(ValueError, "chunk_size must be a positive int"): vmap(per_row, chunk_size=0)
  def test_not_callable(self):
    with self.assertRaisesRegex(TypeError, "expects a function"): vmap(3)
  def test_read_inside_fn_names_the_method(self):
    self.raises(RuntimeError, r"vmap: Tensor.item reads the value of one example .* return the value from fn and read it after",
                lambda a: a * a.sum().item(), Tensor(rand(3, 2)))
  def test_masked_select_of_per_example_mask_raises(self):
    # its output's size is each example's count of True: a data-dependent shape, which vmap can't batch (as in JAX)
    self.raises(RuntimeError, r"Tensor.masked_select .* a shape that depends on each example's data", lambda a: a.masked_select(a > 0),
                Tensor(rand(3, 4)))
  def test_masked_select_of_shared_mask(self):
    x, m = rand(3, 4), np.array([True, False, True, True])
    got = vmap(lambda a, mask: a.masked_select(mask), in_axes=(0, None))(Tensor(x), Tensor(m)).numpy()
    np.testing.assert_allclose(got, np_loop(lambda a, mask: a[mask], x, m, in_axes=(0, None)))
  @unittest.skipIf(LINE_012, "0.12.0 has no nonzero, and its masked_select no size=")
  def test_data_dependent_shape_names_size(self):
    # nonzero and masked_select without size= need a count of one example for their shape: the error names the method and the way out
    self.raises(RuntimeError, r"Tensor\.nonzero .* pass size=N", lambda a: a.nonzero(), Tensor(rand(3, 4)))
    self.raises(RuntimeError, r"Tensor\.masked_select .* or pass size=N", lambda a: a.masked_select(a > 0), Tensor(rand(3, 4)))
  @unittest.skipIf(LINE_012, "0.12.0 has no nonzero, and its masked_select no size=")
  def test_data_dependent_shape_with_size(self):
    # with size=N (JAX's size=) the shape is fixed and they batch as any op: the numpy loop pads with fill_value, as both do
    x = rand(5, 4) * (rand(5, 4) > 0)
    def np_nonzero(e): nz = np.argwhere(e != 0)[:3]; return np.concatenate([nz, np.full((3 - len(nz), 1), -1)]).astype(np.int32)
    np.testing.assert_equal(vmap(lambda a: a.nonzero(size=3, fill_value=-1))(Tensor(x)).numpy(), np_loop(np_nonzero, x))
    def np_select(e): s = e[e > 0][:3]; return np.concatenate([s, np.full(3 - len(s), -2.0)])
    np.testing.assert_allclose(vmap(lambda a: a.masked_select(a > 0, size=3, fill_value=-2.0))(Tensor(x)).numpy(), np_loop(np_select, x))
  def test_one_hot_without_num_classes_raises(self):
    # 0.12 reads the class count from the data when num_classes is left out; 0.14's one_hot needs num_classes
    exc, msg = (RuntimeError, r"Tensor.one_hot .* pass num_classes") if LINE_012 else (TypeError, "num_classes")
    self.raises(exc, msg, lambda i: i.one_hot(), Tensor(np.array([[0, 2], [1, 3]], dtype=np.int32)))
  @unittest.skipUnless(LINE_012, "0.14's allclose is a Tensor (isclose(...).all()), which vmap batches")
  def test_allclose_inside_fn_raises(self):
    self.raises(RuntimeError, r"Tensor.allclose .* isclose\(...\).all\(\)", lambda a: a * a.allclose(a * 2), Tensor(rand(3, 2)))
  def test_error_leaves_inputs_usable(self):
    x = rand(3, 2)
    X = Tensor(x)
    with self.assertRaises(TypeError): vmap(lambda a: "s")(X)
    np.testing.assert_allclose(vmap(lambda a: a.sum())(X).numpy(), x.sum(1))

if __name__ == "__main__":
  unittest.main()
