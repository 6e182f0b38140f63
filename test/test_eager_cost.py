"""What keeps an eager call's graph building cheap without changing the graph: the shortcuts in Tensor._broadcasted, cat, stack and
UOp._mop must give the very UOps (`is`) the long way gives, and the results must still match numpy (values and gradients)."""
from fork_topics import skip_module_unless, skip_unless
skip_module_unless('eager-cost|eager-shortcuts')   # the 0.12 topic; 0.14's shortcuts
import functools, unittest
import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import UOp, Ops
from tinygrad.fork_line import LINE_012

def rand(*shape, dtype=dtypes.float32, seed=0):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).cast(dtype)

def long_cat(tensors:list[Tensor], dim:int) -> Tensor:
  """cat the long way: Tensor.pad every input to the full size, then Tensor.add them"""
  ends = np.cumsum([0] + [t.shape[dim] for t in tensors])
  return functools.reduce(Tensor.add, [t.pad(tuple((int(ends[i]), int(ends[-1]-ends[i+1])) if j == dim else None for j in range(t.ndim)))
                                       for i,t in enumerate(tensors)])

class TestBroadcastedShortcut(unittest.TestCase):
  def test_same_shape_same_tensors(self):
    a, b = rand(3, 4), rand(3, 4, seed=1)
    x, y = a._broadcasted(b)
    self.assertIs(x, a)
    self.assertIs(y, b)

  def test_same_shape_half_and_bool_no_casts(self):
    # nothing is broadcast, so no backward sum needs the accumulating dtype: half (float32) and a bool condition (int) stay as they are
    for a, b in [(rand(3, 4, dtype=dtypes.half), rand(3, 4, dtype=dtypes.half, seed=1)), (rand(3, 4) > 0, rand(3, 4))]:
      with self.subTest(dtype=str(a.dtype)):
        x, y = a._broadcasted(b, match_dtype=False)
        self.assertIs(x, a)
        self.assertIs(y, b)

  def test_broadcast_half_keeps_backward_casts(self):
    # half accumulates in float32: the operand that is broadcast gets the cast pair, its gradient is summed in float32
    a, b = rand(3, 4, dtype=dtypes.half), rand(4, dtype=dtypes.half, seed=1)
    x, y = a._broadcasted(b)
    self.assertIs(x, a)
    casts = lambda t: [u for u in t.uop.toposort() if u.op is Ops.CAST]
    self.assertEqual(len(casts(y)) - len(casts(b)), 2)

  def test_python_number_const(self):
    a = rand(3, 4)
    for reverse in (False, True):
      with self.subTest(reverse=reverse):
        want = Tensor(2.5, device=a.device, dtype=a.dtype)._broadcast_to(a.shape)
        got = a._broadcasted(2.5, reverse=reverse)
        self.assertIs(got[0 if reverse else 1].uop, want.uop)
        self.assertIs(got[1 if reverse else 0], a)
        self.assertFalse(got[0 if reverse else 1].requires_grad)

  def test_casts_and_broadcasts_same_uops_as_tensor_ops(self):
    # the long way: Tensor.cast, Tensor._broadcast_to, Tensor.cast per operand (what _broadcasted did before it built them as UOps)
    from tinygrad.dtype import sum_acc_dtype
    from tinygrad.tensor import _broadcast_shape
    cases = [(rand(3, 1), rand(1, 4, seed=1)), (rand(3, 1) > 0, rand(3, 4)), (rand(3, 4, dtype=dtypes.half), rand(4, dtype=dtypes.half, seed=1)),
             (rand(2, 1, 4).cast(dtypes.int8), rand(3, 1).cast(dtypes.int8))]
    for a, b in cases:
      for backward_cast in (True, False):
        with self.subTest(a=str((a.shape, a.dtype)), b=str((b.shape, b.dtype)), backward_cast=str(backward_cast)):
          out = _broadcast_shape(a.shape, b.shape)
          # an operand of the output's shape isn't broadcast: it stays as it is
          want = [t if t.shape == out else t.cast(sum_acc_dtype(t.dtype) if backward_cast else t.dtype)._broadcast_to(out).cast(t.dtype) for t in (a, b)]
          got = a._broadcasted(b, match_dtype=False, backward_cast=backward_cast)
          self.assertIs(got[0].uop, want[0].uop)
          self.assertIs(got[1].uop, want[1].uop)

  def test_python_number_values(self):
    a, an = rand(3, 4), rand(3, 4).numpy().astype(np.float64)
    np.testing.assert_allclose((2.5 - a * 2.0 / 3).numpy(), 2.5 - an * 2.0 / 3, rtol=1e-6)
    np.testing.assert_equal((rand(5).cast(dtypes.int32) + 3).numpy(), rand(5).numpy().astype(np.int32) + 3)

