"""The callify-cache topic (0.14 line): a realize of a tensor graph whose structure was realized before builds its CALL from the kept
template (tinygrad/engine/callify_cache.py) instead of transform_to_call's four graph rewrites. A hit must give what transform_to_call
gives on that graph, new output buffers each time, and results that match numpy; graphs it doesn't keep take the long way."""
from fork_topics import skip_module_unless
skip_module_unless('callify-cache')
import unittest
from dataclasses import replace
import numpy as np
from tinygrad import Tensor
from tinygrad.uop.ops import UOp, Ops
import tinygrad.tensor as tensor_module
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's realize cache: 0.12's realize has no transform_to_call")
import tinygrad.engine.callify_cache as callify_cache
from tinygrad.vmap import vmap
from vmap_oracle import np_mlp_per_example_grads

def rand(*shape, seed:int, dtype=np.float32) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(dtype)

class CountCalls:
  """counts the calls of module.name (a function the realize looks up there) while in the with block"""
  def __init__(self, module, name:str): self.module, self.name = module, name
  def __enter__(self):
    self.n, self.orig = 0, getattr(self.module, self.name)
    def counted(*args):
      self.n += 1
      return self.orig(*args)
    setattr(self.module, self.name, counted)
    return self
  def __exit__(self, *exc): setattr(self.module, self.name, self.orig)

def CountTransforms() -> CountCalls: return CountCalls(tensor_module, "transform_to_call")   # the realizes that went the long way
def CountWalks() -> CountCalls: return CountCalls(callify_cache, "graph_structure")         # the realizes that walked their graph

def realize_twice(fxn, *inputs_per_call:tuple[np.ndarray, ...]) -> tuple[list[np.ndarray], int]:
  """fxn on Tensors of each input tuple, each realized; the results as numpy and how many realizes after the first went the long way"""
  inputs = [[Tensor(x).realize() for x in xs] for xs in inputs_per_call]
  outs = [fxn(*inputs[0]).realize()]
  with CountTransforms() as count: outs += [fxn(*xs).realize() for xs in inputs[1:]]
  return [o.numpy() for o in outs], count.n

