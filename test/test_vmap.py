"""Native VMAPIN/VMAPOUT: shape rules, the supported constructs (elementwise, reductions, movement, stacking, indexing, ops on a
VMAPOUT's output), nesting, kernel counts and bad input.
Every result is compared with a numpy loop over examples on random float64 data."""
import unittest
import numpy as np
from tinygrad import Tensor, UOp, dtypes, Device, Context, vmap
from tinygrad.uop.ops import Ops, AxisType
from tinygrad.fork_line import LINE_012
from tinygrad.uop.spec import type_verify
from tinygrad.vmap import vmap_range, varg, KEPT as ZERO
from tinygrad.transform_state import INDEX
from vmap_oracle import TENSOR_SPEC as tensor_spec, VmapTestCase, rand, batched, nested_batch, bracket, np_loop, nest, np_nest, kernels, np_softmax, param, kernel_sources, half_missing

class TestShapeRules(unittest.TestCase):
  def test_uop_vmapin_drops_mapped_axis(self):
    r = vmap_range(3)
    self.assertEqual(Tensor.empty(3, 6).uop.vmapin((r, ZERO)).shape, (6,))

  def test_uop_vmapout_inserts_mapped_axis(self):
    r = vmap_range(3)
    self.assertEqual(Tensor.empty(6).uop.vmapout((ZERO, r)).shape, (6, 3))

  def test_tensor_vmapin_middle_axis(self):
    r = vmap_range(4)
    self.assertEqual(Tensor.empty(2, 4, 5).vmapin((ZERO, r, ZERO)).shape, (2, 5))

  def test_tensor_vmapin_several_axes(self):
    r0, r2 = vmap_range(2), vmap_range(5)
    self.assertEqual(Tensor.empty(2, 4, 5).vmapin((r0, ZERO, r2)).shape, (4,))

  def test_tensor_vmapout_several_axes(self):
    r0, r1 = vmap_range(2), vmap_range(5)
    self.assertEqual(Tensor.empty(4).vmapout((r1, ZERO, r0)).shape, (5, 4, 2))

  def test_vmapin_vmapout_round_trip_shape(self):
    r = vmap_range(7)
    x = Tensor.empty(3, 7, 2)
    self.assertEqual(x.vmapin(v:=varg(3, {1:r})).vmapout(v).shape, (3, 7, 2))

class TestBasic(VmapTestCase):
  def test_several_axes_at_once(self):
    x, r0, r2 = rand(2, 4, 5), vmap_range(2), vmap_range(5)
    got = (Tensor(x).vmapin((r0, ZERO, r2)) * 3).sum().vmapout((r0, r2)).numpy()
    self.assert_close(got, np.stack([np.stack([(x[i, :, j]*3).sum() for j in range(5)]) for i in range(2)]))

  def test_several_axes_reordered_out(self):
    x, r0, r2 = rand(2, 4, 5), vmap_range(2), vmap_range(5)
    got = Tensor(x).vmapin((r0, ZERO, r2)).exp().vmapout((r2, ZERO, r0)).numpy()
    self.assert_close(got, np.exp(x).transpose(2, 1, 0))

  def test_out_axis_not_first(self):
    self.check(lambda x: x*2+1, rand(5, 3), out_axis=1)

  def test_two_batched_inputs(self):
    self.check(lambda a, b: a*b - a, rand(4, 3), rand(4, 3))

  def test_batched_and_unbatched_input(self):
    self.check(lambda x, w: (x*w).sum(), rand(6, 3), rand(3), in_axes=(0, None))

  def test_inputs_mapped_on_different_axes(self):
    self.check(lambda a, b: a@b, rand(5, 3), rand(3, 5), in_axes=(0, 1))

  def test_output_independent_of_batch_is_broadcast(self):
    w, r = rand(3), vmap_range(4)
    got = (Tensor(w)*2).vmapout((r, ZERO)).numpy()
    self.assert_close(got, np.stack([w*2]*4))

  def test_realized_input(self):
    x = rand(5, 4)
    self.assert_close(bracket(lambda e: e.sum() * e[0], Tensor(x).realize()).numpy(), np_loop(lambda e: e.sum() * e[0], x))

