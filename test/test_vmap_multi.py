"""vmap over a batch sharded on several devices (Tensor.shard on the mapped axis): one batched kernel per device over its shard, the
result sharded on the output's batch axis. Against numpy loops over examples, on CPU:0..CPU:3 (make test-cl: CL:0..CL:3, SHARD_DEVICE)."""
import unittest
import numpy as np
from tinygrad import Tensor, Device, vmap
from vmap_oracle import VmapTestCase, rand, batched, np_loop, np_softmax, kernels, set_items, skip_without_cpu_devices, needs_grad, LINE_012, \
  shard_devices
from test_vmap import Constructs

setUpModule = skip_without_cpu_devices

devices = shard_devices

def reduce_index(x, T):
  """a stack of reduces indexed again, realized inside the scope"""
  return T.stack([x[:2].sum(), x[2:].sum()])[[1, 0, 1]] if T is np else Tensor.stack(x[:2].sum(), x[2:].sum())[[1, 0, 1]]

class TestShardedBatch(VmapTestCase):
  def sharded(self, fn, nfn=None, shape=(4,), n_dev=2, batch=6, in_axis=0, out_axes=0, weight:np.ndarray|None=None):
    x = np.moveaxis(rand(batch, *shape), 0, in_axis)
    devs = devices(n_dev)
    X = Tensor(x).shard(devs, axis=in_axis)
    if weight is None:
      got = vmap(fn, in_axes=in_axis, out_axes=out_axes)(X)
      want = np_loop(nfn or fn, x, in_axes=in_axis, out_axis=out_axes)
    else:
      got = vmap(fn, in_axes=(in_axis, None), out_axes=out_axes)(X, Tensor(weight).to(devs))
      want = np_loop(nfn or fn, x, weight, in_axes=(in_axis, None), out_axis=out_axes)
    self.assertEqual(got.device, X.device)
    self.assert_close(got.numpy(), want)

  def test_elementwise(self): self.sharded(lambda x: x*x - 2*x)
  def test_constant_output(self):
    # a constant has no device on 0.14: vmap puts it on the batch's devices, sharded on its batch axis
    for out_axes in (0, 1): self.sharded(lambda x: Tensor.ones(2)*1.5, nfn=lambda x: np.full(2, 1.5), out_axes=out_axes)
  def test_three_devices(self): self.sharded(lambda x: (x*2).sum() + x.max(), n_dev=3)
  def test_mapped_axis_not_first(self): self.sharded(lambda x: x.exp().sum(), nfn=lambda x: np.exp(x).sum(), shape=(3, 4), in_axis=1)
  def test_out_axis(self): self.sharded(lambda x: x*3, shape=(5,), out_axes=1)
  def test_where_and_cast(self):
    self.sharded(lambda x: (x > 0).where(x, -x).cast("float32"), nfn=lambda x: np.abs(x).astype(np.float32), n_dev=3)
  def test_movement(self): self.sharded(lambda x: x.reshape(2, 3).permute(1, 0).pad(((1, 0), (0, 1))).flip(0)[1:],
                                        nfn=lambda x: np.flip(np.pad(x.reshape(2, 3).T, ((1, 0), (0, 1))), 0)[1:], shape=(6,))
  def test_stack(self): self.sharded(lambda x: Tensor.stack(x, x*2), nfn=lambda x: np.stack([x, x*2]))
  def test_fancy_index(self): self.sharded(lambda x: x[[3, 0, 2]])
  def test_stack_with_closed_over(self):
    # a per-example value (on the batch's devices, sharded) stacked with a closed-over one (replicated there): vanilla 0.14's multi-device
    # STACK mishandled the replicated src (fix-stack-multi-replicated)
    c = rand(4)
    self.sharded(lambda x, w: Tensor.stack(x * 2, w), nfn=lambda x, w: np.stack([x * 2, w]), weight=c)
  def test_stack_with_closed_over_0d(self):
    self.sharded(lambda x, w: Tensor.stack(w, x.sum()) * 2, nfn=lambda x, w: np.stack([w, x.sum()]) * 2, weight=rand())
  def test_stack_with_closed_over_scalar(self):
    self.sharded(lambda x, w: Tensor.stack(w.sum(), x.max(), x.sum()) * 3, nfn=lambda x, w: np.stack([w.sum(), x.max(), x.sum()]) * 3, weight=rand(3))
  def test_setitem_on_clone(self):
    # the items set and the mask are on the batch's devices: they were made on the default device and copied there
    for idx in [(1,), (slice(0, 2),), ([3, 0],)]:
      with self.subTest(idx=repr(idx)): self.sharded(lambda x: set_items(x, idx, x.sum()))
  def test_setitem_on_clone_of_a_constant_twice(self):
    # on 0.14 a value made from a scalar argument alone is a CONST with no device, and its clone a buffer on the default device: read by
    # a clone of the first set's result it was kept as that buffer, which the sharded batch refused (the fuzzer, seed 1402)
    def f(x, w, stack):
      y = set_items(stack([w, w * 3]), (0,), x.sum())
      return set_items(y, (slice(0, 2),), x.max()) * y
    self.sharded(lambda x, w: f(x, w, lambda ts: Tensor.stack(*ts)), nfn=lambda x, w: f(x, w, np.stack), weight=rand())

  def test_replicated_weight(self): self.sharded(lambda x, w: (x @ w).relu(), nfn=lambda x, w: np.maximum(x @ w, 0), weight=rand(4, 3))
  def test_softmax(self): self.sharded(lambda x: x.softmax(), nfn=np_softmax, n_dev=3)
  def test_reduce_indexed_again(self): self.sharded(lambda x: reduce_index(x, Tensor), nfn=lambda x: reduce_index(x, np))

  def test_nested_over_sharded_outer_batch(self):
    x = rand(6, 4, 3)
    got = vmap(vmap(lambda e: e.softmax() * e.sum()))(Tensor(x).shard(devices(3), axis=0)).numpy()
    self.assert_close(got, np_softmax(x) * x.sum(-1, keepdims=True))

  def test_sharded_and_replicated_mapped_inputs(self):
    a, b = rand(6, 3), rand(6, 3)
    devs = devices(2)
    self.assert_close(vmap(lambda a, b: a*b.sum())(Tensor(a).shard(devs, axis=0), Tensor(b).to(devs)).numpy(), a*b.sum(1, keepdims=True))

  def test_batch_not_divisible_padded(self):
    # docs/vmap.md's recipe: shard needs N divisible by the device count, so the batch is padded with examples whose results are dropped
    for n_dev in (2, 3):
      x = rand(5, 4)
      X = Tensor(x).pad(((0, -5 % n_dev), (0, 0))).shard(devices(n_dev), axis=0)
      with self.subTest(n_dev=n_dev): self.assert_close(vmap(lambda e: e.softmax())(X).to("CPU")[:5].numpy(), np_loop(np_softmax, x))

  def test_like_constructors(self):
    # the example isn't sharded, the batch is: *_like of an example has the example's shape (it had the batch size's)
    self.sharded(lambda x: x * x.ones_like() * 2 + x.full_like(3.0) - x.zeros_like(), nfn=lambda x: 2 * x + 3, shape=(5,))

  def test_constant_on_the_left(self):
    # a constant made on one device, beside an example: either order (only the right worked)
    self.sharded(lambda x: Tensor.arange(5) * x + Tensor.ones(5), nfn=lambda x: np.arange(5) * x + 1, shape=(5,))
    self.sharded(lambda x: Tensor.eye(5) @ x, nfn=lambda x: x, shape=(5,))

  def test_constant_read_into_a_contiguous_value(self):
    # a constant read by an op whose result is made contiguous is still only read: a value, not a buffer on one device (it raised
    # "uses a Tensor on CPU", as an RNN's zero initial state did in a scan over a sharded batch)
    self.sharded(lambda x: (Tensor.zeros(4) + x * 2).contiguous().sum(), nfn=lambda x: (x * 2).sum())

  def test_sort_topk_triu(self):
    self.sharded(lambda x: x.sort()[0], nfn=np.sort, shape=(7,))
    self.sharded(lambda x: x.topk(2)[0], nfn=lambda x: -np.sort(-x)[:2], shape=(7,))
    self.sharded(lambda x: (x.reshape(5, 1) * x.reshape(1, 5)).triu(), nfn=lambda x: np.triu(np.outer(x, x)), shape=(5,))

  def test_out_axis_like(self):
    # the batch a VMAPOUT puts back is sharded on its out axis: zeros_like of it has its shape
    X = Tensor(rand(6, 5)).shard(devices(2), axis=0)
    y = vmap(lambda x: x * 2, out_axes=1)(X)
    self.assertEqual(y.uop.axis, 1)
    self.assertEqual(y.zeros_like().shape, (5, 6))

  def test_nested_batch_sharded_on_inner_axis(self):
    x = rand(3, 4, 5)
    self.assert_close(vmap(vmap(lambda e: e * 2 + e.sum()))(Tensor(x).shard(devices(2), axis=1)).numpy(), x * 2 + x.sum(-1, keepdims=True))

  def test_randomness(self):
    # the same draws as on one device: "different" is Tensor.rand(N, ...) row by row, "same" one draw for every example
    X = Tensor.zeros(4, 3).contiguous().shard(devices(2), axis=0)
    for mode, want in (("different", lambda: Tensor.rand(4, 3).numpy()), ("same", lambda: np.broadcast_to(Tensor.rand(3).numpy(), (4, 3)))):
      with self.subTest(mode=mode):
        Tensor.manual_seed(7)
        got = vmap(lambda e: e + Tensor.rand(3), randomness=mode)(X).numpy()
        Tensor.manual_seed(7)
        self.assert_close(got, want())

  def test_kernels_per_device(self):
    f = lambda e: (e*e).sum() * e.max()
    x = rand(6, 4)
    X1 = Tensor(x).realize()
    one = kernels(lambda: vmap(f)(X1).realize())
    for n in (2, 3):
      Xn = Tensor(x).shard(devices(n), axis=0).realize()
      self.assertEqual(kernels(lambda: vmap(f)(Xn).realize()), n*one)

  def test_scalar_per_example_kernels_per_device(self):
    # a scalar an example broadcast back stays in one kernel a device, as on one device: REDUCE's batch axes survive the per-device split
    f = lambda e: e * ((e*e).sum() + 1) ** 0.5
    x = rand(6, 4)
    X1 = Tensor(x).realize()
    self.assertEqual(one:=kernels(lambda: vmap(f)(X1).realize()), 1)
    for n in (2, 3):
      with self.subTest(devices=n):
        Xn = Tensor(x).shard(devices(n), axis=0).realize()
        y = vmap(f)(Xn)
        self.assertEqual(kernels(y.realize), n*one)
        self.assert_close(y.numpy(), x * np.sqrt((x*x).sum(1, keepdims=True) + 1))