class TestCallifyCacheHits(unittest.TestCase):
  def test_same_graph_on_new_buffers_hits(self):
    f = lambda a, b: ((a * b).sum(1) + 1.5).exp2()
    calls = [(rand(3, 4, seed=i), rand(4, seed=10+i)) for i in range(3)]
    outs, long_way = realize_twice(f, *calls)
    self.assertEqual(long_way, 0)
    for out, (a, b) in zip(outs, calls): np.testing.assert_allclose(out, np.exp2((a * b).sum(1) + 1.5), rtol=1e-5)

  def test_earlier_results_stay_intact(self):
    a0, a1 = rand(5, seed=0), rand(5, seed=1)
    r0 = (Tensor(a0) * 2 + 1).realize()
    r1 = (Tensor(a1) * 2 + 1).realize()
    self.assertIsNot(r0.uop.base, r1.uop.base)
    np.testing.assert_allclose(r0.numpy(), a0 * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(r1.numpy(), a1 * 2 + 1, rtol=1e-6)

  def test_hit_builds_what_transform_to_call_builds(self):
    a, b = Tensor(rand(3, 4, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    build = lambda: UOp.sink((a + b).contiguous().relu().uop, (a * b).reshape(4, 3).uop, (a - b).sum().uop)
    Tensor.realize(*[Tensor(u) for u in build().src])   # keeps the template
    big_sink = build()
    key, nodes, inputs = callify_cache.graph_structure(big_sink)
    self.assertIsNotNone(template:=callify_cache._templates.get(key))
    (got, got_map), (want, want_map) = callify_cache.instantiate(template, nodes, inputs), tensor_module.transform_to_call(big_sink)
    self.assertIs(got.src[0], want.src[0])
    self.assertEqual(got.arg, want.arg)
    renamed: dict[UOp, UOp] = {}
    for g, w in zip(got.src[1:], want.src[1:], strict=True):
      if g is w: continue
      self.assertEqual((g.op, g.src, replace(g.arg, slot=0)), (w.op, w.src, replace(w.arg, slot=0)))
      self.assertNotIn(g, inputs)   # a new output buffer
      renamed[w] = g
    self.assertEqual(set(got_map), set(want_map))
    for k, v in got_map.items(): self.assertIs(v, callify_cache._swap_buffers(want_map[k], dict(renamed)))

  def test_same_buffer_twice_is_another_graph(self):
    x, y = rand(4, seed=0), rand(4, seed=1)
    f = lambda a, b: a * b + a
    outs, _ = realize_twice(f, (x, y), (x, y))
    t = Tensor(x).realize()
    with CountTransforms() as count: np.testing.assert_allclose(f(t, t).numpy(), x * x + x, rtol=1e-6)
    self.assertEqual(count.n, 1)
    np.testing.assert_allclose(outs[1], x * y + x, rtol=1e-6)

  def test_dtype_and_shape_are_part_of_the_structure(self):
    f = lambda a: (a * 3).sum(0)
    for x in (rand(3, 4, seed=0), rand(3, 5, seed=1), rand(3, 4, seed=2).astype(np.float64), (rand(3, 4, seed=3) * 10).astype(np.int32)):
      with self.subTest(shape=x.shape, dtype=str(x.dtype)):
        out, _ = realize_twice(f, (x,), (x + 1,))
        np.testing.assert_allclose(out[1], ((x + 1) * 3).sum(0), rtol=1e-6)

  def test_vmap_called_again_hits(self):
    f = vmap(lambda x, c: Tensor.stack(x * c[0], x.sin() * c[1]).sum(0), in_axes=(0, None))
    calls = [(rand(6, 4, seed=i), rand(2, 4, seed=10+i)) for i in range(3)]
    outs, long_way = realize_twice(f, *calls)
    self.assertEqual(long_way, 0)
    for out, (x, c) in zip(outs, calls):
      np.testing.assert_allclose(out, np.stack([xi * c[0] + np.sin(xi) * c[1] for xi in x]), rtol=1e-5, atol=1e-6)

def kernels_of(fxn) -> int:
  from tinygrad.helpers import GlobalCounters
  before = GlobalCounters.kernel_count
  fxn()
  return GlobalCounters.kernel_count - before

class TestScheduleTemplate(unittest.TestCase):
  """from the third realize of a structure on, the compiled schedule comes from the template too"""
  @staticmethod
  def f(a, b): return (a @ b).contiguous().relu().sum(0) + a.max()

  def test_results_and_kernels_each_call(self):
    calls = [(rand(5, 3, seed=i), rand(3, 4, seed=10+i)) for i in range(4)]
    counts, outs = [], []
    for a, b in calls:
      ta, tb = Tensor(a).realize(), Tensor(b).realize()
      counts.append(kernels_of(lambda: outs.append(self.f(ta, tb).realize())))
    self.assertEqual(len(set(counts)), 1)
    self.assertGreater(counts[0], 1)
    for out, (a, b) in zip(outs, calls):   # every result intact: each call has buffers of its own
      np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0).sum(0) + a.max(), rtol=1e-5)

  def test_schedule_is_what_the_long_way_schedules(self):
    from tinygrad.schedule import create_linear_with_vars
    from tinygrad.engine.realize import compile_linear
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    for _ in range(2): self.f(a, b).realize()
    key, nodes, inputs = callify_cache.graph_structure(UOp.sink(self.f(a, b).uop))
    self.assertIsNotNone((template:=callify_cache._templates[key]).linear)
    call, _ = callify_cache.instantiate(template, nodes, inputs)
    got, want = callify_cache.instantiate_linear(template, call.src[1:]), compile_linear(create_linear_with_vars(call)[0])
    self.assertEqual(len(got.src), len(want.src))
    renamed: dict[UOp, UOp] = {}
    for g, w in zip(got.src, want.src):
      self.assertIs(g.src[0], w.src[0])
      for gu, wu in zip(UOp.sink(*g.src[1:]).toposort(), UOp.sink(*w.src[1:]).toposort(), strict=True):
        if gu.op is not Ops.BUFFER: self.assertEqual((gu.op, gu.arg, gu.dtype), (wu.op, wu.arg, wu.dtype))
        elif wu in call.src[1:]: self.assertIs(gu, wu)
        else: self.assertIs(renamed.setdefault(wu, gu), gu)   # an intermediate: a new buffer of its own, the same one wherever it's used
    self.assertTrue(all(gu is not wu for wu, gu in renamed.items()))

  def test_views_lie_where_the_long_way_puts_them(self):
    # the memory planner puts intermediates in one buffer, as views of it: a realize from the template takes each view's place from the
    # template, where UOp.buffer would find it with a graph_rewrite per kernel arg
    from tinygrad.uop.ops import buffers
    f = lambda a, b: (a @ b).softmax(0).sum(0)   # its max and sum over axis 0 are kernels of their own: intermediates
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    for _ in range(2): f(a, b).realize()
    key, nodes, inputs = callify_cache.graph_structure(UOp.sink(f(a, b).uop))
    call, _ = callify_cache.instantiate(template:=callify_cache._templates[key], nodes, inputs)
    views = [u for c in callify_cache.instantiate_linear(template, call.src[1:]).src for u in c.src[1:] if u.op is Ops.BITCAST]
    self.assertGreater(len(views), 0)
    for v in views:
      base, offset = v.contiguous_view()
      self.assertEqual((buffers[v].base, buffers[v].offset, buffers[v].size), (base.base.buffer, offset*base.dtype.itemsize, v.numel()))
    orig = UOp.contiguous_view
    try:
      def searched(_): raise AssertionError("a view's place was searched for again")
      UOp.contiguous_view = searched
      out = f(a, b).realize()
    finally: UOp.contiguous_view = orig
    m = a.numpy() @ b.numpy()
    np.testing.assert_allclose(out.numpy(), (np.exp(m - m.max(0)) / np.exp(m - m.max(0)).sum(0)).sum(0), rtol=1e-5)

  def test_tensors_on_a_hit_are_what_the_map_rewrite_makes(self):
    # a hit sets each realized Tensor to what its node becomes without rewriting every Tensor's graph (_apply_map_to_tensors): under
    # TEMPLATE_CHECK=1 the rewrite runs too and each Tensor's UOp must be the very one; a Tensor built on a realized one takes the rewrite
    from tinygrad.helpers import Context
    f = lambda a, b: ((a * b).sum(1) + 2.5, (a - b).max(1))
    a, b = Tensor(rand(3, 4, seed=0)).realize(), Tensor(rand(4, seed=1)).realize()
    an, bn = a.numpy(), b.numpy()
    Tensor.realize(*f(a, b))
    checked, orig = [], callify_cache.check_hit
    def check_hit(got, want, what):
      if what == "a realize's Tensors": checked.append(len(got))
      return orig(got, want, what)
    callify_cache.check_hit = check_hit
    try:
      with Context(TEMPLATE_CHECK=1):
        x, y = f(a, b)
        Tensor.realize(x, y)
      self.assertEqual(checked, [2])
      for t in (x, y): self.assertIs(t.uop.base.op, Ops.BUFFER)
      np.testing.assert_allclose(x.numpy(), (an * bn).sum(1) + 2.5, rtol=1e-5)
      np.testing.assert_allclose(y.numpy(), (an - bn).max(1), rtol=1e-6)
      x, y = f(a, b)
      z = x * 3                    # alive, on x: the rewrite puts it on x's buffer
      with Context(TEMPLATE_CHECK=0), CountTransforms() as count: Tensor.realize(x, y)
      self.assertEqual((count.n, checked), (0, [2]))   # a hit, whose Tensors took the rewrite (nothing to check against)
      self.assertIs(z.uop.src[0], x.uop)
      np.testing.assert_allclose(z.numpy(), ((an * bn).sum(1) + 2.5) * 3, rtol=1e-5)
    finally: callify_cache.check_hit = orig

  def test_launches_run_and_count_what_the_long_way_does(self):
    # a kept schedule runs from its launches (made once: runtime, launch dims, estimates), not exec_kernel a kernel: the same results
    # and the same GlobalCounters as the long way's run
    from tinygrad.helpers import GlobalCounters, Context
    f = lambda a, b: ((a @ b).softmax(0) * 2).sum(0)
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    m = a.numpy() @ b.numpy()
    want = (np.exp(m - m.max(0)) / np.exp(m - m.max(0)).sum(0) * 2).sum(0)
    launched, orig = [], callify_cache.launch
    def launch(launches, bufs, update_stats):
      launched.append(len(launches))
      return orig(launches, bufs, update_stats)
    callify_cache.launch = launch
    try:
      counts = []
      for _ in range(3):
        GlobalCounters.reset()
        # full builds from the first realize: a quick first build's op estimates differ (engine/first_tier.py), and whether this process
        # built the kernel before would decide the test
        with Context(TIERED=0): out = f(a, b).realize()
        counts.append((GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem))
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
    finally: callify_cache.launch = orig
    self.assertEqual(len(launched), 2)        # the second realize keeps the schedule, and launches with the third
    self.assertGreater(launched[0], 1)        # kernels with intermediates between them (views of the planner's buffer)
    self.assertEqual(counts[1], counts[0])
    self.assertEqual(counts[2], counts[0])

  def test_plan_launches_on_the_linears_buffers(self):
    # a kept schedule's hit builds no linear: its plan gives each kernel the Buffers the instantiated linear's args would (UOp.buffer),
    # the CALL args' own and new intermediates, views at their places; TEMPLATE_CHECK=1 builds the linear and compares (check_plan)
    from tinygrad.helpers import Context
    f = lambda a, b: ((a @ b).softmax(0) * 2).sum(0)   # intermediates: views of the memory planner's buffer
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    m = a.numpy() @ b.numpy()
    want = (np.exp(m - m.max(0)) / np.exp(m - m.max(0)).sum(0) * 2).sum(0)
    for _ in range(2): f(a, b).realize()
    plan = callify_cache._templates[callify_cache.graph_structure(UOp.sink(f(a, b).uop))[0]].plan
    self.assertIsNotNone(plan)
    self.assertTrue(any(inter for kernel in plan.where for inter, _, _ in kernel))
    self.assertTrue(any(view is not None for kernel in plan.where for _, _, view in kernel))
    checked, built, orig_check, orig_linear = [], [], callify_cache.check_plan, callify_cache.instantiate_linear
    def check_plan(got, linear, launches):
      checked.append(len(got))
      return orig_check(got, linear, launches)
    def instantiate_linear(*args):
      built.append(1)
      return orig_linear(*args)
    callify_cache.check_plan, callify_cache.instantiate_linear = check_plan, instantiate_linear
    try:
      outs = [f(a, b).realize() for _ in range(2)]
      self.assertEqual((checked, built), ([], []))   # no linear built
      with Context(TEMPLATE_CHECK=1): outs.append(f(a, b).realize())
      self.assertEqual((len(checked), len(built)), (1, 1))
      for out in outs: np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
      self.assertEqual(len({id(o.uop.base.buffer) for o in outs}), 3)   # each call its own output buffer
    finally: callify_cache.check_plan, callify_cache.instantiate_linear = orig_check, orig_linear

  def test_a_wrong_plan_is_caught(self):
    from tinygrad.helpers import Context
    f = lambda a, b: ((a @ b).softmax(0) * 3).sum(0)
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    for _ in range(2): f(a, b).realize()
    t = callify_cache._templates[callify_cache.graph_structure(UOp.sink(f(a, b).uop))[0]]
    k = next(i for i, kernel in enumerate(t.plan.where) if len(kernel) >= 2)
    kernel = t.plan.where[k]
    good, t.plan = t.plan, replace(t.plan, where=t.plan.where[:k] + ((kernel[1], kernel[0]) + kernel[2:],) + t.plan.where[k+1:])
    try:
      with Context(TEMPLATE_CHECK=1), self.assertRaises(AssertionError): f(a, b).realize()
    finally: t.plan = good

  def test_codegen_settings_compile_again(self):
    from tinygrad.helpers import Context
    from tinygrad.uop.ops import KernelInfo
    a, b = Tensor(rand(5, 3, seed=0)).realize(), Tensor(rand(3, 4, seed=1)).realize()
    for _ in range(3): self.f(a, b).realize()   # the template and its schedule, with the default opts
    with Context(NOOPT=1):
      for _ in range(2): self.f(a, b).realize()   # (a first run as numpy is a quick build, not kept: the second realize compiles)
      key = callify_cache.graph_structure(UOp.sink(self.f(a, b).uop))[0]
      self.assertTrue(all(c.src[0].src[0].arg.opts_to_apply is None and not c.src[0].src[0].arg.applied_opts
                          for c in callify_cache._templates[key].linear.src))
      np.testing.assert_allclose(self.f(a, b).numpy(), np.maximum(a.numpy() @ b.numpy(), 0).sum(0) + a.numpy().max(), rtol=1e-5)

  def test_tinyjit_captures_after_eager_calls(self):
    from tinygrad import TinyJit
    jf = TinyJit(self.f)
    for i in range(5):
      a, b = rand(5, 3, seed=i), rand(3, 4, seed=10+i)
      if i < 2: self.f(Tensor(a).realize(), Tensor(b).realize()).realize()   # the template and its schedule
      out = jf(Tensor(a).realize(), Tensor(b).realize())
      np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0).sum(0) + a.max(), rtol=1e-5)
    self.assertGreater(len(jf.captured.linear.src), 1)