class TestCatShortcut(unittest.TestCase):
  def test_same_uops_as_pad_and_add(self):
    for dim in (0, 1, -1):
      with self.subTest(dim=dim):
        ts = [rand(2, 3, seed=0), rand(2, 3, seed=1), rand(2, 3, seed=2)]
        self.assertIs(ts[0].cat(*ts[1:], dim=dim).uop, long_cat(ts, dim % 2).uop)

  def test_mixed_dtypes_promote(self):
    a, b = rand(2, 3), rand(1, 3, seed=1).cast(dtypes.int32)
    got = a.cat(b)
    self.assertEqual(got.dtype, dtypes.float32)
    np.testing.assert_allclose(got.numpy(), np.concatenate([a.numpy(), b.numpy()]))

  def test_gradient(self):
    x, y = rand(2, 3), rand(1, 3, seed=1)
    w = np.random.default_rng(2).standard_normal((3, 3)).astype(np.float32)
    np.testing.assert_allclose((x.cat(y) * Tensor(w)).sum().gradient(x)[0].numpy(), w[:2])

class TestStackShortcut(unittest.TestCase):
  def test_same_uops_as_unsqueeze_and_cat(self):
    for dim in (0, 1, 2, -1):
      with self.subTest(dim=str(dim)):
        ts = [rand(2, 3, seed=i) for i in range(4)]
        self.assertIs(Tensor.stack(*ts, dim=dim).uop, long_cat([t.unsqueeze(dim) for t in ts], dim % 3).uop)
        self.assertIs(Tensor.stack(ts, dim=dim).uop, Tensor.stack(*ts, dim=dim).uop)

  def test_mixed_shapes_and_dtypes_go_through_cat(self):
    a, h = rand(2, 3), rand(2, 3, dtype=dtypes.half, seed=1)
    self.assertIs(Tensor.stack(h, h, dim=1).uop, h.unsqueeze(1).cat(h.unsqueeze(1), dim=1).uop)
    np.testing.assert_allclose(Tensor.stack(a, h).numpy(), np.stack([a.numpy(), h.numpy().astype(np.float32)]), rtol=1e-3)
    with self.assertRaises(AssertionError): Tensor.stack(a, rand(3, 2))

  def test_gradient(self):
    x, y = rand(3), rand(3, seed=1)
    w = np.random.default_rng(2).standard_normal((4, 3, 2)).astype(np.float32)
    gx, gy = (Tensor.stack(x, y, dim=1).unsqueeze(0) * Tensor(w)).sum().gradient(x, y)
    np.testing.assert_allclose(gx.numpy(), w[:, :, 0].sum(0), rtol=1e-5)
    np.testing.assert_allclose(gy.numpy(), w[:, :, 1].sum(0), rtol=1e-5)

  def test_scalars(self):
    a = rand(4)
    np.testing.assert_allclose(Tensor.stack(a[3], a[0], a[2]).numpy(), a.numpy()[[3, 0, 2]])

  def test_bad_input(self):
    with self.assertRaises(IndexError): Tensor.stack(rand(2, 3), dim=3)
    with self.assertRaises(ValueError): Tensor.stack((rand(2), rand(2)), rand(2))

class TestReduceShortcut(unittest.TestCase):
  def test_same_uops_as_reduce_and_reshape(self):
    a = rand(2, 3, 4)
    for axis in (None, 0, (0, 2), -1):
      for keepdim in (False, True):
        with self.subTest(axis=str(axis), keepdim=str(keepdim)):
          axes = tuple(range(3)) if axis is None else tuple(x % 3 for x in (axis if isinstance(axis, tuple) else (axis,)))
          r = a._apply_uop(UOp.r, op=Ops.MAX, axis=axes)
          self.assertIs(a.max(axis, keepdim=keepdim).uop, (r if keepdim else r.reshape(tuple(s for i,s in enumerate(a.shape) if i not in axes))).uop)
          np.testing.assert_equal(a.max(axis, keepdim=keepdim).numpy(), a.numpy().max(axis, keepdims=keepdim))

