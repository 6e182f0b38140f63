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

  def test_chunks_inside_a_scope(self):
    # an inner scope's chunks slice its inputs from a bound start (a leaf): a placeholder for it has no value range, so the template's
    # shrink looks out of bounds; its shapes were computed when kept, which raised "invalid shrink" on the first call
    f = vmap(vmap(lambda a, b: b * a, in_axes=(0, -1), chunk_size=1))
    calls = [(rand(3, 2, seed=i), rand(3, 4, 2, seed=10+i)) for i in range(3)]
    outs, batched = run_calls(f, calls)
    self.assertEqual(batched, 0)
    for (out,), (A, B) in zip(outs, calls):
      np.testing.assert_allclose(out, np.stack([np.stack([b[:, j] * a[j] for j in range(2)]) for a, b in zip(A, B)]), rtol=1e-6)

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

from fork_topics import skip_unless
from vmap_oracle import np_mlp_per_example_grads

class CountCalls:
  """counts the calls of batching.<name> while in the with block"""
  def __init__(self, name:str): self.name = name
  def __enter__(self):
    self.n, self.orig = 0, getattr(batching, self.name)
    def counted(*args):
      self.n += 1
      return self.orig(*args)
    setattr(batching, self.name, counted)
    return self
  def __exit__(self, *exc): setattr(batching, self.name, self.orig)