class Constructs:
  """the constructs inside a scope (elementwise, reductions, movement, stacking, indexing), one example of per-example shape `shape`,
  the batch axis at `in_axis`, a RANGE of `axis_type`"""
  in_axis, axis_type = 0, AxisType.LOOP
  def per_example(self, tfn, shape=(6,), nfn=None, batch=5, **kw):
    self.check(tfn, batched(batch, shape, self.in_axis), nfn=nfn, in_axes=self.in_axis, axis_type=self.axis_type, **kw)
  def unbatched(self, x) -> Tensor:
    """a Tensor the per-example function closes over (on the batch's device or devices)"""
    return Tensor(x)

  # elementwise, unary, ternary, cast
  def test_mul_unbatched(self):
    w = rand(6)
    self.per_example(lambda x: x*self.unbatched(w), nfn=lambda x: x*w)
  def test_add_const(self): self.per_example(lambda x: 2*x + 1)
  def test_self_mul(self): self.per_example(lambda x: x*x - x)
  def test_exp2(self): self.per_example(lambda x: x.exp2(), nfn=np.exp2)
  def test_sqrt(self): self.per_example(lambda x: (x*x+1).sqrt(), nfn=lambda x: np.sqrt(x*x+1))
  def test_sin(self): self.per_example(lambda x: x.sin(), nfn=np.sin)
  def test_where(self): self.per_example(lambda x: (x > 0).where(x, -2*x), nfn=lambda x: np.where(x > 0, x, -2*x))
  def test_cast_half(self):
    if why := half_missing(): self.skipTest(why)
    self.per_example(lambda x: x.cast(dtypes.float16), nfn=lambda x: x.astype(np.float16), atol=1e-3, rtol=1e-3)
  def test_cast_int(self): self.per_example(lambda x: (x*10).cast(dtypes.int32), nfn=lambda x: (x*10).astype(np.int32))

  # reductions
  def test_sum(self): self.per_example(lambda x: x.sum())
  def test_sum_axis(self): self.per_example(lambda x: x.sum(axis=0), shape=(3, 4))
  def test_mean(self): self.per_example(lambda x: x.mean())
  def test_max(self): self.per_example(lambda x: x.max())
  def test_sum_plus_max(self): self.per_example(lambda x: (x*2).sum() + x.max())
  def test_matmul_row(self):
    m = rand(6, 4)
    self.per_example(lambda x: x @ self.unbatched(m), nfn=lambda x: x @ m)
  def test_matmul_2d(self):
    m = rand(4, 2)
    self.per_example(lambda x: x @ self.unbatched(m), shape=(3, 4), nfn=lambda x: x @ m)
  def test_dot_self(self): self.per_example(lambda x: x.dot(x), nfn=lambda x: x @ x)

  # movement
  def test_reshape(self): self.per_example(lambda x: x.reshape(2, 3))
  def test_flatten(self): self.per_example(lambda x: x.flatten(), shape=(2, 3))
  def test_permute(self): self.per_example(lambda x: x.permute(1, 0), shape=(2, 3), nfn=lambda x: x.transpose(1, 0))
  def test_transpose(self): self.per_example(lambda x: x.transpose(), shape=(2, 3), nfn=lambda x: x.T)
  def test_expand(self): self.per_example(lambda x: x.reshape(1, 6).expand(3, 6), nfn=lambda x: np.broadcast_to(x, (3, 6)))
  def test_shrink(self): self.per_example(lambda x: x[:2])
  def test_shrink_middle(self): self.per_example(lambda x: x[2:5])
  def test_shrink_2d(self): self.per_example(lambda x: x[1:3, 2:4], shape=(4, 5))
  def test_pad(self): self.per_example(lambda x: x.pad(((1, 0), (0, 2))), shape=(2, 3), nfn=lambda x: np.pad(x, ((1, 0), (0, 2))))
  def test_flip(self): self.per_example(lambda x: x.flip(0), nfn=lambda x: np.flip(x, 0))
  def test_unsqueeze(self): self.per_example(lambda x: x.unsqueeze(0), nfn=lambda x: x[None])
  def test_squeeze(self): self.per_example(lambda x: x.squeeze(0), shape=(1, 6), nfn=lambda x: x[0])

  # stacking and concatenation
  def test_stack(self): self.per_example(lambda x: Tensor.stack(x, x*2, x+1), nfn=lambda x: np.stack([x, x*2, x+1]))
  def test_stack_of_reduces(self):
    self.per_example(lambda x: Tensor.stack(x[:2].sum(), x[2:].sum()), nfn=lambda x: np.stack([x[:2].sum(), x[2:].sum()]))
  def test_cat_unbatched(self):
    w = rand(3)
    self.per_example(lambda x: Tensor.cat(x, self.unbatched(w)), nfn=lambda x: np.concatenate([x, w]))

  # indexing
  def test_scalar_index(self): self.per_example(lambda x: x.flatten()[4] * 2, shape=(2, 3), nfn=lambda x: x.flatten()[4] * 2)
  def test_slice(self): self.per_example(lambda x: x[:3])
  def test_fancy_index_list(self): self.per_example(lambda x: x[[0, 3, 1]])
  def test_fancy_index_tensor(self): self.per_example(lambda x: x[self.unbatched([4, 0, 2])], nfn=lambda x: x[[4, 0, 2]])
  def test_multi_scalar_stack(self):
    self.per_example(lambda x: Tensor.stack(x.flatten()[0], x.flatten()[4], x.flatten()[8]), shape=(3, 3),
             nfn=lambda x: np.stack([x.flatten()[0], x.flatten()[4], x.flatten()[8]]))