class TestBackwardMetadata(unittest.TestCase):
  def test_new_backward_nodes_get_it_once(self):
    from tinygrad.uop.ops import all_metadata
    x, w = rand(3, 4).requires_grad_(), rand(4, 2, seed=1).requires_grad_()
    loss = (x @ w).relu().sum()
    gx, gw = loss.gradient(x, w)
    for g in (gx, gw):
      md = all_metadata[g.uop]
      self.assertTrue(all(m.backward for m in md))
      self.assertEqual(len(md), len(set((m.name, m.caller) for m in md)))
    self.assertIn("relu", {m.name for u in gx.uop.toposort() for m in all_metadata.get(u, ())})

class TestBasicIndexShortcut(unittest.TestCase):
  BASIC = [2, -1, (1, 2), (slice(None), 3), slice(1, 3), slice(-2, None), slice(None, 100), slice(3, 1), slice(2, 2), (0, slice(-3, -1), 1),
           (slice(None, None, 1), 0), slice(None)]
  def test_same_uops_as_getitem(self):
    a = rand(4, 5, 3)
    for idx in self.BASIC:
      with self.subTest(idx=str(idx)):
        self.assertIs(a[idx].uop, a._getitem(idx).uop)
        np.testing.assert_equal(a[idx].numpy(), a.numpy()[idx])

  def test_whole_tensor_is_itself(self):
    a = rand(4, 5)
    self.assertIs(a[:], a._getitem(slice(None)))
    self.assertIs(a[:, :], a)

  def test_other_indices_take_the_general_path(self):
    a = rand(4, 5)
    if LINE_012: from tinygrad.tensor import _basic_index
    else: from tinygrad.mixin.op import _basic_index   # 0.14: Tensor's indexing lives in the mixins
    for idx, np_idx in (([1, 2], [1, 2]), ((None, 1), (None, 1)), ((Ellipsis, 1), (Ellipsis, 1)), (slice(None, None, 2), slice(None, None, 2)),
                        ((1, Tensor([0, 2])), (1, [0, 2]))):
      with self.subTest(idx=str(idx)):
        self.assertIsNone(_basic_index(a.shape, idx))
        np.testing.assert_equal(a[idx].numpy(), a.numpy()[np_idx])

  def test_out_of_bounds_raises(self):
    for idx in (4, -5, (0, 5), (1, 2, 3)):
      with self.subTest(idx=str(idx)), self.assertRaises(IndexError): rand(4, 5)[idx]

  def test_gradient(self):
    x = rand(4, 5)
    want = np.zeros((4, 5), np.float32); want[1, 4], want[2, 4] = 2, 3
    np.testing.assert_equal((x[1:3, -1] * Tensor([2.0, 3.0])).sum().gradient(x)[0].numpy(), want)

class TestFullShortcut(unittest.TestCase):
  def test_same_graph_as_reshape_and_expand(self):
    for shape, kw in (((2, 3), {}), ((), {}), ((4,), {"dtype": dtypes.int32}), ((2, 1, 3), {"requires_grad": True})):
      with self.subTest(shape=str(shape), kw=str(kw)):
        got, want = Tensor.full(shape, 7, **kw), Tensor(7, _force_unique=True, **kw).reshape((1,)*len(shape)).expand(shape)
        strip = lambda u: UOp.sink(u).substitute({x:UOp.unique(0) for x in u.toposort() if x.op is Ops.UNIQUE})
        self.assertIs(strip(got.uop), strip(want.uop))
        self.assertEqual((got.dtype, got.requires_grad), (want.dtype, want.requires_grad))
        np.testing.assert_equal(got.numpy(), np.full(shape, 7))

  def test_full_like_consts_are_unique(self):
    a = rand(3)
    self.assertIsNot(a.full_like(1.0).uop, a.full_like(1.0).uop)

class TestMovementOpConcreteShapes(unittest.TestCase):
  def test_args_are_simplified(self):
    a = rand(2, 3, 4)
    for t in (a.reshape(6, 4), a.pad(((1, 0), None, (0, 2))), a.shrink(((0, 1), None, (1, 3))), a[:, :1].expand(2, 5, 4)):
      with self.subTest(op=str(t.uop.op)):
        self.assertEqual(t.uop.src[1:], UOp.sink(*t.uop.src[1:]).simplify().src)

  def test_marg_is_what_the_consts_hold(self):
    a = rand(2, 3, 4).uop
    for u in (a.reshape((6, 4)), a.reshape((24,)), a.pad(((1, 0), (0, 0), (0, 2))), a.shrink(((0, 1), (0, 3), (1, 3))),
              a.reshape((2, 1, 3, 4)).expand((2, 5, 3, 4))):
      with self.subTest(op=str(u.op)):
        seeded = u.__dict__.pop("marg")
        self.assertEqual((seeded, [type(x) for x in seeded]), (u.marg, [type(x) for x in u.marg]))

  def test_symbolic_shape_still_simplified(self):
    v = UOp.variable("n", 1, 10)
    t = Tensor.ones(10).shrink(((0, v+0),))
    self.assertIs(t.uop.op, Ops.SHRINK)
    self.assertEqual(t.shape, (v,))