@skip_unless('gradient-cache')
class TestKeptWalk(unittest.TestCase):
  """a vmap scope whose outputs a gradient template built (TEMPLATE_BUILT) on the same leaves takes what _walk_scope found for that
  template's results before: the same key and leaves, which TEMPLATE_CHECK=1 compares with the walk's"""
  @staticmethod
  def grads(w1, b1, w2, x, y): return tuple((((x @ w1 + b1).relu() @ w2 - y) ** 2).gradient(w1, b1, w2))

  def run_calls(self, fn, n:int, check_from:int=99):
    from tinygrad.helpers import Context
    w = [Tensor(rand(4, 6, seed=1)).realize(), Tensor(rand(6, seed=2)).realize(), Tensor(rand(6, seed=3)).realize()]
    walks, kept, batched = [], [], []
    for i in range(n):
      X, Y = rand(7, 4, seed=10+i), rand(7, seed=20+i)
      with Context(TEMPLATE_CHECK=int(i >= check_from)), CountCalls("_walk_scope") as walk, CountCalls("_follow") as follow, \
           CountBatchings() as rules:
        out = fn(*w, Tensor(X).realize(), Tensor(Y).realize())
        Tensor.realize(*out)
      walks.append(walk.n)
      kept.append(follow.n > 0)
      batched.append(rules.n)
      yield out, [t.numpy() for t in w], X, Y
    self.walks, self.kept, self.batched = walks, kept, batched

  def test_gradients_take_the_kept_walk(self):
    fn = vmap(self.grads, in_axes=(None, None, None, 0, 0))
    for out, w, X, Y in self.run_calls(fn, 5, check_from=4):
      for g, want in zip(out, np_mlp_per_example_grads(*w, X, Y)): np.testing.assert_allclose(g.numpy(), want, rtol=1e-4, atol=1e-5)
    # the first call takes the rules, the second the gradient template (and walks, keeping what it finds), the third on the kept walk
    self.assertEqual(self.walks[2:4], [0, 0])
    self.assertEqual(self.kept[2:], [True]*3)
    self.assertEqual(self.walks[4], 1+2+3)   # TEMPLATE_CHECK: at each output, the walk of the outputs so far, compared

  def test_an_output_no_template_built_walks_them_all(self):
    # the loss is no gradient template's result: its walk needs the nodes of the outputs before it, which are walked then
    def grads_and_loss(w1, b1, w2, x, y):
      loss = ((x @ w1 + b1).relu() @ w2 - y) ** 2
      g1, g2, g3 = loss.gradient(w1, b1, w2)
      return g1, loss * 1.0, g3, g2
    fn = vmap(grads_and_loss, in_axes=(None, None, None, 0, 0))
    for (g1, l, g3, g2), (w1, b1, w2), X, Y in self.run_calls(fn, 4, check_from=3):
      want = np_mlp_per_example_grads(w1, b1, w2, X, Y)
      for g, wg in zip((g1, g2, g3), want): np.testing.assert_allclose(g.numpy(), wg, rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(l.numpy(), (np.maximum(X @ w1 + b1, 0) @ w2 - Y) ** 2, rtol=1e-4, atol=1e-5)
    self.assertEqual(self.kept[2:], [True]*2)
    self.assertEqual(self.walks[2], 4)   # the first output took the kept walk, the loss walks it and itself, then the rest as before

  def test_no_kept_walk_after_a_long_one(self):
    # an output walked the long way leaves its nodes in the walk's index: the outputs after it walk too (a replay of the kept ones only
    # would lose them), so the loss after them finds what the walk of all three finds
    def grads_and_loss(w1, b1, w2, x, y):
      loss = ((x @ w1 + b1).relu() @ w2 - y) ** 2
      g1, g2, _ = loss.gradient(w1, b1, w2)
      return g1, g2, loss * 1.0
    fn = vmap(grads_and_loss, in_axes=(None, None, None, 0, 0))
    calls = self.run_calls(fn, 4, check_from=3)
    for i, ((g1, g2, l), (w1, b1, w2), X, Y) in enumerate(calls):
      want = np_mlp_per_example_grads(w1, b1, w2, X, Y)
      np.testing.assert_allclose(g1.numpy(), want[0], rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(g2.numpy(), want[1], rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(l.numpy(), (np.maximum(X @ w1 + b1, 0) @ w2 - Y) ** 2, rtol=1e-4, atol=1e-5)
      if i == 1:   # the first output's kept walk goes: the next call walks it the long way, then the second output
        for k in [k for k in batching._walks if len(k[1]) == 1]: del batching._walks[k]
    self.assertEqual(self.kept[3], True)
    self.assertEqual(self.batched[1:3], [0, 0])   # every output's batch from its template: each walk found the key the second call's did

  def test_filled_consts_of_template_results(self):
    # vmap's filled constants of a gradient template's results, none where the template holds no AFTER: what the toposort finds
    import importlib
    V = importlib.import_module("tinygrad.vmap")
    from tinygrad.structure_template import built_by, TEMPLATE_BUILT
    fn = vmap(self.grads, in_axes=(None, None, None, 0, 0))
    got = []
    def filled(roots):
      got.append((ret:=orig(roots), [built_by(r) is not None for r in roots]))
      # the long way: the same roots with no mark of the template that built them
      bare = [r.__dict__.pop(TEMPLATE_BUILT, None) for r in roots]
      try: want = orig(roots)
      finally:
        for r, b in zip(roots, bare):
          if b is not None: r.__dict__[TEMPLATE_BUILT] = b
      self.assertEqual(ret, want)
      return ret
    orig, V._filled_consts = V._filled_consts, filled
    try: list(self.run_calls(fn, 3))
    finally: V._filled_consts = orig
    self.assertEqual(got[-1], ({}, [True]*3))   # from the second call on (the first too where an earlier test kept the template)

class TestClosedBuild(unittest.TestCase):
  def test_in_no_range_as_the_walk_finds(self):
    # a batch built from a scope template is in no RANGE (realize's open-scope check) where its leaves and the template are in none: the
    # inner scope's batch reads the outer scope's RANGE (not closed), the outer one's doesn't
    got = []
    def closed(t, leaves, seen):
      got.append((ret:=orig(t, leaves, seen), not any(batching._scoped(b, None, {}) for b in [t.rebuild(dict(zip(t.placeholders, leaves)))])))
      return ret
    orig, batching._closed_build = batching._closed_build, closed
    from tinygrad.helpers import Context
    f = vmap(lambda p, B: vmap(lambda q: ((p - q) ** 2).sum().sqrt())(B), in_axes=(0, None))
    try:
      for i in range(4):
        A, B = rand(5, 3, seed=i), rand(4, 3, seed=10+i)
        with Context(TEMPLATE_CHECK=int(i == 3)): out = f(Tensor(A), Tensor(B)).numpy()
        np.testing.assert_allclose(out, np.array([[np.sqrt(((a - b) ** 2).sum()) for b in B] for a in A]), rtol=1e-5)
        # an inner scope's batch, one example of the outer scope, realized: the realize leaves it lazy
        g = vmap(lambda p, B: vmap(lambda q: (p * q).sum())(B).realize() * 2, in_axes=(0, None))
        np.testing.assert_allclose(g(Tensor(A), Tensor(B)).numpy(), 2 * A @ B.T, rtol=1e-5)
    finally: batching._closed_build = orig
    self.assertTrue(got)
    self.assertEqual([g for g,_ in got], [w for _,w in got])
    self.assertIn(True, [g for g,_ in got])
    self.assertIn(False, [g for g,_ in got])
