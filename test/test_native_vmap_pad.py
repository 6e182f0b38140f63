"""pad+reduce vmap (upstream tinygrad's idiom, its test/test_outerworld.py TestVmap) against native vmap and a numpy loop.

`pad_vmap` is a test-only second implementation of vmap made of upstream ops alone: one example is the input shrunk to (r, r+1) on its
batch axis with a RANGE r, fn runs on it, the result gets a size-1 batch axis, is padded to the batch size with r as the pad offset and
summed over r: only the example's own slot is nonzero. With AxisType.LOOP the RANGE is a loop inside the kernel, with AxisType.OUTER the
kernels run once per example. Where it works, pad+reduce, native vmap and the numpy loop agree (TestNative, TestPadLoop, TestPadOuter,
TestPadOuterInOuter).

Where they part ways (CPU, float64; N examples of D numbers; TestPadLimits and TestPadCost pin each row):

| construct | pad+reduce LOOP | pad+reduce OUTER | native |
| --- | --- | --- | --- |
| elementwise, reductions, matmul with unbatched or per-example weights, multi-input, broadcast, nesting depth 2 to 5 | right | right | right |
| softmax | RuntimeError (1) | right, 3N+1 kernels | right, 3 kernels |
| per-example MLP relu(x@W1)@W2, W1 unbatched or per-example | RuntimeError (1) | right | right |
| stack then index (stack(x*c0, x*c1, x*c2).flatten(), 2 scalars re-stacked; c0..c2 three constants) | RuntimeError (1) | right | right |
| a reduce broadcast back, x + x.sum() (x - x.mean() works), also at depth 4 | RuntimeError (1) | right | right |
| loops of the kernel (NOOPT) of a per-example sum | N x N x D: each output loops over all N examples | N+1 kernels, N x D each | N x D, 1 kernel |
| the same nested 2 deep, batch N1 x N2 | N1 x N2 x N1 x N2 x D | - | N2 x N1 x D |
| an OUTER scope nested in an OUTER scope | - | right with the fork's schedule (upstream 0.12.0: silently wrong) | - |
| an OUTER scope nested in a LOOP scope | RuntimeError (2) | - | right (the bracket) |

(1) `input to kernel must be AFTER or BUFFER, not Ops.INDEX`: what fn realizes inside the scope leaves the LOOP RANGE open at its STORE,
the failure native vmap had on the stack-then-index row before its fix; upstream 0.12.0 alone fails the same way. (2) the same, `not
Ops.STORE`. pad+reduce at nesting depth 4+, thought to have known issues: with LOOP scopes, depth 4 and 5 give the right answer for
what works at depth 1, and what fails at depth 1 still fails. The cost of pad+reduce is O(N^2) in the batch size, native vmap's O(N).
"""
import re, functools, unittest
import numpy as np
from tinygrad import Tensor, Context, Device, vmap
from tinygrad.uop.ops import Ops, AxisType
from tinygrad.vmap import vmap_range
from vmap_oracle import VmapTestCase, rand, batched, nested_batch, np_loop, nest, np_nest, kernels, np_softmax

# native vmap, the implementation under test (before `tinygrad.vmap.vmap` it was the bracket: bracket(fn, *xs, in_axes=, out_axis=))
def native_vmap(fn, in_axes=0, out_axes=0): return vmap(fn, in_axes=in_axes, out_axes=out_axes)

def pad_vmap(fn, in_axes=0, out_axes=0, axis_type=AxisType.LOOP):
  """upstream's pad+reduce vmap: fn on the slice (r, r+1) of the batch axis, padded back to the batch at offset r, summed over r.
  Of the fork it only takes vmap_range, a RANGE with an id of its own"""
  def run(*xs:Tensor) -> Tensor:
    axes = [a if a is None else a % x.ndim for x, a in zip(xs, in_axes if isinstance(in_axes, tuple) else (in_axes,)*len(xs))]
    n = next(x.shape[a] for x, a in zip(xs, axes) if a is not None)
    r = vmap_range(n, axis_type)
    def one(x:Tensor, a:int) -> Tensor:
      return x.shrink(tuple((r, r+1) if i == a else None for i in range(x.ndim))).reshape(x.shape[:a] + x.shape[a+1:])
    y = fn(*[x if a is None else one(x, a) for x, a in zip(xs, axes)])
    y = y.reshape(y.shape[:out_axes] + (1,) + y.shape[out_axes:])
    y = y.pad(tuple((r, n-1-r) if i == out_axes else None for i in range(y.ndim)))
    return Tensor(y.uop.reduce(r, arg=Ops.ADD))
  return run

