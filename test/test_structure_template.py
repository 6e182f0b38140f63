"""The structure templates the 0.14 line's eager calls share (tinygrad/structure_template.py): the walk that keys a graph by structure,
the placeholders, a template's rebuild order and its build on new leaves, the kept dict, and TEMPLATE_CHECK, which builds the long way's
result on every hit of batching.py, gradient_cache.py and engine/callify_cache.py and raises where the hit's isn't the very same UOps.
Every expected value here is built directly (on the new leaves, or with numpy), never taken from a template."""
import unittest, unittest.mock
from dataclasses import replace
import numpy as np
from fork_topics import skip_unless
from tinygrad import Tensor, vmap, dtypes
from tinygrad.helpers import Context
from tinygrad.uop.ops import UOp, Ops
from tinygrad.fork_line import LINE_012
from vmap_oracle import np_mlp_per_example_grads as np_per_example_grads
if LINE_012: raise unittest.SkipTest("the 0.14 line's structure templates: 0.12 has no batch_scope, gradient or realize templates")
import tinygrad.structure_template as st
import tinygrad.batching as batching

def rand(*shape, seed:int) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
def buf(n:int=4, dtype=dtypes.float32) -> UOp: return UOp.new_buffer("CPU", n, dtype)
def f(a:UOp, b:UOp) -> UOp: return ((a + b) * a).exp2().reshape((2, 2)).sum(0)   # a small graph of two leaves

def leaf_key(u:UOp): return st.anonymous(u) if u.op is Ops.BUFFER else None
WALKED_OPS = {Ops.ADD, Ops.MUL, Ops.EXP2, Ops.CAST, Ops.RESHAPE, Ops.SHRINK, Ops.REDUCE, Ops.CONST, Ops.STACK}
def walked(root:UOp) -> st.Structure|None: return w if (w:=st.Structure()).walk(root, WALKED_OPS, leaf_key) else None

class TestWalk(unittest.TestCase):
  def test_same_structure_on_new_buffers_same_key(self):
    a, b, c, d = buf(), buf(), buf(), buf()
    w1, w2 = walked(f(a, b)), walked(f(c, d))
    self.assertEqual(tuple(w1.key), tuple(w2.key))
    self.assertEqual((w1.leaves, w2.leaves), ([a, b], [c, d]))   # each leaf where it is first read
    self.assertEqual(list(w1.index), list(f(a, b).toposort()))

  def test_what_is_part_of_the_structure(self):
    a, b = buf(), buf()
    key = tuple(walked(f(a, b)).key)
    self.assertEqual(tuple(walked(f(b, a)).key), key)   # the same structure: its leaves are listed where they are read
    for other in (f(a, a), f(buf(dtype=dtypes.float16), buf(dtype=dtypes.float16)), f(buf(8).shrink(((0, 4),)), buf(8).shrink(((4, 8),))),
                  ((a + b) * a).exp2().reshape((4, 1)).sum(0), ((a + b) * a * 2).exp2().reshape((2, 2)).sum(0)):
      with self.subTest(other=str(other)[:80]):
        self.assertIsNotNone(w:=walked(other))
        self.assertNotEqual(tuple(w.key), key)

  def test_swapped_leaves_differ_same_leaf_twice_differs(self):
    a, b = buf(), buf()
    self.assertNotEqual(tuple(walked(a + b * a).key), tuple(walked(a + a * b).key))
    self.assertNotEqual(tuple(walked(a + b).key), tuple(walked(a + a).key))

  def test_other_ops_are_not_kept(self):
    a = buf()
    self.assertIsNone(walked((a + 1).sqrt()))   # SQRT isn't in this walk's ops and isn't a leaf

  def test_node_named_leaf(self):
    a, b = buf(), buf()
    s = st.Structure()
    s.leaf(a, "A")
    s.named(b, "B")
    s.node(u:=a + b)
    self.assertEqual(s.key, ["A", "B", (Ops.ADD, u.dtype, None, None, (0, 1))])
    self.assertEqual((s.leaves, s.index), ([a], {a: 0, b: 1, u: 2}))