class ConstructsSharded(Constructs):
  """test_vmap.py's Constructs (elementwise, reductions, movement, stacking, indexing) through vmap on a batch sharded on its mapped
  axis, closed-over Tensors replicated on the same devices (a Tensor on one device can't meet a sharded one, in hand-batched tinygrad
  either)"""
  n_dev = 2
  def per_example(self, tfn, shape=(6,), nfn=None, batch=6, **kw):
    x = batched(batch, shape, self.in_axis)
    X = Tensor(x).shard(devices(self.n_dev), axis=self.in_axis)
    got = vmap(tfn, in_axes=self.in_axis)(X)
    self.assertEqual(got.device, X.device)
    self.assert_close(got.numpy(), np_loop(nfn or tfn, x, in_axes=self.in_axis), **kw)
  def unbatched(self, x) -> Tensor: return Tensor(x).to(devices(self.n_dev))

class TestConstructsShardedAxis0(ConstructsSharded, VmapTestCase): in_axis = 0
class TestConstructsShardedMiddleAxis(ConstructsSharded, VmapTestCase): in_axis = 1
class TestConstructsShardedThreeDevices(ConstructsSharded, VmapTestCase): n_dev = 3

class TestShardedGradients(VmapTestCase):
  def setUp(self):
    self.devs = devices(3)
    self.x, self.w = rand(6, 4), rand(4)
    self.loss = lambda x, w: ((x*w).sum() - 1) ** 2

  def test_jacobians_of_a_sharded_argument(self):
    # a Jacobian with respect to a sharded argument is on its devices, also where it doesn't depend on the argument's values (x*2)
    from tinygrad import jacfwd, jacrev
    x = rand(6)
    for jac in (jacfwd, jacrev):
      for f, want in ((lambda x: x*2, np.eye(6)*2), (lambda x: x*x, np.diag(2*x))):
        with self.subTest(jac=jac.__name__):
          got = jac(f)(Tensor(x).shard(self.devs, axis=0))
          self.assertEqual(got.device, Tensor(x).shard(self.devs, axis=0).device)
          self.assert_close(got.numpy(), want)

  def test_per_example_gradients(self):
    g = vmap(lambda x, w: self.loss(x, w).gradient(w)[0], in_axes=(0, None))(Tensor(self.x).shard(self.devs, axis=0), Tensor(self.w).to(self.devs))
    self.assert_close(g.numpy(), 2*((self.x @ self.w) - 1)[:, None] * self.x)

  def test_backward_one_example_per_device(self):
    # a shard of one example: its RANGE has one iteration, which can't be a REDUCE source (it crashed in codegen)
    x, w = rand(3, 4), rand(4, 2)
    W = needs_grad(Tensor(w).to(self.devs))
    vmap(lambda x, w: ((x @ w) ** 2).sum(), in_axes=(0, None))(Tensor(x).shard(self.devs, axis=0), W).sum().backward()
    self.assert_close(W.grad.numpy(), 2 * x.T @ (x @ w))

  def test_pairwise_gradients_together(self):
    # an inner vmap that doesn't map the sharded batch: the sum over its RANGE of a sharded value is each device's own (it crashed when
    # both gradients were realized together, as an optimizer step does)
    a, b = rand(6), rand(3)
    A, B = needs_grad(Tensor(a).shard(self.devs, axis=0)), needs_grad(Tensor(b).to(self.devs))
    ga, gb = vmap(vmap(lambda a, b: (a * b).sin(), in_axes=(None, 0)), in_axes=(0, None))(A, B).sum().gradient(A, B)
    Tensor.realize(ga, gb)
    self.assert_close(ga.numpy(), (np.cos(a[:, None] * b[None]) * b[None]).sum(1))
    self.assert_close(gb.numpy(), (np.cos(a[:, None] * b[None]) * a[:, None]).sum(0))

  def test_backward_through_inner_broadcast(self):
    X = needs_grad(Tensor(self.x[:, 0]).shard(self.devs, axis=0))
    vmap(vmap(lambda e: e.sin(), in_axes=None, axis_size=2))(X).sum().backward()
    self.assert_close(X.grad.numpy(), 2 * np.cos(self.x[:, 0]))

  def test_gradient_meeting_inside_inner_vmap_raises(self):
    # a's gradient from the passthrough output and from a*b meet inside the inner scope: their sum over the sharded batch would need an
    # allreduce inside a loop. A clear error (it failed codegen's verification)
    A, B = needs_grad(Tensor(self.w[:3]).to(self.devs)), needs_grad(Tensor(b:=rand(6, 3)).shard(self.devs, axis=0))
    o = vmap(vmap(lambda a, b: (a * b, a)), in_axes=(None, 0), out_axes=(0, None))(A, B)
    if LINE_012:
      with self.assertRaisesRegex(NotImplementedError, "inside another vmap scope"): (o[0].sum() + o[1].sum()).gradient(A)[0].realize()
    else: self.assert_close((o[0].sum() + o[1].sum()).gradient(A)[0].numpy(), b.sum(0) + 1)   # 0.14: upstream's allreduce

  def test_gradient_through_batch_of_one_raises(self):
    # not sharded yet: a clear error (it gave a wrong gradient or crashed in the scheduler)
    A, B = needs_grad(Tensor(self.x[:, 0]).shard(self.devs, axis=0)), needs_grad(Tensor(self.w).to(self.devs))
    out = vmap(vmap(lambda a, b: a * b, in_axes=None, axis_size=1), in_axes=(0, None))(A, B)
    if LINE_012:
      with self.assertRaisesRegex(NotImplementedError, "a gradient through a vmap over one example"): out.sum().gradient(A, B)
    else:   # 0.14: a plain batched graph
      ga, gb = out.sum().gradient(A, B)
      self.assert_close(ga.numpy(), np.full(len(self.x), self.w.sum()))
      self.assert_close(gb.numpy(), np.full(len(self.w), self.x[:, 0].sum()))

  def test_backward_sums_replicated_weight(self):
    X = needs_grad(Tensor(self.x).shard(self.devs, axis=0))
    W = needs_grad(Tensor(self.w).to(self.devs))
    vmap(self.loss, in_axes=(0, None))(X, W).sum().backward()
    r = 2*((self.x @ self.w) - 1)
    self.assert_close(W.grad.numpy(), (r[:, None] * self.x).sum(0))
    self.assert_close(X.grad.numpy(), r[:, None] * self.w)