class TestRealizeFromBatch(unittest.TestCase):
  """a realize of a vmap call's outputs, which its scope's templates built: kept per those templates and the leaves' own structure, it
  walks no graph (graph_structure); TEMPLATE_CHECK=1 walks it and compares. A changed structure walks, and every result matches numpy"""
  @staticmethod
  def grads(w1, b1, w2, x, y): return tuple((((x @ w1 + b1).relu() @ w2 - y) ** 2).gradient(w1, b1, w2))

  def test_per_example_gradients_walk_once(self):
    from tinygrad.helpers import Context
    fn = vmap(self.grads, in_axes=(None, None, None, 0, 0))
    w = [Tensor(rand(4, 6, seed=1)).realize(), Tensor(rand(6, seed=2)).realize(), Tensor(rand(6, seed=3)).realize()]
    walks = []
    for i in range(5):
      X, Y = rand(7, 4, seed=10+i), rand(7, seed=20+i)
      x, y = Tensor(X).realize(), Tensor(Y).realize()
      with Context(TEMPLATE_CHECK=int(i == 4)), CountWalks() as count: Tensor.realize(*(out:=fn(*w, x, y)))
      walks.append(count.n)
      for g, want in zip(out, np_mlp_per_example_grads(*[t.numpy() for t in w], X, Y)): np.testing.assert_allclose(g.numpy(), want, rtol=1e-4, atol=1e-5)
    self.assertEqual(walks[2:4], [0, 0])   # the second realize keeps what it walked, the third on take it
    self.assertGreaterEqual(walks[4], 1)   # TEMPLATE_CHECK: walked, and the same

  def test_changed_structure_walks(self):
    # the same scope templates on leaves of another structure: a buffer passed twice, an input that is a view, one of another dtype
    c = Tensor(rand(4, seed=5)).realize()
    f = vmap(lambda x, y: (x * c + y).exp2() * 0.5)
    def run(x, y, want):
      with CountWalks() as count: out = f(x, y).realize()
      np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
      return count.n
    xs = [rand(3, 4, seed=i) for i in range(6)]
    for i in range(3): run(Tensor(xs[i]).realize(), Tensor(xs[i+1]).realize(), np.exp2(xs[i] * c.numpy() + xs[i+1]) * 0.5)
    self.assertEqual(run(Tensor(xs[3]).realize(), Tensor(xs[4]).realize(), np.exp2(xs[3] * c.numpy() + xs[4]) * 0.5), 0)
    same = Tensor(xs[5]).realize()
    self.assertGreaterEqual(run(same, same, np.exp2(xs[5] * c.numpy() + xs[5]) * 0.5), 1)   # one buffer where there were two
    self.assertGreaterEqual(run(Tensor(xs[0]).realize(), Tensor(xs[1]).realize().reshape(4, 3).T,
                                np.exp2(xs[0] * c.numpy() + xs[1].reshape(4, 3).T) * 0.5), 1)   # a leaf that is a view
    h = Tensor(xs[2].astype(np.float16)).realize()
    self.assertGreaterEqual(run(Tensor(xs[0]).realize(), h, np.exp2(xs[0] * c.numpy() + xs[2].astype(np.float16)) * 0.5), 1)

  def test_a_wrong_kept_realize_is_caught(self):
    from dataclasses import replace as dc_replace
    from tinygrad.helpers import Context
    f = vmap(lambda x, y: (x * 1.75 - y).exp2())   # a constant no other test uses: a structure of its own
    xs = [rand(3, 4, seed=i) for i in range(4)]
    for i in range(3): f(Tensor(xs[i]).realize(), Tensor(xs[i+1]).realize()).realize()
    key, fb = next((k, v) for k, v in callify_cache._from_batch.items() if v is not None and
                   any(u.op is Ops.CONST and u.arg == 1.75 for b in v.batch for u in b.built[0].toposort()))
    callify_cache._from_batch[key] = dc_replace(fb, inputs=fb.inputs[::-1])   # x and y swapped
    try:
      with Context(TEMPLATE_CHECK=1), self.assertRaises(AssertionError): f(Tensor(xs[0]).realize(), Tensor(xs[1]).realize()).realize()
    finally: callify_cache._from_batch[key] = fb
    out = f(Tensor(xs[0]).realize(), Tensor(xs[1]).realize()).realize()
    np.testing.assert_allclose(out.numpy(), np.exp2(xs[0] * 1.75 - xs[1]), rtol=1e-5)

  def test_outputs_of_two_calls_or_some_of_them_walk(self):
    f = vmap(lambda x: ((x * 2).sum(), (x + 1).max()))
    xs = [rand(3, 4, seed=i) for i in range(5)]
    for i in range(3): Tensor.realize(*f(Tensor(xs[i]).realize()))
    a, b = f(Tensor(xs[3]).realize()), f(Tensor(xs[4]).realize())
    with CountWalks() as count: Tensor.realize(a[0], b[1])   # two scopes' leaves
    self.assertGreaterEqual(count.n, 1)
    np.testing.assert_allclose(a[0].numpy(), (xs[3] * 2).sum(1), rtol=1e-5)
    np.testing.assert_allclose(b[1].numpy(), (xs[4] + 1).max(1), rtol=1e-6)
    for i in range(3):
      s, m = f(Tensor(xs[i]).realize())
      with CountWalks() as count: s.realize()   # one of the outputs: a structure of its own, walked by the first realize of it
      np.testing.assert_allclose(s.numpy(), (xs[i] * 2).sum(1), rtol=1e-5)
      np.testing.assert_allclose(m.numpy(), (xs[i] + 1).max(1), rtol=1e-6)
    self.assertEqual(count.n, 0)