class PostVmap:
  """ops on the output of a VMAPOUT"""
  in_axis = 0
  def post(self, after, nafter, fn=lambda e: e*e-2*e, nfn=None, shape=(3, 2), batch=4):
    x = batched(batch, shape, self.in_axis)
    got = after(bracket(fn, Tensor(x), in_axes=self.in_axis)).numpy()
    self.assert_close(np.asarray(got), np.asarray(nafter(np_loop(nfn or fn, x, in_axes=self.in_axis))))

  def test_reshape(self): self.post(lambda y: y.reshape(12, 2), lambda y: y.reshape(12, 2))
  def test_flatten(self): self.post(lambda y: y.flatten(), lambda y: y.flatten())
  def test_transpose(self): self.post(lambda y: y.transpose(0, 2), lambda y: y.transpose(2, 1, 0))
  def test_pad(self): self.post(lambda y: y.pad(((1, 1), None, (0, 2))), lambda y: np.pad(y, ((1, 1), (0, 0), (0, 2))))
  def test_flip(self): self.post(lambda y: y.flip(0), lambda y: np.flip(y, 0))
  def test_index(self): self.post(lambda y: y[2, 1], lambda y: y[2, 1])
  def test_slice(self): self.post(lambda y: y[1:3], lambda y: y[1:3])
  def test_sum(self): self.post(lambda y: y.sum(), lambda y: y.sum())
  def test_sum_axis0(self): self.post(lambda y: y.sum(0), lambda y: y.sum(0))
  def test_compare_eq(self):
    self.post(lambda y: y == 0.0, lambda y: y == 0.0, fn=lambda e: (e > 0).where(e, 0.0), nfn=lambda e: np.where(e > 0, e, 0.0))
  def test_compare_gt(self): self.post(lambda y: y > 1.0, lambda y: y > 1.0)
  def test_matmul(self):
    w = rand(2, 5)
    self.post(lambda y: y @ Tensor(w), lambda y: y @ w)
  def test_cat_unbatched(self):
    w = rand(1, 3, 2)
    self.post(lambda y: Tensor.cat(y, Tensor(w)), lambda y: np.concatenate([y, w]))