class TestMetadataWrapper(unittest.TestCase):
  def user_events(self, profile:int) -> list:
    from tinygrad.helpers import Context, cpu_events
    a, before = rand(3), len(cpu_events)
    with Context(PROFILE=profile): out = a * 2.0   # kept: Tensor.__del__ is a user-level op too
    del out
    return [str(e.name.display_name) for e in cpu_events[before:] if getattr(e, "device", None) == "USER"]

  def test_profile_records_user_ops(self):
    self.assertEqual(self.user_events(1), ["__mul__"])

  def test_no_profile_records_nothing(self):
    self.assertEqual(self.user_events(0), [])

  def test_op_that_raised_is_not_the_next_ops_outer_op(self):
    from tinygrad.uop.ops import all_metadata
    with self.assertRaises(IndexError): Tensor.stack(rand(2), dim=5)
    self.assertEqual([m.name for m in all_metadata[(rand(2) * 3.0).uop]], ["__mul__"])
    self.assertEqual(self.user_events(1), ["__mul__"])

  def test_metadata_of_nested_ops_is_the_outer_op(self):
    from tinygrad.uop.ops import all_metadata
    t = rand(2, 3).cat(rand(1, 3, seed=1))
    self.assertEqual([m.name for m in all_metadata[t.uop]], ["cat"])

@skip_unless('eager-cost-2')
class TestFrontEndShortcuts(unittest.TestCase):
  """0.14's eager-cost-2: Tensor(uop) on a canonical device, a binop's operand already of the result's dtype, and the metadata wrapper
  with no profile to record take shortcuts that must give what the long way gives"""
  def long_init(self, u:UOp) -> UOp:
    """Tensor.__init__'s general path for a UOp: canonicalize its device, copy it there where it isn't"""
    from tinygrad.device import canonicalize_device
    dev = canonicalize_device(u.device)
    return u if u.device is None or u.device == dev else u.copy_to_device(dev)

  def test_tensor_of_a_uop(self):
    a = rand(3, 4)
    cases = {"buffer": a.uop, "op": (a + 1).uop, "const": UOp.const(2.0, dtypes.float32),
             "lowercase device": UOp.new_buffer("cpu", 4, dtypes.float32)}
    for name, u in cases.items():
      with self.subTest(name):
        t = Tensor(u)
        self.assertIs(t.uop, self.long_init(u))
        self.assertIsNone(t.grad)
        self.assertTrue(t.is_param)
    self.assertIsNot(Tensor(cases["lowercase device"]).uop, cases["lowercase device"])   # copied to "CPU", as before

  def test_binops_same_uops_as_the_casts(self):
    from tinygrad.dtype import least_upper_dtype
    a, h, i = rand(3, 4), rand(3, 4, dtype=dtypes.half, seed=1), rand(3, 4, seed=2).cast(dtypes.int32)
    for x, y in [(a, a), (a, h), (h, h), (i, a), (i, i), (h, 2.5), (i, 3), (a > 0, a)]:
      with self.subTest(x=str(x.dtype), y=str(getattr(y, "dtype", y))):
        yt = y if isinstance(y, Tensor) else x.ufix(y)
        out = least_upper_dtype(x.dtype, yt.dtype)
        want = [t if t.dtype in dtypes.weaks else t.cast(out) for t in (x, yt)]
        got = x._broadcasted(y)
        for g, w in zip(got, want):
          if w.dtype not in dtypes.weaks: self.assertIs(g.uop, w.uop)
        self.assertEqual((x * y).dtype, got[0].dtype)

  def test_profile_events_only_with_profile(self):
    from tinygrad.helpers import Context, cpu_events
    a = rand(3)
    n = len(cpu_events)
    _ = a + 1
    self.assertEqual(len(cpu_events), n)
    with Context(PROFILE=1): _ = a * 2
    try: self.assertEqual([e.name.display_name for e in cpu_events[n:] if getattr(e, "device", None) == "USER"], ["__mul__"])
    finally: del cpu_events[n:]

if __name__ == "__main__":
  unittest.main()
