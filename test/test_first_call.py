"""What keeps a first call cheap without changing what it computes: a lazy PatternMatcher compiles a pattern when it's first tried
(get_late_rewrite_patterns' matcher, built in the first compile, is one), UPat locations found without pathlib, and graph_rewrite's
stack limit read once per rewrite: the lazy-pattern-matcher topic (0.12). clang-first-call's clang started ahead is tested in
test_cpu_codegen.py (TestClangSpare)."""
from fork_topics import skip_module_unless
skip_module_unless('lazy-pattern-matcher')
import sys, unittest
import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.helpers import Context
from tinygrad.uop.ops import UOp, UPat, Ops, PatternMatcher, graph_rewrite
from tinygrad.uop.decompositions import get_late_rewrite_patterns
from tinygrad.uop.upat import upat_compile

def x_var(name="x"): return UOp.variable(name, 0, 100)
def rules():
  # fresh UPats (upat_compile caches on the UPat) for: x*1 -> x, x+0 -> x, and a rule on an op these graphs never contain
  return [(UPat.var("x")*1, lambda x: x), (UPat.var("x")+0, lambda x: x), (UPat(Ops.SIN, name="s"), lambda s: s.src[0])]
def compiled_entries(pm:PatternMatcher) -> set[UPat]:
  return {p for pats in pm.pdict.values() for p,m,_ in pats if m.__name__ == "compiled_match"}

class TestLazyPatternMatcher(unittest.TestCase):
  def test_same_rewrites_as_eager(self):
    x, y = x_var(), x_var("y")
    for graph in [x*1+0, (x+0)*(y*1), (x*1)*1+0+y, (x+y).sin()]:
      with self.subTest(graph=str(graph)[:60]):
        self.assertIs(graph_rewrite(graph, PatternMatcher(rules(), lazy=True)), graph_rewrite(graph, PatternMatcher(rules())))

  def test_compiles_only_what_is_tried(self):
    pm, x = PatternMatcher(rules(), lazy=True), x_var()
    self.assertEqual(compiled_entries(pm), set())
    self.assertIs(graph_rewrite(x*1, pm), x)
    # the MUL rule was tried and swapped in compiled; the ADD rule was never tried, the SIN rule's op never appeared
    self.assertEqual(compiled_entries(pm), {pm.patterns[0][0]})

  def test_eager_compiles_everything(self):
    pm = PatternMatcher(rules())
    self.assertEqual(compiled_entries(pm), {p for p,_ in pm.patterns})

  def test_add_keeps_lazy(self):
    lazy, eager = PatternMatcher(rules()[:1], lazy=True), PatternMatcher(rules()[1:])
    for pm in (lazy+eager, eager+lazy):
      self.assertTrue(pm.lazy)
      self.assertEqual(compiled_entries(pm), set())
      self.assertIs(graph_rewrite(x_var()*1+0, pm), x_var())
    self.assertFalse((eager+PatternMatcher(rules())).lazy)

  def test_late_rewrite_patterns_lazy(self):
    pm = get_late_rewrite_patterns((Ops.SHL, Ops.SHR, Ops.NEG, Ops.SUB, Ops.CMPLT, Ops.MULACC, Ops.FDIV), True)
    self.assertTrue(pm.lazy)
    self.assertEqual(compiled_entries(pm), set())

  def test_uncompilable_pattern_is_interpreted(self):
    # a pattern upat_compile refuses (one UPat for every src: x*x here) still matches, through upat_interpret
    square, square_to_x = UPat(Ops.MUL, src=UPat.var("x")), lambda x: x
    self.assertIsNone(upat_compile(square, square_to_x))
    pm = PatternMatcher([(square, square_to_x)], lazy=True)
    self.assertIs(graph_rewrite(x_var()*x_var() + 1, pm), x_var() + 1)

  def test_transcendental_kernel_matches_numpy(self):
    # a first kernel with sin and exp runs its late-rewrite (decomposition) patterns compiled on first try
    # (|x| < 30: past it float64 sin takes upstream's Payne-Hanek path, which keeps only ~1e-6 relative accuracy, vanilla 0.12.0 too)
    x = np.random.default_rng(0).uniform(-29, 29, (257,))
    out = (Tensor(x, dtype=dtypes.float64).sin() * (Tensor(x, dtype=dtypes.float64)/29).exp()).numpy()
    np.testing.assert_allclose(out, np.sin(x) * np.exp(x/29), rtol=1e-12, atol=1e-14)

class TestUPatLocation(unittest.TestCase):
  def test_location_is_the_defining_line(self):
    pat = UPat.var("x") + UPat.cvar("c"); line = sys._getframe().f_lineno
    self.assertEqual(pat.location, (__file__, line))

class TestRewriteStackLimit(unittest.TestCase):
  def test_limit_from_context(self):
    # the limit is read once per rewrite now, not per step: it still comes from the Context the rewrite runs in
    chain = x_var()
    for i in range(200): chain = chain + x_var(f"v{i}")
    self.assertIs(graph_rewrite(chain, PatternMatcher([])), chain)
    with Context(REWRITE_STACK_LIMIT=50), self.assertRaisesRegex(RuntimeError, "stack too big"): graph_rewrite(chain, PatternMatcher([]))

if __name__ == "__main__":
  unittest.main()