class TestConstructsAxis0(Constructs, VmapTestCase): in_axis = 0
class TestConstructsMiddleAxis(Constructs, VmapTestCase): in_axis = 1
# one example at a time (0.14 has no OUTER: these skip there, docs/internals.md's table)
class TestConstructsOuter(Constructs, VmapTestCase): in_axis, axis_type = 0, AxisType.OUTER if LINE_012 else None
class TestConstructsOuterMiddleAxis(Constructs, VmapTestCase): in_axis, axis_type = 1, AxisType.OUTER if LINE_012 else None
class TestConstructsOneAtATime(Constructs, VmapTestCase):
  """the constructs one example at a time, vmap's chunk_size=1, on both lines: a scope per example on 0.14 (its counterpart of the
  OUTER scopes above, which 0.14 removed), an OUTER scope on 0.12"""
  in_axis = 1
  def per_example(self, tfn, shape=(6,), nfn=None, batch=3, **tol):
    x = batched(batch, shape, self.in_axis)
    self.assert_close(vmap(tfn, in_axes=self.in_axis, chunk_size=1)(Tensor(x)).numpy(), np_loop(nfn or tfn, x, in_axes=self.in_axis), **tol)
class TestPostVmapAxis0(PostVmap, VmapTestCase): in_axis = 0
class TestPostVmapMiddleAxis(PostVmap, VmapTestCase): in_axis = 1

class TestNested(VmapTestCase):
  """scopes nested 2 and 3 deep, with constructs that need no intermediate realization (reductions inside nested scopes:
  test_vmap_realize.py)"""
  def nested(self, depth:int, fn, nfn, shape:tuple[int, ...], axes:tuple[int, ...]):
    x = rand(*shape)
    self.assert_close(nest(fn, axes[:depth])(Tensor(x)).numpy(), np_nest(nfn, axes[:depth])(x))

  def test_depth2_elementwise(self): self.nested(2, lambda e: e.exp()*2, lambda e: np.exp(e)*2, (3, 4, 5), (0, 1))
  def test_depth2_movement(self): self.nested(2, lambda e: e.flip(0)[1:], lambda e: np.flip(e, 0)[1:], (3, 4, 5), (1, 0))
  def test_depth2_unbatched_operand(self):
    w = rand(5)
    self.nested(2, lambda e: e*Tensor(w)+1, lambda e: e*w+1, (4, 3, 5), (1, 0))
  def test_depth2_reduce_outside_inner(self):
    x = rand(3, 4, 5)
    got = bracket(lambda row: bracket(lambda e: e*e, row, in_axes=1).sum(0), Tensor(x), in_axes=0).numpy()
    self.assert_close(got, np_loop(lambda row: np_loop(lambda e: e*e, row, in_axes=1).sum(0), x))
  def test_depth3_elementwise(self): self.nested(3, lambda e: (e*3).sin(), lambda e: np.sin(e*3), (2, 3, 4, 5), (2, 0, 1))
  def test_one_vmapin_enters_two_scopes(self):
    # the outer scope's RANGE and the inner one's in one varg: the inner vmapout leaves an outer VMAPIN for the outer one
    x, ro, ri = rand(3, 4, 5), vmap_range(3), vmap_range(5)
    got = (Tensor(x).vmapin((ro, ZERO, ri)) * 2).sum().exp2().vmapout((ri,)).vmapout((ro, ZERO)).numpy()
    self.assert_close(got, np.exp2((x * 2).sum(1)))
  def test_depth3_movement(self):
    self.nested(3, lambda e: e.reshape(2, 3).transpose().pad(((1, 0), None)), lambda e: np.pad(e.reshape(2, 3).T, ((1, 0), (0, 0))),
                (2, 3, 6, 4), (0, 2, 0))

