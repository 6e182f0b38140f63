"""vmap scopes whose inside needs realizing: reduces and multi-consumer nodes indexed and re-stacked, nested, and in OUTER scopes.
Every result is compared with a numpy loop over examples on random float64 data; the constants the cases multiply by are random vectors,
not one-hot ones."""
import unittest, unittest.mock
from types import SimpleNamespace
import numpy as np
from tinygrad import Tensor, Device, vmap
from tinygrad.uop.ops import AxisType
from tinygrad.fork_line import LINE_012
from vmap_oracle import VmapTestCase, Scheduled, rand, nested_batch, nest, np_nest, kernels, np_softmax, realize_with_buffers

# a case is f(x, L): the same code runs on one example as a Tensor (L=TG) and, for the oracle, as an ndarray (L=NP)
TG = SimpleNamespace(stack=Tensor.stack, c=Tensor, expand=lambda t, *s: t.expand(*s), contiguous=Tensor.contiguous)
NP = SimpleNamespace(stack=lambda *a: np.stack(a), c=lambda a: a, expand=lambda t, *s: np.broadcast_to(t, s), contiguous=lambda a: a)
V, M, TAN, W, W2 = rand(3, 3), rand(2, 3, 3), rand(3, 3), rand(4, 3), rand(4, 3)

def pick(flat, idxs, L): return L.stack(*[flat[i] for i in idxs])
def stacked3(x, L): return L.stack(*[x*L.c(v) for v in V]).flatten()
def jvps(x, L): return L.stack(*[L.c(W) @ (2*x*L.c(t)) for t in TAN]).flatten()   # d/dx W@(x*x) along each tangent: each a reduce
def jvps_no_reduce(x, L): return L.stack(*[3*x*x*L.c(t) for t in TAN]).flatten()  # d/dx x**3 along each tangent: diagonal
def reduce_index(x, L): return L.stack(x[:2].sum(), x[2:].sum())[[0, 1]]
def realized_index(x, L): return L.contiguous(L.stack(x[:2].sum(), x[2:].sum()))[[1, 0, 1]]   # the stack realized inside the scope
def spjac(x, L): return pick(jvps(x, L), (0, 5, 10, 3, 7, 11), L)   # a sparse Jacobian: entries picked from stacked JVPs
# one scalar an example broadcast back over it: one kernel for one example, and over a batch
def normalize(x, L): return x / x.sum()
def scale_by_norm(x, L): return x * ((x*x).sum() + 1) ** 0.5

def np_log_softmax(x):
  m = x.max(-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))

class NestedScopesCase(VmapTestCase):
  axes, sizes, axis_type = (0,), (4,), AxisType.LOOP
  def vm(self, f, shape:tuple[int, ...], nf=None):
    """f in nested scopes over self.axes (one scope by default) equals the nested numpy loop of nf (default: f on ndarrays)"""
    x = nested_batch(shape, self.axes, self.sizes)
    got = nest(lambda e: f(e, TG), self.axes, self.axis_type)(Tensor(x)).numpy()
    self.assert_close(got, np_nest(nf or (lambda e: f(e, NP)), self.axes)(x))

  def launches(self, f, shape:tuple[int, ...], sizes:tuple[int, ...], axes:tuple[int, ...]=(0,), nf=None, how=lambda y: y.realize(),
               axis_type=AxisType.LOOP) -> int:
    """the kernels run by how(y), y: f in nested scopes over `axes` of a realized batch, after checking how(y) against the oracle"""
    x = nested_batch(shape, axes, sizes)
    y, out = nest(lambda e: f(e, TG), axes, axis_type)(Tensor(x).realize()), []
    cnt = kernels(lambda: out.append(how(y)))
    self.assert_close(out[0] if isinstance(out[0], np.ndarray) else out[0].numpy(), np_nest(nf or (lambda e: f(e, NP)), axes)(x))
    return cnt

  def single(self, f, shape:tuple[int, ...]) -> int:
    """the kernels run by f on one realized example"""
    x1 = Tensor(rand(*shape)).realize()
    return kernels(lambda: f(x1, TG).realize())