class TestShardedErrors(VmapTestCase):
  def test_unsharded_input_mapped_with_sharded_batch(self):
    x = Tensor(rand(4, 2)).shard(devices(2), axis=0)
    with self.assertRaisesRegex(RuntimeError, f"an input mapped with it is on {Device.DEFAULT}"): vmap(lambda a, b: a*b)(x, Tensor(rand(4, 2))).realize()

  def test_single_device_tensor_with_sharded_batch(self):
    # a closed-over Tensor (or one made from data inside fn) on one device can't meet the sharded batch: named before scheduling
    x, w = Tensor(rand(4, 2)).shard(devices(2), axis=0), Tensor(rand(2))
    with self.assertRaisesRegex(ValueError, rf"uses a Tensor on {Device.DEFAULT} of shape \(2,\).*\.to\("): vmap(lambda a: a*w)(x)
    with self.assertRaisesRegex(ValueError, f"uses a Tensor on {Device.DEFAULT}"): vmap(lambda a: a*Tensor([1.0, 2.0]))(x)
    self.assert_close(vmap(lambda a: a*w.to(devices(2)) + Tensor.arange(2))(x).numpy(), x.numpy()*w.numpy() + np.arange(2))

  def test_reduce_over_sharded_axis_inside_scope(self):
    x = Tensor(xn:=rand(6, 4)).shard(devices(2), axis=0)
    if LINE_012:
      with self.assertRaisesRegex(NotImplementedError, "reduce over a sharded axis inside a vmap scope"): vmap(lambda e: e.sum(), in_axes=1)(x).realize()
    else: self.assert_close(vmap(lambda e: e.sum(), in_axes=1)(x).numpy(), xn.sum(0))   # 0.14: upstream's allreduce

  def test_chunk_size(self):
    x = Tensor(rand(8, 3)).shard(devices(2), axis=0)
    with self.assertRaisesRegex(NotImplementedError, "chunk_size with a batch sharded on"): vmap(lambda e: e * 2, chunk_size=3)(x)
    self.assert_close(vmap(lambda e: e * 2, chunk_size=8)(x).numpy(), x.numpy() * 2)

  def test_mapped_inputs_on_different_devices(self):
    a, b = Tensor(rand(4, 2)).shard(devices(2), axis=0), Tensor(rand(4, 2)).shard(devices(4)[2:], axis=0)
    with self.assertRaisesRegex(RuntimeError, "sharded on different devices"): vmap(lambda a, b: a*b)(a, b)

  def test_stack_of_inputs_sharded_on_different_axes(self):
    # a stack of a value of each (one sharded on the batch, one on its other axis): 0.14 stacked the wrong shards until
    # fix-stack-multi-replicated (the sum over the sharded axis is replicated)
    x, y = Tensor(a:=rand(4, 2)).shard(devices(2), axis=0), Tensor(b:=rand(4, 2)).shard(devices(2), axis=1)
    f = vmap(lambda p, q: Tensor.stack(p.sum(), q.sum()))
    if LINE_012:
      with self.assertRaisesRegex(NotImplementedError, "a reduce over a sharded axis inside a vmap scope"): f(x, y).realize()
    else: self.assert_close(f(x, y).numpy(), np.stack([a.sum(1), b.sum(1)], 1))

  def test_result_sharded_on_two_axes(self):
    x, y = Tensor(a:=rand(4, 2)).shard(devices(2), axis=0), Tensor(b:=rand(4, 2)).shard(devices(2), axis=1)
    if LINE_012:
      with self.assertRaisesRegex(NotImplementedError, "sharded on another axis too"): vmap(lambda a, b: a*b)(x, y).realize()
    else: self.assert_close(vmap(lambda a, b: a*b)(x, y).numpy(), a * b)   # 0.14: upstream reshards

if __name__ == "__main__":
  unittest.main()