pad_loop = functools.partial(pad_vmap, axis_type=AxisType.LOOP)
pad_outer = functools.partial(pad_vmap, axis_type=AxisType.OUTER)

def nested(vms, fn, axes:tuple[int, ...]):
  """fn (of one input) in len(axes) nested vmaps, the one at depth d made by vms[d] and mapping axis axes[d] of what depth d sees"""
  for vm, a in zip(reversed(vms), reversed(axes)): fn = vm(fn, a)
  return fn

def loop_bounds(t:Tensor) -> list[list[int]]:
  """the bounds of the for loops of each kernel that computes t, unoptimized (NOOPT) so the loops are the kernel's ranges"""
  with Context(NOOPT=1):
    return [[int(b) for b in re.findall(r"for \(int \w+ = 0; \w+ < (\d+);", ei.lower().prg.p.src)] for ei in t.schedule()]

M, W1, W2, V = rand(4, 3), rand(4, 6), rand(6, 3), rand(3, 4)

class AgreeCase(VmapTestCase):
  """the vmap of each subclass equals the numpy loop over examples: `outer` makes the outermost vmap, `inner` the ones nested in it"""
  outer = inner = staticmethod(native_vmap)
  def agree(self, fn, *xs:np.ndarray, nfn=None, in_axes=0, out_axes=0):
    got = self.outer(fn, in_axes, out_axes)(*[Tensor(x) for x in xs]).numpy()
    self.assert_close(got, np_loop(nfn or fn, *xs, in_axes=in_axes, out_axis=out_axes))

  def agree_nested(self, fn, shape:tuple[int, ...], axes:tuple[int, ...], sizes:tuple[int, ...], nfn=None):
    x = nested_batch(shape, axes, sizes)
    got = nested((self.outer,) + (self.inner,)*(len(axes)-1), fn, axes)(Tensor(x)).numpy()
    self.assert_close(got, np_nest(nfn or fn, axes)(x))