class TestPlaceholders(unittest.TestCase):
  def test_no_graph_has_them(self):
    r, b = UOp.range(5, 3), buf()
    x = b.reshape((2, 2))
    for i, leaf in enumerate((r, b, x)):
      with self.subTest(op=str(leaf.op)):
        p = st.placeholder(leaf, i)
        self.assertIsNot(p, leaf)
        self.assertEqual((p.dtype, p.shape), (leaf.dtype, leaf.shape))
        self.assertEqual(p.op, leaf.op if leaf.op in (Ops.RANGE, Ops.BUFFER) else Ops.PARAM)
        self.assertIsNot(p, st.placeholder(leaf, i+1))
        self.assertIs(p, st.placeholder(leaf, i))

class TestTemplate(unittest.TestCase):
  def test_build_on_new_leaves_is_building_on_them(self):
    a, b, c, d = buf(), buf(), buf(), buf()
    t = st.make_template([f(a, b), (a * 3).exp2(), None], [a, b])
    got = t.build(dict(zip(t.placeholders, [c, d])))
    self.assertIs(got[0], f(c, d))
    self.assertIs(got[1], (c * 3).exp2())
    self.assertIsNone(got[2])
    self.assertIs(t.rebuild(dict(zip(t.placeholders, [c, d]))), f(c, d))

  def test_built_nodes_keep_their_shapes(self):
    # a build puts each new node's shape where UOp._shape keeps it, so no one computes it for the whole graph; the shapes are numpy's
    a, b = buf(), buf()
    t = st.make_template([f(a, b), ((a * 3).reshape((2, 2)) + b.reshape((2, 2)).sum(0)).permute((1, 0))], [a, b])
    c, d = buf(), buf()
    got = t.build(dict(zip(t.placeholders, [c, d])))
    x, y = np.zeros(4), np.zeros(4)
    want = [((x + y) * x).reshape(2, 2).sum(0).shape, ((x * 3).reshape(2, 2) + y.reshape(2, 2).sum(0)).transpose(1, 0).shape]
    kept = "_RECURSIVE_PROPERTY__shape"
    self.assertEqual([g.__dict__[kept] for g in got], want)
    new = [u for g in got for u in g.toposort() if any(p in u.toposort() for p in (c, d)) and u not in (c, d)]
    self.assertGreater(len(new), 5)
    self.assertTrue(all(kept in u.__dict__ for u in new))

  def test_order_is_what_reads_a_placeholder_srcs_first(self):
    a, b = buf(), buf()
    t = st.make_template([f(a, b), (b + 1).exp2()], [a, b])
    nodes = UOp.sink(*t.built).toposort()
    reads = [x for x in nodes if x.op is not Ops.SINK and x not in t.placeholders and any(p in x.toposort() for p in t.placeholders)]
    self.assertEqual(set(t.order), set(reads))
    self.assertEqual(len(t.order), len(set(t.order)))
    placed = {u: i for i, u in enumerate(t.order)}
    for u in t.order:
      for s in u.src:
        if s in placed: self.assertLess(placed[s], placed[u])

  def test_reading_a_leafs_insides_isnt_kept(self):
    a, b = buf(), buf()
    leaf = a + b   # a leaf with insides: a template reading `a` itself would keep this graph's `a`
    self.assertIsNone(st.make_template([leaf * a], [leaf]))
    self.assertIsNotNone(st.make_template([leaf * 2], [leaf]))   # a constant is no inside

  def test_metadata_kept_per_node(self):
    from tinygrad.uop.ops import all_metadata
    from tinygrad.helpers import Metadata
    a, b, c = buf(), buf(), buf()
    all_metadata[(x:=(a * b).exp2())] = (md:=(Metadata("test_md"),))
    t = st.make_template([x], [a, b], metadata=True)
    self.assertEqual(t.metadata, tuple(md if u.op is Ops.EXP2 else () for u in t.order))
    new = t.build(dict(zip(t.placeholders, [c, b])))[0]
    self.assertIs(new, (c * b).exp2())
    self.assertEqual(all_metadata.get(new), md)

