"""OUTER vmap scopes nested in OUTER scopes: the schedule runs each inner scope, its zeroing included, once per index of the enclosing ones.
Every result is compared with nested numpy loops on random float64 data."""
import unittest
import numpy as np
from tinygrad import Tensor, UOp, dtypes, Device
from tinygrad.uop.ops import AxisType
from tinygrad.vmap import vmap_range, varg
from vmap_oracle import VmapTestCase, rand, bracket, np_loop, nest, np_nest, nested_batch, np_softmax
from test_vmap_realize import NestedScopesCase, MultiConsumerNodes, StackFlattenPick, TG, NP, reduce_index

O, L = AxisType.OUTER, AxisType.LOOP

# test_vmap_realize.py's cases (reduces indexed again, realized intermediates, softmax) in nests with an OUTER scope inside another one
class TestOuterInOuter(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes, axis_type = (1, 0), (3, 2), (O, O)
class TestOuterInOuterDepth3(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes, axis_type = (2, 0, 1), (2, 3, 2), (O, O, O)
class TestOuterOuterLoop(StackFlattenPick, MultiConsumerNodes, NestedScopesCase): axes, sizes, axis_type = (2, 0, 1), (2, 3, 2), (O, O, L)
class TestOuterLoopOuter(MultiConsumerNodes, NestedScopesCase): axes, sizes, axis_type = (2, 0, 1), (2, 3, 2), (O, L, O)
class TestLoopOuterOuter(MultiConsumerNodes, NestedScopesCase): axes, sizes, axis_type = (2, 0, 1), (2, 3, 2), (L, O, O)

def f(e): return e*2 + e.sum()
def outer2(fn, x:np.ndarray) -> Tensor: return bracket(fn, Tensor(x), axis_type=O)
def inner(fn, row:Tensor) -> Tensor: return bracket(fn, row, axis_type=O)

class TestOuterInOuterCases(VmapTestCase):
  def test_elementwise(self):
    x = rand(3, 2, 4)
    self.assert_close(outer2(lambda row: inner(lambda e: e*2, row), x).numpy(), x*2)

  def test_reduce(self):
    x = rand(3, 2, 4)
    self.assert_close(outer2(lambda row: inner(f, row), x).numpy(), np_loop(lambda row: np_loop(f, row), x))

  def test_depth4(self):
    x = nested_batch((4,), (0, 1, 0, 1), (2, 3, 2, 2))
    self.assert_close(nest(lambda e: reduce_index(e, TG), (0, 1, 0, 1), O)(Tensor(x)).numpy(),
                      np_nest(lambda e: reduce_index(e, NP), (0, 1, 0, 1))(x))

  def test_outer_value_in_inner_scope(self):
    x = rand(3, 2, 5)
    self.assert_close(outer2(lambda row: inner(lambda e: e*row.sum() + row.max(), row), x).numpy(),
                      np_loop(lambda row: np_loop(lambda e: e*row.sum() + row.max(), row), x))

  def test_outer_softmax_in_inner_scope(self):
    x = rand(3, 2, 5)
    self.assert_close(outer2(lambda row: inner(lambda e: e*row.softmax(0), row), x).numpy(),
                      np_loop(lambda row: np_loop(lambda e: e*np_softmax(row.T).T, row), x))

  def test_softmax_of_inner_result(self):
    # realized in the outer scope from the inner scope's buffer: runs once per outer index, after the inner scope
    x = rand(3, 2, 5)
    self.assert_close(outer2(lambda row: inner(f, row).softmax(-1), x).numpy(), np_loop(lambda row: np_softmax(np_loop(f, row)), x))

  def test_sum_of_inner_result(self):
    x = rand(3, 2, 5)
    self.assert_close(outer2(lambda row: inner(lambda e: (e*2).sum(), row).sum()*row, x).numpy(),
                      np_loop(lambda row: np_loop(lambda e: (e*2).sum(), row).sum()*row, x))

  def test_gradient(self):
    x = rand(3, 2, 4)
    X = Tensor(x, requires_grad=True)
    bracket(lambda row: inner(lambda e: (e*e).sum(), row), X, axis_type=O).sum().backward()
    self.assert_close(X.grad.numpy(), 2*x)

# the same accumulator problem without nested scopes: each OUTER RANGE is a loop of the schedule that all its kernels must be inside
class TestOuterLoops(VmapTestCase):
  def test_two_outputs_of_one_scope(self):
    x = rand(3, 2, 5)
    r = vmap_range(3, O)
    y = Tensor(x).vmapin(varg(3, {0: r})).sum(0)
    self.assert_close((y.vmapout(varg(2, {0: r})) + (y*y).vmapout(varg(2, {0: r}))).numpy(), np_loop(lambda e: e.sum(0) + e.sum(0)**2, x))

  def test_two_outer_ranges_in_one_scope(self):
    x, zero = rand(3, 2, 5), UOp.const(dtypes.index, 0)
    r0, r1 = vmap_range(3, O), vmap_range(2, O)
    e = Tensor(x).vmapin((r0, r1, zero))
    self.assert_close(f(e).vmapout((r0, r1, zero)).numpy(), np_loop(lambda row: np_loop(f, row), x))

  def test_outer_range_of_size_one(self):
    # one index is just a scope: a RANGE of size 1 folds to 0, the outer world REDUCE over it had no RANGE left
    x = rand(1, 2, 5)
    self.assert_close(bracket(f, Tensor(x), axis_type=O).numpy(), np_loop(f, x))
    self.assert_close(nest(f, (1, 0), axis_type=(O, O))(Tensor(x)).numpy(), np_nest(f, (1, 0))(x))

@unittest.skipUnless(Device.DEFAULT == "CPU", "counts are for the CPU backend")
class TestOuterInOuterLaunches(NestedScopesCase):
  """per outer index the inner scope is re-run: its zeroing, its kernels per inner index, then the outer accumulation"""
  def count(self, fn, n_outer:int, n_inner:int) -> int: return self.launches(fn, (4,), (n_outer, n_inner), axes=(1, 0), axis_type=(O, O))

  def test_elementwise(self):
    # the outer zeroing once, then per outer index: the inner zeroing, n_inner accumulations, the outer accumulation
    for n_outer, n_inner in ((3, 2), (2, 5)): self.assertEqual(self.count(lambda e, L: e*2, n_outer, n_inner), 1 + n_outer*(1 + n_inner + 1))

  def test_reduce(self):
    # e.sum() is its own kernel, run before each inner accumulation
    for n_outer, n_inner in ((3, 2), (2, 5)): self.assertEqual(self.count(lambda e, L: f(e), n_outer, n_inner), 1 + n_outer*(1 + 2*n_inner + 1))

if __name__ == "__main__":
  unittest.main()