class TestCallifyCacheLongWay(unittest.TestCase):
  def assert_long_way(self, fxn, want):
    for i in range(2):
      with CountTransforms() as count: out = fxn(i).realize()
      self.assertGreaterEqual(count.n, 1)
      np.testing.assert_allclose(out.numpy(), want(i), rtol=1e-6)

  def test_assign(self):
    buf = Tensor(rand(4, seed=0)).realize()
    start = buf.numpy()
    self.assert_long_way(lambda i: buf.assign(buf + 1), lambda i: start + i + 1)

  def test_copy_from_numpy(self):
    xs = [rand(4, seed=i) for i in range(2)]
    self.assert_long_way(lambda i: Tensor(xs[i]) * 2, lambda i: xs[i] * 2)

  def test_bound_variable(self):
    x = Tensor(rand(8, seed=0)).realize()
    v = UOp.variable("n", 1, 8)
    self.assert_long_way(lambda i: (x[:v.bind(3+i)] * 2).sum(), lambda i: (x.numpy()[:3+i] * 2).sum())

  def test_half_realized_graph_is_correct(self):
    a = Tensor(rand(4, seed=0)).realize()
    b = (a + 1).contiguous()
    for i in range(2):
      c = (b * (i + 2)).realize()
      np.testing.assert_allclose(c.numpy(), (a.numpy() + 1) * (i + 2), rtol=1e-6)

if __name__ == "__main__":
  unittest.main()
