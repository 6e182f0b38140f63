"""vmap on the 0.14 line batches a scope whose structure it batched before from a kept template (tinygrad/batching.py, a Template of
tinygrad/structure_template.py): the batch of the same per-example graph on new leaves (inputs, closed-over values, an enclosing scope's
RANGE). A template must give the very UOps batching gives (`is`) and results that match a numpy loop over the examples."""
import unittest
import numpy as np
from tinygrad import Tensor
from tinygrad.vmap import vmap
from tinygrad.transform_state import KEPT
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's batching: 0.12 lowers a vmap scope in rangeify, it has no batch_scope")
import tinygrad.batching as batching

def rand(*shape, seed:int) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

class CountBatchings:
  """counts the scopes batched rule by rule (not from a template) while in the with block"""
  def __enter__(self):
    self.n, self.orig = 0, batching._batched
    def counted(*args):
      self.n += 1
      return self.orig(*args)
    batching._batched = counted
    return self
  def __exit__(self, *exc): batching._batched = self.orig

def run_calls(f, calls:list[tuple[np.ndarray, ...]]) -> tuple[list, int]:
  """f on Tensors of each input tuple, realized; the outputs as numpy and how many scopes the calls after the first batched rule by rule"""
  ins = [[Tensor(x).realize() for x in xs] for xs in calls]
  outs = [f(*ins[0])]
  with CountBatchings() as count: outs += [f(*xs) for xs in ins[1:]]
  return [[o.numpy() for o in (out if isinstance(out, tuple) else (out,))] for out in outs], count.n