class Agree:
  """constructs pad+reduce handles, one scope"""

  # axes
  def test_elementwise(self): self.agree(lambda x: x*x - 2*x + 1, rand(5, 3))
  def test_in_axis_1(self): self.agree(lambda x: x.exp(), batched(5, (2, 3), 1), nfn=np.exp, in_axes=1)
  def test_in_axis_negative(self): self.agree(lambda x: x*3, rand(2, 3, 5), in_axes=-1)
  def test_out_axis_1(self): self.agree(lambda x: x*2 + 1, rand(5, 3, 2), out_axes=1)

  # multi-input
  def test_two_inputs_same_axis(self): self.agree(lambda a, b: a*b - a, rand(5, 3), rand(5, 3))
  def test_two_inputs_different_axes(self): self.agree(lambda a, b: a @ b, rand(5, 3), rand(3, 5), in_axes=(0, 1))
  def test_mapped_and_unmapped(self): self.agree(lambda x, w: (x*w).sum(), rand(6, 3), rand(3), in_axes=(0, None))
  def test_three_inputs_mixed(self): self.agree(lambda a, w, b: a @ w + b, rand(3, 5), rand(3, 2), rand(5, 2), in_axes=(1, None, 0))
  def test_two_mapped_two_unmapped(self):
    self.agree(lambda a, w, b, c: a @ w + b*c, rand(4, 3), rand(3, 2), rand(2), rand(2, 4), in_axes=(0, None, None, 1))

  # broadcast
  def test_broadcast_example_against_unmapped_matrix(self):
    self.agree(lambda x, w: x.reshape(3, 1) * w, rand(5, 3), rand(3, 4), in_axes=(0, None))
  def test_broadcast_size1_axes(self): self.agree(lambda x, w: x + w, rand(5, 4, 1), rand(1, 3), in_axes=(0, None))
  def test_broadcast_unmapped_over_mapped(self): self.agree(lambda w, x: w - x, rand(2, 1), rand(3, 5), in_axes=(None, 1))
  def test_output_independent_of_batch(self): self.agree(lambda x, w: w*2, rand(4, 3), rand(3), in_axes=(0, None))

  # reductions
  def test_sum(self): self.agree(lambda x: x.sum(), rand(5, 6))
  def test_sum_axis(self): self.agree(lambda x: x.sum(axis=0), rand(5, 3, 4))
  def test_max(self): self.agree(lambda x: x.max(), rand(5, 6))
  def test_mean(self): self.agree(lambda x: x.mean(), rand(5, 6))
  def test_center(self): self.agree(lambda x: x - x.mean(), rand(5, 6))
  def test_variance(self): self.agree(lambda x: ((x - x.mean())**2).mean(), rand(5, 6))
  def test_reduce_times_element(self): self.agree(lambda x: x.sum() * x[0], rand(5, 6))
  def test_dot_self(self): self.agree(lambda x: x @ x, rand(5, 6))

  # matmul with an unbatched weight
  def test_matmul_row_weight(self): self.agree(lambda x, w: x @ w, rand(5, 4), rand(4, 3), in_axes=(0, None))
  def test_matmul_2d_weight(self): self.agree(lambda x, w: x @ w, batched(5, (3, 4), 1), rand(4, 2), in_axes=(1, None))
  def test_matmul_weight_left(self): self.agree(lambda w, x: w @ x, rand(2, 3), rand(5, 3), in_axes=(None, 0))
  def test_matmul_per_example_weight(self): self.agree(lambda x, w: x @ w, rand(5, 4), rand(5, 4, 2))
  def test_matmul_weight_bias(self): self.agree(lambda x, w, b: x @ w + b, rand(5, 4), rand(4, 3), rand(3), in_axes=(0, None, None))

class AgreeNested:
  """constructs pad+reduce handles, nested scopes with different in_axes"""
  def test_depth2_elementwise(self): self.agree_nested(lambda e: e*2 + 1, (4,), (0, 1), (3, 2))
  def test_depth2_sum(self): self.agree_nested(lambda e: e.sum(), (4,), (1, 0), (3, 2))
  def test_depth2_matmul_unbatched(self): self.agree_nested(lambda e: e @ Tensor(M), (4,), (1, 0), (2, 3), nfn=lambda e: e @ M)
  def test_depth3_max(self): self.agree_nested(lambda e: e.max(), (4,), (2, 0, 1), (2, 3, 2))
  def test_depth3_matmul_unbatched(self): self.agree_nested(lambda e: e @ Tensor(M), (4,), (0, 0, 0), (2, 2, 3), nfn=lambda e: e @ M)
  def test_depth3_movement(self): self.agree_nested(lambda e: e.flip(0)[1:], (4,), (1, 0, 1), (3, 2, 2), nfn=lambda e: np.flip(e, 0)[1:])
  def test_depth4_sum(self): self.agree_nested(lambda e: e.sum(), (4,), (1, 0, 2, 0), (2, 3, 2, 2))
  def test_depth5_fancy_index(self): self.agree_nested(lambda e: e[[2, 0, 3]], (4,), (1, 0, 2, 0, 1), (2, 3, 2, 2, 2))