class StackFlattenPick:
  """3+ stacked tensors (or 2 stacked reduces) flattened, then several scalars indexed out and re-stacked: the flattened stack is
  realized inside the scope, and when the scope's LOOP RANGE stayed open at its STORE no kernel was made of it
  ("input to kernel must be AFTER or BUFFER, not Ops.INDEX")"""
  def test_3_stacked_multi_index(self): self.vm(lambda x, L: pick(stacked3(x, L), (0, 4, 8, 3), L), (3,))
  def test_3_stacked_2_index(self): self.vm(lambda x, L: pick(L.stack(x*L.c(V[0]), x+L.c(V[1]), x*x-L.c(V[2])).flatten(), (2, 6), L), (3,))
  def test_reduce_expand_multi_index(self):
    self.vm(lambda x, L: pick(L.expand((x*L.c(V[0])).sum().reshape(1), 3) * x + L.c(V[1]), (0, 2, 1), L), (3,))
  def test_2_reduces_stacked_multi_index(self): self.vm(lambda x, L: pick(L.stack(x @ L.c(M[0]), (x*x) @ L.c(M[1])).flatten(), (0, 4, 2), L), (3,))
  def test_spjacobian_unroll(self): self.vm(spjac, (3,))
  def test_spjacobian_unroll_no_reduce(self): self.vm(lambda x, L: pick(jvps_no_reduce(x, L), (0, 4, 8, 2), L), (3,))
  def test_minimal_3_stack_2_index(self): self.vm(lambda x, L: pick(stacked3(x, L), (0, 1), L), (3,))

class MultiConsumerNodes:
  """an inner node with several consumers (a stack of reduces indexed again, a matmul gathered from, a value used twice, softmax's
  input) gets realized inside the scope; its buffer must hold every example, else every example gets the last one's values"""
  def test_reduce_index(self): self.vm(reduce_index, (4,))
  def test_no_reduce_index(self): self.vm(lambda x, L: L.stack(x[:2]*2, x[2:]-x[:2])[[1, 0]], (4,))
  def test_matmul_index(self): self.vm(lambda x, L: (x @ L.c(W2))[[2, 0, 2]], (4,))
  def test_fancy_index_list(self): self.vm(lambda x, L: L.stack(x[:2].sum(), x[2:].sum(), x.max())[[2, 0, 1, 0]], (4,))
  def test_fancy_index_tensor(self):
    self.vm(lambda x, L: L.stack(x[:2].sum(), x[2:].sum(), x.max())[Tensor([2, 0, 1, 0])], (4,),
            nf=lambda x: np.stack([x[:2].sum(), x[2:].sum(), x.max()])[[2, 0, 1, 0]])
  def test_multiple_consumers(self): self.vm(lambda x, L: (y:=x*2).sum()*y + y[[1, 0, 2]].sum(), (3,))
  def test_softmax(self): self.vm(lambda x, L: x.softmax(), (5,), nf=np_softmax)
  def test_scalar_broadcast_back(self): self.vm(normalize, (5,))
  def test_scalar_chain_broadcast_back(self): self.vm(scale_by_norm, (5,))
  def test_log_softmax(self): self.vm(lambda x, L: x.log_softmax(), (2, 5), nf=np_log_softmax)

class TestStackFlattenPick(StackFlattenPick, NestedScopesCase): pass
class TestMultiConsumerNodes(MultiConsumerNodes, NestedScopesCase): pass