class TestNestedIndexing(VmapTestCase):
  """the indexing constructs at nesting depth 5, the mapped axis moving around: per example 6 numbers, batch sizes 2 or 3 per level"""
  axes = (1, 0, 2, 0, 1)
  def depth5(self, fn, nfn=None):
    x = nested_batch((6,), self.axes, (2, 3, 2, 3, 2))
    self.assert_close(nest(fn, self.axes)(Tensor(x)).numpy(), np_nest(nfn or fn, self.axes)(x))

  def test_scalar_index(self): self.depth5(lambda e: e[4] * 2)
  def test_slice(self): self.depth5(lambda e: e[:3])
  def test_fancy_index_list(self): self.depth5(lambda e: e[[5, 0, 2]])
  def test_fancy_index_tensor(self): self.depth5(lambda e: e[Tensor([5, 0, 2])], lambda e: e[[5, 0, 2]])
  def test_multi_scalar_stack(self): self.depth5(lambda e: Tensor.stack(e[0], e[4], e[2]), lambda e: np.stack([e[0], e[4], e[2]]))
  def test_index_after_reduce_stack(self):
    self.depth5(lambda e: Tensor.stack(e[:2].sum(), e[2:].sum())[[1, 0]], lambda e: np.stack([e[:2].sum(), e[2:].sum()])[[1, 0]])

class TestGradient(VmapTestCase):
  """reverse mode through a scope: per-example gradients of batched inputs, gradients of unbatched ones summed over the batch"""
  def setUp(self): self.xn, self.wn, self.cn = rand(4, 3), rand(3), rand(4)
  def weighted_loss(self, x, w): return (bracket(lambda e, w: (e*w).exp().sum(), x, w, in_axes=(0, None)) * Tensor(self.cn)).sum()

  def test_batched_input(self):
    x = param(self.xn)
    self.weighted_loss(x, Tensor(self.wn)).backward()
    self.assert_close(x.grad.numpy(), self.cn[:, None] * np.exp(self.xn*self.wn) * self.wn)

  def test_unbatched_input(self):
    w = param(self.wn)
    self.weighted_loss(Tensor(self.xn), w).backward()
    self.assert_close(w.grad.numpy(), (self.cn[:, None] * np.exp(self.xn*self.wn) * self.xn).sum(0))

  def test_softmax(self):
    x = param(self.xn)
    bracket(lambda e: e.softmax()[0], x).sum().backward()
    self.assert_close(x.grad.numpy(), np_loop(lambda v: np_softmax(v)[0] * ((np.arange(3) == 0) - np_softmax(v)), self.xn))

@unittest.skipUnless(Device.DEFAULT == "CPU", "counts and C source are for the CPU backend")
class TestKernels(VmapTestCase):
  def test_fused_same_count_as_single_example(self):
    fn = lambda e: (e*2).sum() + e.max()
    xb, x1 = Tensor(rand(1000, 6)).realize(), Tensor(rand(6)).realize()
    self.assertEqual(kernels(lambda: bracket(fn, xb).realize()), kernels(lambda: fn(x1).realize()))

  def test_fused_is_one_kernel(self):
    x = Tensor(rand(1000, 6)).realize()
    self.assertEqual(kernels(lambda: bracket(lambda e: (e*2).sum() + e.max(), x).realize()), 1)

  def test_source_has_batch_loop(self):
    x = Tensor(rand(37, 6)).realize()
    src = kernel_sources(bracket(lambda e: (e*2).sum() + e.max(), x))[-1]
    self.assertRegex(src, r"for \(int \w+ = 0; \w+ < 37; \w+\+\+\)")

class TestSpec2(VmapTestCase):
  """SPEC=2 also verifies every UOp when it is created and the kernel graphs: nested scopes that realize inside pass it"""
  def test_nested_softmax_and_index(self):
    def fn(e): return e.softmax() * Tensor.stack(e[:2].sum(), e[2:].sum())[[1, 0, 1, 0]]
    def nfn(e): return np_softmax(e) * np.stack([e[:2].sum(), e[2:].sum()])[[1, 0, 1, 0]]
    x = nested_batch((4,), (1, 0), (3, 2))
    with Context(SPEC=2): got = nest(fn, (1, 0))(Tensor(x)).numpy()
    self.assert_close(got, np_nest(nfn, (1, 0))(x))