class TestNative(Agree, AgreeNested, AgreeCase): pass
class TestPadLoop(Agree, AgreeNested, AgreeCase): outer = inner = staticmethod(pad_loop)
class TestPadOuter(Agree, AgreeNested, AgreeCase): outer, inner = staticmethod(pad_outer), staticmethod(pad_loop)
# upstream 0.12.0's schedule runs an OUTER scope nested in an OUTER scope wrong, silently: the fork's schedule nests the OUTER loops
class TestPadOuterInOuter(AgreeNested, AgreeCase): outer = inner = staticmethod(pad_outer)

LOOP_OPEN_AT_INDEX = r"^input to kernel must be AFTER or BUFFER, not Ops\.INDEX$"

def mlp(x, w1, w2): return (x @ w1).relu() @ w2
def np_mlp(x, w1, w2): return np.maximum(x @ w1, 0) @ w2
# three stacked tensors, each times a constant of its own, flattened, two scalars indexed out and re-stacked
def stack_index(x): return (lambda flat: Tensor.stack(flat[0], flat[5]))(Tensor.stack(*[x*Tensor(v) for v in V]).flatten())
def np_stack_index(x): return np.stack([x*v for v in V]).flatten()[[0, 5]]

class TestPadLimits(VmapTestCase):
  """constructs native vmap gets right and pad+reduce LOOP can't schedule; most of them pad+reduce OUTER gets right"""
  def native_right(self, fn, *xs:np.ndarray, nfn=None, in_axes=0) -> tuple[list[Tensor], np.ndarray]:
    """checks native vmap of fn against the numpy loop, returns the inputs for pad+reduce and the right answer"""
    want = np_loop(nfn or fn, *xs, in_axes=in_axes)
    self.assert_close(native_vmap(fn, in_axes)(*[Tensor(x) for x in xs]).numpy(), want)
    return [Tensor(x) for x in xs], want

  def loop_raises(self, fn, *xs:np.ndarray, nfn=None, in_axes=0):
    txs, _ = self.native_right(fn, *xs, nfn=nfn, in_axes=in_axes)
    with self.assertRaisesRegex(RuntimeError, LOOP_OPEN_AT_INDEX): pad_loop(fn, in_axes)(*txs).realize()

  def outer_right(self, fn, *xs:np.ndarray, nfn=None, in_axes=0):
    txs, want = self.native_right(fn, *xs, nfn=nfn, in_axes=in_axes)
    self.assert_close(pad_outer(fn, in_axes)(*txs).numpy(), want)

  def test_softmax_loop_raises(self): self.loop_raises(lambda x: x.softmax(), rand(4, 5), nfn=np_softmax)
  def test_softmax_outer_right(self): self.outer_right(lambda x: x.softmax(), rand(4, 5), nfn=np_softmax)
  def test_mlp_loop_raises(self): self.loop_raises(mlp, rand(5, 4), W1, W2, nfn=np_mlp, in_axes=(0, None, None))
  def test_mlp_outer_right(self): self.outer_right(mlp, rand(5, 4), W1, W2, nfn=np_mlp, in_axes=(0, None, None))
  def test_mlp_per_example_weight_loop_raises(self):
    self.loop_raises(mlp, rand(3, 4), rand(3, 4, 6), W2, nfn=np_mlp, in_axes=(0, 0, None))
  def test_mlp_per_example_weight_outer_right(self):
    self.outer_right(mlp, rand(3, 4), rand(3, 4, 6), W2, nfn=np_mlp, in_axes=(0, 0, None))
  def test_stack_index_loop_raises(self): self.loop_raises(stack_index, rand(5, 4), nfn=np_stack_index)
  def test_stack_index_outer_right(self): self.outer_right(stack_index, rand(5, 4), nfn=np_stack_index)
  def test_reduce_broadcast_back_loop_raises(self): self.loop_raises(lambda x: x + x.sum(), rand(5, 3))
  def test_reduce_broadcast_back_outer_right(self): self.outer_right(lambda x: x + x.sum(), rand(5, 3))

  def test_depth4_reduce_broadcast_back_loop_raises(self):
    fn, axes, x = lambda e: e + e.sum(), (1, 0, 2, 0), nested_batch((3,), (1, 0, 2, 0), (2, 3, 2, 2))
    self.assert_close(nested((native_vmap,)*4, fn, axes)(Tensor(x)).numpy(), np_nest(fn, axes)(x))
    with self.assertRaisesRegex(RuntimeError, LOOP_OPEN_AT_INDEX): nested((pad_loop,)*4, fn, axes)(Tensor(x)).realize()

  def test_outer_in_loop_raises(self):
    # vmap has no axis types: native is the bracket with the same ones
    fn, x = lambda e: e*2, rand(2, 3, 4)
    self.assert_close(nest(fn, (0, 0), (AxisType.LOOP, AxisType.OUTER))(Tensor(x)).numpy(), np_nest(fn, (0, 0))(x))
    with self.assertRaisesRegex(RuntimeError, r"^input to kernel must be AFTER or BUFFER, not Ops\.STORE$"):
      nested((pad_loop, pad_outer), fn, (0, 0))(Tensor(x)).realize()