class TestTemplateHits(unittest.TestCase):
  def test_called_again_on_new_inputs(self):
    f = vmap(lambda x, C: Tensor.stack(x * C[0], x.sin() * C[1]).flatten()[::3], in_axes=(0, None))
    calls = [(rand(7, 4, seed=i), rand(2, 4, seed=10+i)) for i in range(3)]
    outs, batched = run_calls(f, calls)
    self.assertEqual(batched, 0)
    for (out,), (x, C) in zip(outs, calls):
      np.testing.assert_allclose(out, np.stack([np.stack([xi * C[0], np.sin(xi) * C[1]]).flatten()[::3] for xi in x]), rtol=1e-5, atol=1e-6)

  def test_nested_scopes(self):
    f = vmap(lambda p, B: vmap(lambda q: ((p - q) ** 2).sum().sqrt())(B), in_axes=(0, None))
    calls = [(rand(5, 3, seed=i), rand(4, 3, seed=10+i)) for i in range(3)]
    outs, batched = run_calls(f, calls)
    self.assertEqual(batched, 0)
    for (out,), (A, B) in zip(outs, calls):
      np.testing.assert_allclose(out, np.array([[np.sqrt(((a - b) ** 2).sum()) for b in B] for a in A]), rtol=1e-5)

  def test_outputs_share_one_walk(self):
    # a gradient's outputs share most of their graph: each output's template is keyed by the walk of the outputs before it too
    def grads(w1, w2, x): return tuple(((x * w1).sin().sum() * (x * w2).sum()).gradient(w1, w2))
    f = vmap(grads, in_axes=(None, None, 0))
    calls = [(rand(3, seed=i), rand(3, seed=5+i), rand(6, 3, seed=10+i)) for i in range(3)]
    outs, batched = run_calls(f, calls)
    self.assertEqual(batched, 0)
    for (g1, g2), (w1, w2, X) in zip(outs, calls):
      np.testing.assert_allclose(g1, np.stack([np.cos(x * w1) * x * (x * w2).sum() for x in X]), rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(g2, np.stack([np.sin(x * w1).sum() * x for x in X]), rtol=1e-4, atol=1e-5)

  def test_per_example_gradients(self):
    def loss_grad(w, x, y): return ((x * w).sum() - y).square().gradient(w)[0]
    f = vmap(loss_grad, in_axes=(None, 0, 0))
    calls = [(rand(3, seed=i), rand(6, 3, seed=10+i), rand(6, seed=20+i)) for i in range(3)]
    outs, batched = run_calls(f, calls)
    self.assertEqual(batched, 0)
    for (out,), (w, X, Y) in zip(outs, calls):
      np.testing.assert_allclose(out, np.stack([2 * ((x * w).sum() - y) * x for x, y in zip(X, Y)]), rtol=1e-4, atol=1e-5)

class TestTemplateKeys(unittest.TestCase):
  def test_batch_sizes_alternate(self):
    f = vmap(lambda x: x.cumsum() * 2)
    calls = [(rand(n, 5, seed=i),) for i, n in enumerate((3, 4, 3, 4))]
    outs, _ = run_calls(f, calls)
    for (out,), (x,) in zip(outs, calls): np.testing.assert_allclose(out, np.stack([np.cumsum(xi) * 2 for xi in x]), rtol=1e-5)

  def test_python_constants_are_part_of_the_structure(self):
    x = rand(4, 3, seed=0)
    for c in (2.0, 3.0, 2.0):
      with self.subTest(c=c):
        np.testing.assert_allclose(vmap(lambda v: v * c + 1)(Tensor(x)).numpy(), x * c + 1, rtol=1e-6)

  def test_closed_over_values_are_leaves(self):
    x = rand(4, 3, seed=0)
    for seed in (1, 2):
      w = rand(3, seed=seed)
      np.testing.assert_allclose(vmap(lambda v: (v * Tensor(w)).sum())(Tensor(x)).numpy(), (x * w).sum(1), rtol=1e-5)

class TestTemplateIsBatching(unittest.TestCase):
  def assert_same_batch(self, build_example):
    """the scope that build_example (a RANGE -> (outputs, varg)) makes, each output batched from its template and rule by rule, is one
    UOp: the outputs of one scope share their walk and their templates' rebuild"""
    from tinygrad.transform_state import TRANSFORMS
    ys, varg = build_example(TRANSFORMS.fresh_range(6))
    with batching.shared_batching():
      for y in ys: batching.batch_scope(y, varg)   # keeps the templates
    ys, varg = build_example(TRANSFORMS.fresh_range(6))
    outs = batching.ScopeOutputs()
    for y in ys:
      self.assertTrue(batching._walk_scope(y, varg, outs))
      self.assertIsNotNone(template:=batching._templates[tuple(outs.key)])
      outs.rebuilt.update(zip(template.placeholders, outs.leaves))
      self.assertIs(template.rebuild(outs.rebuilt), batching._batched(y, varg, {}))

  def test_elementwise_and_reduce(self):
    x, w = Tensor(rand(6, 4, seed=0)).realize(), Tensor(rand(4, seed=1)).realize()
    def example(r):
      xi = x.uop.vmapin((r, KEPT))
      return (((xi * w.uop).sum(0) + xi.max(0)).exp2(),), (r,)
    self.assert_same_batch(example)

  def test_enclosing_scope_range_is_a_leaf(self):
    from tinygrad.transform_state import TRANSFORMS
    x = Tensor(rand(5, 6, seed=0)).realize()
    outer = TRANSFORMS.fresh_range(5)
    def example(r):
      xi = x.uop.vmapin((outer, r))   # an example of the inner scope, inside the outer one
      return ((xi * 2 + 1).sqrt(),), (r,)
    self.assert_same_batch(example)

  def test_outputs_sharing_nodes(self):
    x, w = Tensor(rand(6, 4, seed=0)).realize(), Tensor(rand(4, seed=1)).realize()
    def example(r):
      h = (x.uop.vmapin((r, KEPT)) * w.uop).exp2()
      return (h.sum(0), h.max(0) * 3, h.sum(0)), (r,)   # a shared node, and an output that is an earlier one
    self.assert_same_batch(example)

class TestFirstDevice(unittest.TestCase):
  """on_device asks a transform's output for its device with first_device, which finds what UOp.device finds (a node's is its first src's
  that has one) down to the first such node. Each graph is built twice on its own buffers: UOp.device of one is the expected value"""
  def test_what_uop_device_finds(self):
    from tinygrad.uop.ops import UOp, Ops
    from tinygrad.dtype import dtypes
    from tinygrad.transform_state import first_device
    c = UOp.const(2.5, dtypes.float32)
    graphs = {
      "consts only": lambda a, b: (c + 1.0) * c,
      "a buffer": lambda a, b: (a + 1.0).exp2(),
      "constants first, then a buffer": lambda a, b: (c * 3.0) + (b.reshape((2, 2)).sum(0).reshape((2,)).pad(((0, 2),)) * c),
      "the first src's device wins": lambda a, b: a + b,
      "a copy": lambda a, b: (c + 1.0) * a.copy_to_device("CPU:1"),
      "a shared subgraph of constants": lambda a, b: ((s:=(c * 2.0).exp2()) + s) + b,
    }
    for name, g in graphs.items():
      with self.subTest(name):
        leaves = [(UOp.new_buffer("CPU", 4, dtypes.float32), UOp.new_buffer("CPU:1", 4, dtypes.float32)) for _ in range(2)]
        want, u = g(*leaves[0]).device, g(*leaves[1])
        self.assertEqual(first_device(u), want)
        self.assertEqual(u.device, want)   # kept as u's: what the property returns
    u = ((c * 3.0).exp2() + (UOp.new_buffer("CPU", 4, dtypes.float32) + 1.0))
    first_device(u)
    self.assertTrue(all("_RECURSIVE_PROPERTY_device" not in x.__dict__ for x in u.src))   # no other node's device computed

if __name__ == "__main__":
  unittest.main()