class TestBadInput(unittest.TestCase):
  def test_vmapin_wrong_arity(self):
    with self.assertRaisesRegex(ValueError, "needs 2 entries"): Tensor.empty(3, 6).vmapin((vmap_range(3),))

  def test_vmapin_range_size_mismatch(self):
    with self.assertRaisesRegex(ValueError, "size 4 can't map axis 0 of size 3"): Tensor.empty(3, 6).vmapin((vmap_range(4), ZERO))

  def test_vmapin_nonzero_const(self):
    with self.assertRaisesRegex(ValueError, "RANGE or UOp.const"): Tensor.empty(3, 6).vmapin((vmap_range(3), UOp(Ops.CONST, INDEX, arg=1)))

  def test_vmapin_int_const(self):
    with self.assertRaisesRegex(ValueError, "RANGE or UOp.const"): Tensor.empty(3, 6).vmapin((vmap_range(3), UOp(Ops.CONST, dtypes.int, arg=0)))

  def test_vmapin_range_expression(self):
    with self.assertRaisesRegex(ValueError, "RANGE or UOp.const"): Tensor.empty(3, 6).vmapin((vmap_range(3)*1+1, ZERO))

  def test_vmapin_not_uops(self):
    with self.assertRaisesRegex(TypeError, "tuple of UOps"): Tensor.empty(3, 6).vmapin((0, 0))

  def test_vmapin_range_reused_in_nested_scope(self):
    r = vmap_range(3)
    with self.assertRaisesRegex(ValueError, "already maps an enclosing vmap scope"): Tensor.empty(3, 3).vmapin((r, ZERO)).vmapin((r,))

  def test_vmapin_one_range_two_axes(self):
    r = vmap_range(3)
    with self.assertRaisesRegex(ValueError, "two axes with one RANGE"): Tensor.empty(3, 3).vmapin((r, r))

  def test_vmapout_wrong_const_count(self):
    r = vmap_range(3)
    with self.assertRaisesRegex(ValueError, "needs 1 UOp.const"): Tensor.empty(3, 6).vmapin((r, ZERO)).vmapout((r,))

  def test_vmapout_one_range_two_axes(self):
    r = vmap_range(3)
    with self.assertRaisesRegex(ValueError, "one RANGE on two axes"): Tensor.empty(3, 3).vmapin((r, ZERO)).vmapout((r, r, ZERO))

  def test_vmapout_bad_entry(self):
    with self.assertRaisesRegex(ValueError, "RANGE or UOp.const"): Tensor.empty(6).vmapout((UOp(Ops.CONST, INDEX, arg=2), ZERO))

  def test_reading_inside_scope(self):
    with self.assertRaisesRegex(RuntimeError, "can't read a tensor inside a vmap scope"): bracket(lambda e: Tensor(e.numpy()), Tensor.empty(4, 3))

  # built inside assertRaises: with SPEC=2 a UOp is verified when it is created
  def test_spec_rejects_bad_varg(self):
    with self.assertRaises(RuntimeError):
      type_verify(UOp.sink(UOp(Ops.VMAPIN, dtypes.float, (Tensor.empty(3, 6).uop, vmap_range(3), UOp(Ops.CONST, INDEX, arg=1)))), tensor_spec)

  def test_spec_rejects_vmapout_arity(self):
    with self.assertRaises(RuntimeError): type_verify(UOp.sink(UOp(Ops.VMAPOUT, dtypes.float, (Tensor.empty(6).uop, vmap_range(3)))), tensor_spec)

  def test_spec_accepts_good_vargs(self):
    r = vmap_range(3)
    type_verify(UOp.sink(Tensor.empty(3, 6).uop.vmapin((r, ZERO)).vmapout((ZERO, r))), tensor_spec)

  def test_nonnegative_range_ids_do_not_alias_scheduler_ranges(self):
    # the scheduler numbers its own ranges from 0: a vmap RANGE with a small id must not become one of them
    for rid in range(4):
      x, b = rand(3, 3), rand(3, 3)
      r = UOp.range(3, rid, AxisType.LOOP)
      np.testing.assert_allclose((Tensor(x).vmapin((r, ZERO)) @ Tensor(b).T).vmapout((r, ZERO)).numpy(), x @ b.T, err_msg=f"range id {rid}")

if __name__ == "__main__":
  unittest.main()