@unittest.skipUnless(Device.DEFAULT == "CPU", "loops and counts are for the CPU backend")
class TestPadCost(VmapTestCase):
  """pad+reduce is O(N^2) in the batch: LOOP loops over all N examples for every output, OUTER runs N kernels that each write all N
  outputs. Native vmap loops over the batch once."""
  def test_loop_sum_loops_over_batch_per_output(self):
    x = Tensor(rand(12, 5)).realize()
    self.assertEqual(loop_bounds(pad_loop(lambda e: e.sum())(x)), [[12, 12, 5]])

  def test_native_sum_loops_over_batch_once(self):
    x = Tensor(rand(12, 5)).realize()
    self.assertEqual(loop_bounds(native_vmap(lambda e: e.sum())(x)), [[12, 5]])

  def test_loop_nested_sum_loops_over_batches_per_output(self):
    x = Tensor(nested_batch((5,), (1, 0), (3, 4))).realize()
    self.assertEqual(loop_bounds(nested((pad_loop, pad_loop), lambda e: e.sum(), (1, 0))(x)), [[3, 4, 3, 4, 5]])

  def test_native_nested_sum_loops_over_batches_once(self):
    x = Tensor(nested_batch((5,), (1, 0), (3, 4))).realize()
    self.assertEqual(loop_bounds(nested((native_vmap, native_vmap), lambda e: e.sum(), (1, 0))(x)), [[4, 3, 5]])

  def test_outer_sum_kernel_per_example_writes_whole_batch(self):
    x = Tensor(rand(8, 5)).realize()
    # zero the output, then for each example a kernel that sums it and adds its slot to every output, the other 7 padding
    self.assertEqual(loop_bounds(pad_outer(lambda e: e.sum())(x)), [[8]] + [[5, 8]]*8)

  def launches(self, vm, fn, n:int, nfn=None) -> int:
    """the kernels run by vm(fn) on a realized batch of n examples of 5, after checking the answer against the numpy loop"""
    x, out = rand(n, 5), []
    xt = Tensor(x).realize()
    cnt = kernels(lambda: out.append(vm(fn)(xt).realize()))
    self.assert_close(out[0].numpy(), np_loop(nfn or fn, x))
    return cnt

  def test_outer_sum_launches_grow_with_batch(self):
    self.assertEqual([self.launches(pad_outer, lambda e: e.sum(), n) for n in (4, 8)], [4+1, 8+1])

  def test_native_sum_launches_constant(self):
    self.assertEqual([self.launches(native_vmap, lambda e: e.sum(), n) for n in (4, 8)], [1, 1])

  def test_outer_softmax_launches_grow_with_batch(self):
    self.assertEqual([self.launches(pad_outer, lambda e: e.softmax(), n, np_softmax) for n in (4, 8)], [3*4+1, 3*8+1])

  def test_native_softmax_launches_constant(self):
    self.assertEqual([self.launches(native_vmap, lambda e: e.softmax(), n, np_softmax) for n in (4, 8)], [3, 3])

if __name__ == "__main__":
  unittest.main()
