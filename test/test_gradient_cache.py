"""On the 0.14 line a gradient of a graph whose structure was seen before comes from a kept template (tinygrad/gradient_cache.py): the
same rules' gradients on this graph's leaves (buffers, a vmap scope's RANGE). A hit must give the very UOps the rules give (`is`), the
backward metadata the rules give, and values that match numpy (float64)."""
from fork_topics import skip_module_unless
skip_module_unless('gradient-cache')
import unittest, unittest.mock
import numpy as np
from tinygrad import Tensor, vmap, dtypes
from tinygrad.uop.ops import all_metadata
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's gradient templates: the 0.12 line's gradient has no hook")
import tinygrad.gradient_cache as gradient_cache

def rand(*shape, seed:int) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape)

class CountRules:
  """counts the gradients computed rule by rule (kept or not) while in the with block"""
  def __enter__(self):
    self.n, orig = 0, gradient_cache.KeptGradient.keep
    def counted(kept, grads):
      self.n += 1
      return orig(kept, grads)
    self.patch = unittest.mock.patch.object(gradient_cache.KeptGradient, "keep", counted)
    self.patch.start()
    return self
  def __exit__(self, *exc): self.patch.stop()

def by_rules(loss:Tensor, *targets:Tensor) -> list:
  """the gradients the rules give, no template"""
  with unittest.mock.patch.object(gradient_cache, "GRADIENT_TEMPLATES", 0): return loss.gradient(*targets)

def mlp_loss(w1, b1, w2, x, y): return ((x @ w1 + b1).relu() @ w2 - y) ** 2
def np_mlp_grads(w1, b1, w2, x, y):
  h = x @ w1 + b1
  d = 2 * (np.maximum(h, 0) @ w2 - y)
  g = d * w2 * (h > 0)
  return np.outer(x, g), g, d * np.maximum(h, 0)

class TestGradientTemplates(unittest.TestCase):
  def params(self, seed:int) -> list[Tensor]:
    # y of one element reshaped to a scalar: a 0-d Tensor of data is a constant on 0.14, its value part of the graph's structure
    return [Tensor(rand(*s, seed=seed+i), dtype=dtypes.float64).realize().reshape(r) for i,(s,r) in
            enumerate([((4, 6),)*2, ((6,),)*2, ((6,),)*2, ((4,),)*2, ((1,), ())])]

  def test_hit_is_the_rules_gradient(self):
    self.params(0)
    for seed in (1, 2):   # the first structure may be kept by an earlier test: two calls on new buffers
      p = self.params(seed)
      loss = mlp_loss(*p)
      with CountRules() as rules: got = loss.gradient(*p[:3])
      want = by_rules(loss, *p[:3])
    self.assertEqual(rules.n, 0)
    for g, w in zip(got, want): self.assertIs(g.uop, w.uop)

  def test_values_on_new_buffers(self):
    for seed in (10, 20, 30):
      p = self.params(seed)
      got = [g.numpy() for g in mlp_loss(*p).gradient(*p[:3])]
      for g, w in zip(got, np_mlp_grads(*[t.numpy() for t in p])): np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)

  def test_backward_metadata_on_a_hit(self):
    x, w = [Tensor(rand(3, 4, seed=40)).realize() for _ in range(2)]
    (x @ w.T).relu().sum().gradient(x, w)
    x, w = Tensor(rand(3, 4, seed=41)).realize(), Tensor(rand(3, 4, seed=42)).realize()
    with CountRules() as rules: gx, gw = (x @ w.T).relu().sum().gradient(x, w)
    self.assertEqual(rules.n, 0)
    for g in (gx, gw): self.assertTrue(all(m.backward for m in all_metadata[g.uop]))
    self.assertIn("relu", {m.name for u in gx.uop.toposort() for m in all_metadata.get(u, ())})

  def test_target_outside_the_graph(self):
    for seed in (50, 51):
      x, y, z = [Tensor(rand(5, seed=seed+i)).realize() for i in range(3)]
      gx, gz = (x * y).sum().gradient(x, z)
      np.testing.assert_allclose(gx.numpy(), y.numpy())
      np.testing.assert_allclose(gz.numpy(), np.zeros(5))

  def test_other_structure_takes_the_rules(self):
    p = self.params(60)
    mlp_loss(*p).gradient(*p[:3])
    with CountRules() as rules: g = (mlp_loss(*p) * 3).gradient(p[0])[0]   # one more node: another structure
    self.assertEqual(rules.n, 1)
    np.testing.assert_allclose(g.numpy(), 3 * np_mlp_grads(*[t.numpy() for t in p])[0], rtol=1e-10)

class TestPerExampleGradients(unittest.TestCase):
  """inside vmap each call's scope has a new RANGE: a leaf of the template like a buffer"""
  def test_vmapped_gradients_called_again(self):
    f = vmap(lambda w1, b1, w2, x, y: tuple(mlp_loss(w1, b1, w2, x, y).gradient(w1, b1, w2)), in_axes=(None, None, None, 0, 0))
    calls = [[rand(4, 6, seed=s), rand(6, seed=s+1), rand(6, seed=s+2), rand(7, 4, seed=s+3), rand(7, seed=s+4)] for s in (70, 80, 90)]
    for i, args in enumerate(calls):
      with CountRules() as rules: got = [g.numpy() for g in f(*[Tensor(a).realize() for a in args])]
      if i: self.assertEqual(rules.n, 0)
      want = [np.stack(g) for g in zip(*[np_mlp_grads(*args[:3], x, y) for x, y in zip(args[3], args[4])])]
      for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)

if __name__ == "__main__":
  unittest.main()