class TestNestedRealizeDepth2(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes = (1, 0), (3, 4)
class TestNestedRealizeDepth3(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes = (2, 0, 1), (2, 3, 4)
class TestNestedRealizeDepth5(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes = (1, 0, 2, 0, 1), (2, 3, 2, 2, 3)

@unittest.skipUnless(Device.DEFAULT == "CPU", "counts are for the CPU backend")
class TestLaunchCounts(Scheduled, StackFlattenPick, NestedScopesCase):
  """vmap runs the batch as a loop inside the kernels: the launch count doesn't depend on the batch size"""
  def vm(self, f, shape, nf=None): self.assertEqual(self.launches(f, shape, (10,), nf=nf), self.launches(f, shape, (1000,), nf=nf))

  # the sparse-Jacobian pattern (spjac), the case vmap was built for, stands for the others
  def test_same_count_as_single_example(self): self.assertEqual(self.launches(spjac, (3,), (10,)), self.single(spjac, (3,)))
  def test_numpy_after_realize_no_extra_launch(self):
    self.assertLessEqual(self.launches(spjac, (3,), (10,), how=lambda y: y.realize().numpy()), self.single(spjac, (3,)))
  def test_numpy_without_realize_no_extra_launch(self):
    self.assertLessEqual(self.launches(spjac, (3,), (10,), how=lambda y: y.numpy()), self.single(spjac, (3,)))

  def test_scalar_per_example_same_count_as_single_example(self):
    self.assertEqual(self.launches(normalize, (5,), (10,)), self.single(normalize, (5,)))
  def test_scalar_chain_same_count_as_single_example(self):
    self.assertEqual(self.launches(scale_by_norm, (5,), (10,)), self.single(scale_by_norm, (5,)))
  def test_nested_scalar_per_example_same_count_as_single_example(self):
    self.assertEqual(self.launches(normalize, (5,), (3, 10), axes=(1, 0)), self.single(normalize, (5,)))
  def test_scalar_over_many_elements_realized_as_hand_batched(self):
    # on a GPU one example's kernel recomputes its scalar for every element it is broadcast to: 300 sums of 300 elements an example
    # are past VMAP_FUSED_WORK (4096), so the sum is realized
    x = Tensor(rand(10, 300)).realize()
    self.assertEqual(self.launches(normalize, (300,), (10,)), kernels(lambda: (x / x.sum(1, keepdim=True)).realize()))

  # nested: a stack of two reduces indexed again (reduce_index) in two scopes
  def test_nested_same_count_as_single_example(self):
    self.assertEqual(self.launches(reduce_index, (4,), (3, 10), axes=(1, 0)), self.single(reduce_index, (4,)))
  def test_nested_numpy_after_realize_no_extra_launch(self):
    self.assertLessEqual(self.launches(reduce_index, (4,), (3, 10), axes=(1, 0), how=lambda y: y.realize().numpy()), self.single(reduce_index, (4,)))
  def test_nested_numpy_without_realize_no_extra_launch(self):
    # .numpy() straight on the outer VMAPOUT, no realize first: no copy kernel (there was one once)
    self.assertLessEqual(self.launches(reduce_index, (4,), (3, 10), axes=(1, 0), how=lambda y: y.numpy()), self.single(reduce_index, (4,)))

  def test_realize_again_schedules_nothing(self):
    # a realized result is a buffer (or a view of one): nothing to compute
    schedule = "schedule_with_vars" if LINE_012 else "linear_with_vars"
    y = vmap(lambda e: spjac(e, TG))(Tensor(x:=rand(10, 3)).realize()).realize()
    with unittest.mock.patch.object(Tensor, schedule, side_effect=AssertionError(f"{schedule} called")):
      self.assertEqual(kernels(y.realize), 0)
    self.assert_close(y.numpy(), np.stack([spjac(e, NP) for e in x]))

  def test_permuted_output_is_written_in_its_order(self):
    # a per-example output that is a permute of elementwise ops (a gradient through a matmul's transposed weight) is computed in the
    # output's order, as the hand-batched expression is: realized, it is its buffer, not a transposed one read through a view
    x, w = rand(6, 4), rand(6, 3)
    y = vmap(lambda x, w: (x.reshape(4, 1) * w.reshape(1, 3).exp()).T)(Tensor(x), Tensor(w)).realize()
    self.assertEqual(kernels(lambda: y.numpy()), 0)
    self.assert_close(y.numpy(), np.stack([(a.reshape(4, 1) * np.exp(b.reshape(1, 3))).T for a, b in zip(x, w)]))

  # vmap never launches more than the same batch written by hand (on 0.14 it is that code: the same kernels)
  def test_no_more_launches_than_hand_batched(self):
    x = Tensor(rand(10, 4)).realize()
    for name, how in [("realize", lambda y: y.realize()), ("realize numpy", lambda y: y.realize().numpy()), ("numpy", lambda y: y.numpy())]:
      with self.subTest(how=name):
        hand = kernels(lambda: how(Tensor.stack(x[:, :2].sum(1), x[:, 2:].sum(1), dim=1)[:, [0, 1]]))
        self.assertLessEqual(self.launches(reduce_index, (4,), (10,), how=how), hand)

@unittest.skipUnless(Device.DEFAULT == "CPU", "counts are for the CPU backend")
class TestStackRealizedInOrder(VmapTestCase):
  """a hand-batched stack (or cat) along a later axis, realized, is its own buffer: .numpy() after .realize() runs no kernel, as for the
  same stack through vmap (0.14's stack is a STACK permuted to its axis; its base's order is the stacked axis first)"""
  def realized_then_read(self, build, want):
    y = build().realize()
    self.assertEqual(kernels(lambda: y.numpy()), 0)
    self.assert_close(y.numpy(), want)

  def test_stack_along_axis_1(self):
    x = rand(10, 3)
    self.realized_then_read(lambda: Tensor.stack(Tensor(x)[:, 0] * 2, Tensor(x)[:, 1] + Tensor(x)[:, 2], dim=1),
                            np.stack([x[:, 0] * 2, x[:, 1] + x[:, 2]], axis=1))
  def test_stack_along_last_axis_of_3(self):
    x = rand(4, 5, 3)
    self.realized_then_read(lambda: Tensor.stack(Tensor(x).sum(2), Tensor(x).max(2), dim=2), np.stack([x.sum(2), x.max(2)], axis=2))
  def test_cat_along_axis_1(self):
    x = rand(6, 4)
    self.realized_then_read(lambda: (Tensor(x) * 2).cat(Tensor(x).exp(), dim=1), np.concatenate([x * 2, np.exp(x)], axis=1))

class TestIntermediateBuffer(NestedScopesCase):
  """a value realized inside a scope (realized_index's stack of two reduces, 2 per example) holds every example, not 2 slots all the
  examples write to"""
  def intermediate_sizes(self, sizes:tuple[int, ...], axes:tuple[int, ...]) -> list[int]:
    x = nested_batch((4,), axes, sizes)
    X = Tensor(x).realize()
    y = nest(lambda e: realized_index(e, TG), axes)(X)
    bufs = realize_with_buffers(y)
    ends = (X.uop.base.buffer, y.uop.base.buffer)
    ret = [b.size for b in bufs if not any(b is e for e in ends)]
    self.assert_close(y.numpy(), np_nest(lambda e: realized_index(e, NP), axes)(x))
    return ret

  def test_buffer_holds_batch(self): self.assertIn(5*2, self.intermediate_sizes((5,), (0,)))
  def test_nested_buffer_holds_both_batches(self): self.assertIn(3*5*2, self.intermediate_sizes((3, 5), (1, 0)))

class TestScalarPerExampleOutside(VmapTestCase):
  """a scalar an example that stays in its consumer's kernel (x / x.sum()), with the batch where the loops around it would recompute it:
  the batch axis last, the batch summed or expanded after the vmap"""
  def setUp(self): self.x = rand(6, 5)
  def test_batch_axis_last(self):
    self.assert_close(vmap(lambda e: normalize(e, TG), out_axes=1)(Tensor(self.x)).numpy(), (self.x / self.x.sum(1, keepdims=True)).T)
  def test_summed_over_the_batch(self):
    self.assert_close(vmap(lambda e: normalize(e, TG))(Tensor(self.x)).sum(0).numpy(), (self.x / self.x.sum(1, keepdims=True)).sum(0))
  def test_expanded_in_front(self):
    got = vmap(lambda e: normalize(e, TG))(Tensor(self.x))[None].expand(3, 6, 5) * Tensor(W[:3, :1, None])
    self.assert_close(got.numpy(), (self.x / self.x.sum(1, keepdims=True))[None] * W[:3, :1, None])

class TestOuter(StackFlattenPick, MultiConsumerNodes, NestedScopesCase):
  """AxisType.OUTER runs the scope once per index, one after the other"""
  axis_type = AxisType.OUTER if LINE_012 else None   # None on 0.14 (no OUTER): these skip there, docs/internals.md's table

  @unittest.skipUnless(Device.DEFAULT == "CPU", "counts are for the CPU backend")
  def test_launches_grow_with_batch(self):
    f = lambda x, L: pick(stacked3(x, L), (0, 4, 8, 3), L)
    self.assertNotEqual(self.launches(f, (3,), (3,), axis_type=AxisType.OUTER), self.launches(f, (3,), (6,), axis_type=AxisType.OUTER))

class TestOneAtATime(StackFlattenPick, MultiConsumerNodes, NestedScopesCase):
  """the same cases one example at a time in a depth 2 nest, vmap's chunk_size=1 at both depths, on both lines: scopes per example on
  0.14 (its counterpart of the OUTER scopes here, which 0.14 removed), OUTER scopes on 0.12"""
  axes, sizes = (1, 0), (3, 2)
  def vm(self, f, shape:tuple[int, ...], nf=None):
    x, fn = nested_batch(shape, self.axes, self.sizes), lambda e: f(e, TG)
    for a in reversed(self.axes): fn = vmap(fn, in_axes=a, chunk_size=1)
    self.assert_close(fn(Tensor(x)).numpy(), np_nest(nf or (lambda e: f(e, NP)), self.axes)(x))

# one OUTER scope in a depth 2 nest (OUTER scopes nested in OUTER scopes are in test_vmap_outer.py)
class TestOuterAroundLoop(StackFlattenPick, MultiConsumerNodes, NestedScopesCase):
  axes, sizes, axis_type = (1, 0), (3, 2), (AxisType.OUTER if LINE_012 else None, AxisType.LOOP)
class TestLoopAroundOuter(StackFlattenPick, MultiConsumerNodes, NestedScopesCase):
  axes, sizes, axis_type = (1, 0), (3, 2), (AxisType.LOOP, AxisType.OUTER if LINE_012 else None)

if __name__ == "__main__":
  unittest.main()