class TestKeptTemplates(unittest.TestCase):
  def test_oldest_goes_past_size_first_kept_stays(self):
    kept = st.KeptTemplates(3)
    for i in range(5): kept.keep((i,), f"t{i}")
    kept.keep((4,), "other")
    self.assertEqual(dict(kept), {(2,): "t2", (3,): "t3", (4,): "t4"})

class TestCheckHit(unittest.TestCase):
  def test_raises_unless_the_same_uops(self):
    a, b = buf(), buf()
    st.check_hit([a + b, None], [a + b, None], "test")
    with self.assertRaises(AssertionError): st.check_hit([a + b], [b + a], "test")
    with self.assertRaises(AssertionError): st.check_hit([a + b], [a + b, None], "test")

def counted(module):
  """the check_hit calls `module` makes while in the with block (each one a hit checked against the long way)"""
  return unittest.mock.patch.object(module, "check_hit", wraps=st.check_hit)

def per_example_grads(w1, b1, w2, x, y): return tuple((((x @ w1 + b1).relu() @ w2 - y) ** 2).gradient(w1, b1, w2))

class TestTemplateCheck(unittest.TestCase):
  """TEMPLATE_CHECK=1: every hit is built the long way too and must be the same UOps; the results still match numpy"""
  def test_vmap_scopes_checked(self):
    fn = vmap(lambda p, B: vmap(lambda q: ((p - q) ** 2).sum().sqrt() * 1.25)(B), in_axes=(0, None))
    with Context(TEMPLATE_CHECK=1), counted(batching) as check:
      for seed in range(3):
        A, B = rand(5, 3, seed=seed), rand(4, 3, seed=10+seed)
        np.testing.assert_allclose(fn(Tensor(A), Tensor(B)).numpy(), np.sqrt(((A[:, None] - B[None]) ** 2).sum(-1)) * 1.25, rtol=1e-5)
    self.assertGreaterEqual(check.call_count, 4)   # both scopes of the second and third calls

  @skip_unless('gradient-cache', 'callify-cache')
  def test_gradients_and_realizes_checked(self):
    import tinygrad.gradient_cache as gradient_cache
    import tinygrad.engine.callify_cache as callify_cache
    fn = vmap(per_example_grads, in_axes=(None, None, None, 0, 0))
    with Context(TEMPLATE_CHECK=1), counted(batching) as scopes, counted(gradient_cache) as grads, counted(callify_cache) as calls:
      for seed in range(4):
        args = [rand(4, 6, seed=seed), rand(6, seed=seed+1), rand(6, seed=seed+2), rand(7, 4, seed=seed+3), rand(7, seed=seed+4)]
        got = fn(*[Tensor(a).realize() for a in args])
        Tensor.realize(*got)
        for g, w in zip(got, np_per_example_grads(*args)): np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-5)
    self.assertGreater(scopes.call_count, 0)
    self.assertGreater(grads.call_count, 0)
    self.assertGreater(calls.call_count, 0)

  def test_a_wrong_template_is_caught(self):
    fn = vmap(lambda x: (x * 0.375).exp2())   # a constant no other test uses: a structure of its own
    x = rand(3, 2, seed=0)
    fn(Tensor(x)).realize()
    key = next(k for k, t in batching._templates.items()
               if t is not None and any(u.op is Ops.CONST and u.arg == 0.375 for u in k if isinstance(u, UOp)))
    t = batching._templates[key]
    wrong = t.built[0].sqrt()
    batching._templates[key] = replace(t, built=(wrong,), order=t.order + (wrong,))
    try:
      with Context(TEMPLATE_CHECK=0): np.testing.assert_allclose(fn(Tensor(x)).numpy(), np.sqrt(np.exp2(x * 0.375)), rtol=1e-6)   # used
      with Context(TEMPLATE_CHECK=1), self.assertRaises(AssertionError): fn(Tensor(x))
    finally: batching._templates[key] = t

if __name__ == "__main__":
  unittest.main()
