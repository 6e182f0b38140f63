"""The first-call topic on the 0.14 line: what a process's first CPU kernels no longer pay for. The CPU device builds its worker's own
programs (their codegen and clang, ~0.25-0.45 s a process) when a worker or a command buffer first needs them, never for kernels launched
from Python, and imports its NIR renderer only when it is asked for; and a compile of several kernels with PARALLEL=1 (NUM_CPU_THREADS=1, or as many xdist workers as cores) runs in this
process instead of in a pool of one worker process, which imports tinygrad before it compiles anything. Results against numpy. The 0.12
line's first-call topics (lazy-pattern-matcher, clang-first-call) are tested in test_first_call.py and test_cpu_codegen.py."""
import os, subprocess, sys, tempfile, unittest, unittest.mock
from pathlib import Path
import numpy as np
from tinygrad import Tensor, Device
from tinygrad.helpers import Context
from tinygrad.uop.ops import UOp, UPat, Ops
from tinygrad.dtype import dtypes
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's first-call: 0.12's CPU device has no programs of its own and its compile no pool")
from fork_topics import applied, skip_module_unless, skip_unless
skip_module_unless('first-call')

ROOT = Path(__file__).resolve().parent.parent

def run_fresh(code:str, last:int=1, env:dict|None=None) -> str:
  """the last words of code's output, run in a new process on the CPU device (this one's may have built its programs for an earlier test);
  a variable of env that is None is left out. Its kernels are built: no first run as numpy (engine/first_numpy.py) unless env asks"""
  env = {k: v for k, v in {**os.environ, "DEV": "CPU", "FIRST_NUMPY": "0", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT/'test'}", **(env or {})}.items() if v is not None}
  return " ".join(subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()[-last:])

AGAINST_NUMPY = """
import numpy as np
from tinygrad import Tensor, TinyJit, Device
from tinygrad.helpers import Context
x, w = np.random.default_rng(3).standard_normal((2, 33)).astype(np.float32)
"""

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU device's worker programs")
class TestCPUWorkerProgramsLazy(unittest.TestCase):
  def test_kernels_from_python_build_none(self):
    code = AGAINST_NUMPY + """
np.testing.assert_allclose(((Tensor(x) * Tensor(w)).relu() + 1).numpy(), np.maximum(x * w, 0) + 1, rtol=1e-6)
print("prgs" in Device["CPU"].__dict__)"""
    self.assertEqual(run_fresh(code), "False")

  def test_kernels_from_python_import_no_nir_renderer(self):
    # the CPU device's LVP renderer (mesa's NIR) is imported when DEV=CPU:LVP asks for it: its import cost ~70 ms of every first call
    code = AGAINST_NUMPY + """
import sys
np.testing.assert_allclose((Tensor(x) - Tensor(w)).exp().numpy(), np.exp(x - w), rtol=1e-6)
print("tinygrad.renderer.nir" in sys.modules, "LVP" in [Device["CPU"]._renderer_name(r) for r in Device["CPU"].renderers])"""
    self.assertEqual(run_fresh(code, last=2), "False True")

  def test_renderers_hold_the_nir_class_once_imported(self):
    # upstream's test_cpu.py skips LVP with `ren is LVPRenderer`: once nir is imported the device's list holds that class, not the stand-in
    code = AGAINST_NUMPY + """
from tinygrad.renderer.nir import LVPRenderer
np.testing.assert_allclose((Tensor(x) + Tensor(w)).numpy(), x + w, rtol=1e-6)
print(sum(r is LVPRenderer for r in Device["CPU"].renderers), type(Device["CPU"].renderer).__name__)"""
    self.assertEqual(run_fresh(code, last=2), "1 ClangRenderer")

  def test_a_command_buffer_builds_them(self):
    # a TinyJit capture of JIT_CPU_GRAPH kernels or more replays as one command buffer, which the CPU worker runs
    code = AGAINST_NUMPY + """
@TinyJit
def chain(a, b):
  for i in range(70): a = (a * b + i / 70).contiguous()
  return a
with Context(JIT_CPU_GRAPH=64):
  for _ in range(3): out = chain(Tensor(x), Tensor(w)).numpy()
want = x.astype(np.float64)
for i in range(70): want = want * w + i / 70
np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
print("prgs" in Device["CPU"].__dict__)"""
    self.assertEqual(run_fresh(code), "True")

def two_new_kernels(rng:np.random.Generator) -> tuple[Tensor, np.ndarray]:
  """a schedule of two kernels no earlier test compiled (constants of their own), and what numpy gets"""
  x, c = rng.standard_normal((16, 8)).astype(np.float32), float(rng.uniform(1, 2))
  return ((Tensor(x) * c).contiguous().sum(0) + c), (x * c).sum(0) + c

class TestCompilePool(unittest.TestCase):
  def test_one_worker_compiles_here(self):
    t, want = two_new_kernels(np.random.default_rng(11))
    with Context(PARALLEL=1), unittest.mock.patch("tinygrad.engine.realize.get_worker_pool", side_effect=AssertionError("a pool")):
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-5)

  def test_two_workers_ask_for_the_pool(self):
    # the pool, mocked as absent (compile here): the same schedule with PARALLEL=2 does ask for it, so the test above compiles two at once
    t, want = two_new_kernels(np.random.default_rng(12))
    with Context(PARALLEL=2), unittest.mock.patch("tinygrad.engine.realize.get_worker_pool", return_value=None) as pool:
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-5)
    pool.assert_called_once()

# a process that runs one kernel (EXPR of x, w) and prints how many PROGRAMs it built (do_to_program's calls) and every PROGRAM's key,
# which covers its linearized UOps, its C source and its binary
BUILD = AGAINST_NUMPY + """
import tinygrad.codegen as cg
built, orig = [0], cg.do_to_program
def counting(ast, ren):
  built[0] += 1
  return orig(ast, ren)
cg.do_to_program = counting
X, W = Tensor(x), Tensor(w)
np.testing.assert_allclose((EXPR).numpy(), EXPR_NP, rtol=1e-6)
print(built[0], ",".join(sorted(p.key.hex() for p in cg.to_program_cache.values())))"""

@skip_unless('program-cache')
class TestProgramCache(unittest.TestCase):
  """the PROGRAMs kept across processes (codegen/program_cache.py): a hit is the PROGRAM a miss builds; any change of what the codegen
  reads (the kernel, an environment variable, a Context, the sources) misses; CCACHE=0, PROGRAM_CACHE=0, CACHELEVEL=0 build every kernel. On
  by default, but not while pytest runs a test, and the other tests run with PROGRAM_CACHE=0 (conftest.py): a mock of a codegen function
  is not in the key"""
  def setUp(self):
    self.tmp = tempfile.TemporaryDirectory()
    self.db = os.path.join(self.tmp.name, "cache.db")
  def tearDown(self): self.tmp.cleanup()

  def run_kernel(self, expr="(X * W).relu() + 1", expr_np="np.maximum(x * w, 0) + 1", realizes=1, **env) -> tuple[int, str]:
    code = BUILD.replace("np.testing", "for _ in range(REALIZES - 1): (EXPR).realize()\nnp.testing").replace("REALIZES", str(realizes))
    code = code.replace("EXPR_NP", expr_np).replace("EXPR", expr)
    built, keys = run_fresh(code, last=2, env={"CACHEDB": self.db, "CCACHE": "1", "PROGRAM_CACHE": "1", "DEBUG": "0", **env}).split()
    return int(built), keys

  def test_hit_is_the_miss_program(self):
    miss, hit = self.run_kernel(), self.run_kernel()
    self.assertEqual((miss[0], hit[0]), (1, 0))   # the second process built nothing
    self.assertEqual(miss[1], hit[1])             # and ran the same PROGRAM, source and binary

  def test_changed_kernel_misses(self):
    self.assertEqual(self.run_kernel()[0], 1)
    self.assertEqual(self.run_kernel("(X * W).relu() + 2", "np.maximum(x * w, 0) + 2")[0], 1)

  def test_changed_env_misses(self):
    # ALIGNED is read by the C renderer alone (cstyle.py's getenv), no ContextVar: the scan of the sources finds its name
    miss = self.run_kernel()
    self.assertEqual(self.run_kernel(ALIGNED="0")[0], 1)
    self.assertEqual(self.run_kernel(ALIGNED="0")[0], 0)
    self.assertEqual(self.run_kernel(), (0, miss[1]))

  def test_changed_context_misses(self):
    # a Context override of a ContextVar, no environment variable
    code = BUILD.replace("np.testing", "with Context(NOOPT=1): np.testing").replace("EXPR_NP", "x + w").replace("EXPR", "X + W")
    env = {"CACHEDB": self.db, "CCACHE": "1", "PROGRAM_CACHE": "1", "DEBUG": "0"}
    self.assertEqual(self.run_kernel("X + W", "x + w")[0], 1)
    self.assertEqual(run_fresh(code, last=2, env=env).split()[0], "1")
    self.assertEqual(run_fresh(code, last=2, env=env).split()[0], "0")

  def test_on_by_default(self):
    # no PROGRAM_CACHE in the environment and no test of pytest's running: the second process hits, the miss's PROGRAM
    miss, hit = self.run_kernel(PROGRAM_CACHE=None, PYTEST_CURRENT_TEST=None), self.run_kernel(PROGRAM_CACHE=None, PYTEST_CURRENT_TEST=None)
    self.assertEqual((miss[0], hit[0]), (1, 0))
    self.assertEqual(miss[1], hit[1])

  def test_off_while_pytest_runs_a_test(self):
    # unset, it is off in a test (a mock of a codegen function is not in the key); PROGRAM_CACHE=1 still forces it on
    self.run_kernel()
    self.assertEqual(self.run_kernel(PROGRAM_CACHE=None, PYTEST_CURRENT_TEST="test_x.py::test (call)")[0], 1)
    self.assertEqual(self.run_kernel(PYTEST_CURRENT_TEST="test_x.py::test (call)")[0], 0)

  @skip_unless('first-build-tier')
  def test_quick_first_build_kept(self):
    # a kernel run once is built quick (first-build-tier: a transcendental's lanes left out) and kept under its own key: a second
    # process that runs it once builds nothing; with TIERED=0 the full build's key misses, then hits
    exp = ("(X - W).exp()", "np.exp(x - w)")
    miss, hit = self.run_kernel(*exp), self.run_kernel(*exp)
    self.assertEqual((miss[0], hit[0]), (1, 0))
    self.assertEqual(miss[1], hit[1])
    self.assertEqual([self.run_kernel(*exp, TIERED="0")[0] for _ in range(2)], [1, 0])

  def test_full_build_kept_first_call(self):
    # a process that realized the kernel twice (quick, then in full) kept its full build: a later process's first realize runs that
    # PROGRAM (first_tier asks the cache for it before building quick), with its key and device, and builds nothing
    exp = ("(X - W).exp()", "np.exp(x - w)")
    miss, hit = self.run_kernel(*exp, realizes=2), self.run_kernel(*exp)
    self.assertEqual((miss[0], hit[0]), (2, 0))
    self.assertEqual(miss[1], hit[1])

  def test_patched_renderer_attribute_misses(self):
    from tinygrad.codegen import program_cache as pc
    ast, ren = UOp.sink(UOp.const(1.0, dtypes.float)), Device["CPU"].renderer
    key = pc.program_key(ast, ren)
    with unittest.mock.patch.object(ren, "has_local", not ren.has_local): self.assertNotEqual(pc.program_key(ast, ren), key)

  def test_cold_builds(self):
    self.run_kernel()
    self.assertEqual(self.run_kernel(CCACHE="0")[0], 1)
    self.assertEqual(self.run_kernel(PROGRAM_CACHE="0")[0], 1)
    self.assertEqual(self.run_kernel(CACHELEVEL="0")[0], 1)

  def test_key(self):
    from tinygrad.codegen import program_cache as pc
    ast, ren = UOp.sink(UOp.const(1.0, dtypes.float)), Device["CPU"].renderer
    self.assertIn("ALIGNED", pc.env_names(tuple(pc._sources())))
    self.assertIn("NOOPT", pc.env_names(tuple(pc._sources())))
    key = pc.program_key(ast, ren)
    self.assertEqual(key, pc.program_key(ast, ren))
    self.assertNotEqual(key, pc.program_key(UOp.sink(UOp.const(2.0, dtypes.float)), ren))
    # an edited source (its size and mtime) misses
    srcs, mach, names = pc._process_key()
    edited = [(f, size + 1, mt) if f == "codegen/__init__.py" else (f, size, mt) for f, size, mt in srcs]
    with unittest.mock.patch.object(pc, "_process_key", return_value=(tuple(edited), mach, names)):
      self.assertNotEqual(key, pc.program_key(ast, ren))

UPAT_CODE = """
from tinygrad.uop.ops import UPat, UOp, Ops
from tinygrad.dtype import dtypes
from tinygrad.uop import upat, upat_cache
from tinygrad.schedule.rangeify import pm_mops
from tinygrad.uop.symbolic import symbolic
from tinygrad.codegen import devectorizer2
from tinygrad.renderer.cstyle import ClangRenderer
def code(p, fxn):   # the code object and each name's literal, as upat_compile gets them
  import inspect
  ret = upat_cache.cached_code(p, "ctx" in inspect.signature(fxn).parameters, upat._get_clause, upat._get_code)
  if ret is None: return None
  return (ret[0] if not isinstance(ret[0], str) else compile(ret[0], "<string>", "exec")), {k: (type(v), v) for k, v in ret[1].items()}
pats = [(p, f) for pm in (symbolic, pm_mops, devectorizer2, ClangRenderer.extra_matcher) for p, f in pm.patterns]
print(len(pats), sum(code(p, f) is None for p, f in pats))
"""

@skip_unless('first-call-fixed-cost')
class TestFirstCallFixedCost(unittest.TestCase):
  """what a process's first kernel pays once: each pattern's globals found once (deconstruct_function), a compiled pattern's code kept
  across processes (uop/upat_cache.py), a cached PROGRAM's key and device kept with it"""
  def test_deconstruct_function_globals(self):
    # against the plain definition: a global is kept iff the code (or code nested in it) names it
    import types
    from tinygrad.uop.ops import deconstruct_function
    from tinygrad.uop.symbolic import symbolic
    def names(co): return set(co.co_names).union(*(names(c) for c in co.co_consts if isinstance(c, types.CodeType)))
    for _, fxn in symbolic.patterns:
      code, globs, name, defaults = deconstruct_function(fxn)
      self.assertEqual(list(globs.items()), [(k, v) for k, v in fxn.__globals__.items() if k in names(fxn.__code__)])
      self.assertEqual((code, name, defaults), (fxn.__code__, fxn.__name__, fxn.__defaults__))

  def test_upat_code_hit_is_the_miss(self):
    # a process that renders every pattern of symbolic, pm_mops, devectorizer2 and clang's, then one that reads them: the same ones left
    # uncompiled
    with tempfile.TemporaryDirectory() as d:
      env = {"CACHEDB": os.path.join(d, "cache.db"), "UPAT_CACHE": "1"}
      miss, hit, off = (run_fresh(UPAT_CODE, last=2, env=e) for e in (env, env, {**env, "UPAT_CACHE": "0"}))
    self.assertEqual(miss, off)
    self.assertEqual(hit, off)
    # the code objects (their flags too) and the literal bound to each name, a miss then a hit in one process
    with tempfile.TemporaryDirectory() as d:
      code = UPAT_CODE.replace("print(", "first = [code(p, f) for p, f in pats]\nprint(first == [code(p, f) for p, f in pats], ")
      self.assertEqual(run_fresh(code, last=3, env={"CACHEDB": os.path.join(d, "cache.db"), "UPAT_CACHE": "1"}).split()[0], "True")

  def test_upat_code_second_process_hits(self):
    # every pattern rendered in a first process is read by the second (none left out by its literals' classes)
    code = UPAT_CODE.replace("print(", """hits = [0]
orig = upat_cache.lookup
def counting(k):
  hits[0] += (ret:=orig(k)) is not None
  return ret
upat_cache.lookup = counting
[code(p, f) for p, f in pats]
print(hits[0], """)
    with tempfile.TemporaryDirectory() as d:
      env = {"CACHEDB": os.path.join(d, "cache.db"), "UPAT_CACHE": "1"}
      first, second = (run_fresh(code, last=3, env=env).split() for _ in range(2))
    self.assertLess(int(first[0]), int(first[1]))   # (a first process hits only where two of its patterns have one key)
    self.assertEqual(second[0], second[1])

  def test_upat_code_changed_pattern_misses(self):
    from tinygrad.uop import upat_cache
    def key(p): return upat_cache.pattern_key(p, False)[0]
    base = key(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))))
    self.assertEqual(base, key(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))))
    self.assertNotEqual(base, key(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c")))))
    self.assertNotEqual(base, key(UPat(Ops.ADD, src=(UPat.var("y"), UPat.cvar("c")))))
    self.assertNotEqual(base, key(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")), allow_any_len=True)))
    self.assertNotEqual(base, upat_cache.pattern_key(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), True)[0])
    # a literal is a name in the code: another dtype renders the same code, its own literal bound to it
    self.assertEqual(key(UPat(Ops.CAST, dtypes.float, name="x")), key(UPat(Ops.CAST, dtypes.int, name="x")))
    self.assertNotEqual(key(UPat(Ops.CAST, dtypes.float, name="x")), key(UPat(Ops.CAST, (dtypes.float, dtypes.int), name="x")))
    # two equal literals are one name, two different ones two
    self.assertNotEqual(key(UPat(Ops.ADD, src=(UPat(dtype=dtypes.int), UPat(dtype=dtypes.int)))),
                        key(UPat(Ops.ADD, src=(UPat(dtype=dtypes.int), UPat(dtype=dtypes.float)))))

  def test_pattern_key_is_the_clause_key(self):
    # pattern_key (a walk of the UPat) against clause_key (a hash of the clause _get_clause builds, which renders the code): over every
    # pattern of this process, two patterns have the same pattern_key iff they have the same clause_key
    import gc
    import tinygrad.codegen, tinygrad.schedule.rangeify, tinygrad.renderer.cstyle  # noqa: F401  # pylint: disable=unused-import
    from tinygrad.uop import upat, upat_cache
    from tinygrad.uop.ops import PatternMatcher, takes_ctx
    pats = {id(p): (p, f) for pm in gc.get_objects() if isinstance(pm, PatternMatcher) for p, f in pm.patterns}
    by_walk, by_clause = {}, {}
    for p, f in pats.values():
      clause = upat._get_clause(p, UOp(Ops.CUSTOMI, arg="uop"))
      ck = upat_cache.clause_key(clause, [u for u in clause.toposort() if u.op is Ops.PYLITERAL], takes_ctx(f))
      if ck is None: continue
      wk = upat_cache.pattern_key(p, takes_ctx(f))[0]
      by_walk.setdefault(wk, set()).add(ck)
      by_clause.setdefault(ck, set()).add(wk)
    self.assertGreater(len(pats), 500)
    self.assertEqual([k for k, v in by_walk.items() if len(v) > 1], [])
    self.assertEqual([k for k, v in by_clause.items() if len(v) > 1], [])

  def test_program_key_kept_is_the_graph_key(self):
    # the hit's PROGRAM carries its key and device from the disk cache: what hashing its UOps again gives
    code = BUILD.replace("EXPR_NP", "np.exp(x - w)").replace("EXPR", "(X - W).exp()") + """
import hashlib
def fresh(root):
  h = {}
  for u in root.toposort(): h[u] = hashlib.sha256(str((u.op, u.dtype, u.arg)).encode() + b"".join(h[s] for s in u.src)).digest()
  return h[root]
print(all(fresh(p) == p.key for p in cg.to_program_cache.values()), {p.device for p in cg.to_program_cache.values()} == {"CPU"})"""
    with tempfile.TemporaryDirectory() as d:
      env = {"CACHEDB": os.path.join(d, "cache.db"), "CCACHE": "1", "PROGRAM_CACHE": "1", "DEBUG": "0"}
      self.assertEqual(run_fresh(code, last=4, env=env).split()[0], "1")
      built, _, same_key, same_dev = run_fresh(code, last=4, env=env).split()
    self.assertEqual((built, same_key, same_dev), ("0", "True", "True"))

@skip_unless('program-cache')
class TestUPatCompileAfter(unittest.TestCase):
  def test_interpreted_then_compiled_same_programs(self):
    # patterns interpreted for their first tries (UPAT_COMPILE_AFTER, default 16) and compiled from the first: the same PROGRAMs
    code = BUILD.replace("EXPR_NP", "np.exp(x - w).sum()").replace("EXPR", "(X - W).exp().sum()")
    env = {"CCACHE": "0", "DEBUG": "0"}
    first, late = (run_fresh(code, last=2, env={**env, "UPAT_COMPILE_AFTER": n}).split() for n in ("0", "1000000"))
    self.assertEqual(first, late)

  @skip_unless('codegen-cost')
  def test_compiled_at_first_try_with_the_pattern_cache(self):
    # with the pattern cache on, a pattern tried once is compiled (a miss renders it, a hit reads it); off, it is interpreted first; the
    # same PROGRAMs from a miss, a hit and the cache off
    code = """
from tinygrad.uop.symbolic import symbolic
from tinygrad.uop.ops import UOp, Ops
def lazy(): return sum(e[1].__name__ == "lazy_compile" for e in symbolic.pdict[Ops.ADD])
before = lazy()
symbolic.rewrite(UOp.variable("a", 0, 9) + 0)
compiled = before - lazy()
""" + BUILD.replace("EXPR_NP", "np.exp(x - w).sum()").replace("EXPR", "(X - W).exp().sum()") + """
print(compiled)"""
    with tempfile.TemporaryDirectory() as d:
      env = {"CCACHE": "0", "DEBUG": "0", "CACHEDB": os.path.join(d, "cache.db")}
      miss, hit, off = (run_fresh(code, last=3, env={**env, "UPAT_CACHE": c}).split() for c in ("1", "1", "0"))
    self.assertEqual(miss, hit)
    self.assertGreater(int(miss[2]), 0)
    self.assertEqual(off[2], "0")
    self.assertEqual(miss[:2], off[:2])

# a process that realizes EXPR of x, w and prints how many functions it scheduled (get_kernel_graph's calls) and every LINEAR the
# in-process schedule cache holds, by its key (each kernel's AST, their order, their buffers), each intermediate BUFFER's slot (this
# process's own number) as its place in the LINEAR
SCHEDULE = AGAINST_NUMPY + """
import tinygrad.schedule as S
from dataclasses import replace
from tinygrad.uop.ops import Ops
def norm(l):
  return l.substitute({b: b.replace(arg=replace(b.arg, slot=10**9+i)) for i, b in enumerate(u for u in l.toposort() if u.op is Ops.BUFFER)})
built, orig = [0], S.get_kernel_graph
def counting(f):
  built[0] += 1
  return orig(f)
S.get_kernel_graph = counting
X, W = Tensor(x), Tensor(w)
np.testing.assert_allclose((EXPR).numpy(), EXPR_NP, rtol=1e-6)
print(built[0], ",".join(sorted(norm(l).key.hex() for l in S.schedule_cache.values())))"""

@skip_unless('kept-schedule')
class TestKeptSchedule(unittest.TestCase):
  """the schedule kept across processes (schedule/kept_schedule.py): a hit is the LINEAR a miss builds; a change of the graph, an
  environment variable or a Context misses; SCHEDULE_KEEP=0 and CCACHE=0 schedule every graph; a graph with a BUFFER is never kept"""
  def setUp(self):
    self.tmp = tempfile.TemporaryDirectory()
    self.env = {"CACHEDB": os.path.join(self.tmp.name, "cache.db"), "CCACHE": "1", "PROGRAM_CACHE": "1", "DEBUG": "0"}
  def tearDown(self): self.tmp.cleanup()

  def run_graph(self, expr="(X * W).relu().sum() + 1", expr_np="np.maximum(x * w, 0).sum() + 1", code=SCHEDULE, **env) -> tuple[int, str]:
    built, keys = run_fresh(code.replace("EXPR_NP", expr_np).replace("EXPR", expr), last=2, env={**self.env, **env}).split()
    return int(built), keys

  def test_hit_is_the_miss_linear(self):
    miss, hit = self.run_graph(), self.run_graph()
    self.assertGreater(miss[0], 0)
    self.assertEqual(hit, (0, miss[1]))   # scheduled nothing, and holds the same LINEARs

  def test_intermediate_buffers_hit(self):
    # two kernels and the buffer between them (made by the schedule): a hit gives it a new slot of its own process, the same LINEAR
    exp = ("X.softmax() * W", "np.exp(x - x.max()) / np.exp(x - x.max()).sum() * w")
    miss, hit = self.run_graph(*exp), self.run_graph(*exp)
    self.assertGreater(miss[0], 0)
    self.assertEqual(hit, (0, miss[1]))
    code = SCHEDULE.replace("print(built[0]", "print(len([u for l in S.schedule_cache.values() for u in l.toposort() if u.op is Ops.BUFFER]), built[0]")
    self.assertGreater(int(run_fresh(code.replace("EXPR_NP", exp[1]).replace("EXPR", exp[0]), last=3, env=self.env).split()[0]), 0)

  def test_changed_graph_misses(self):
    self.run_graph()
    self.assertGreater(self.run_graph("(X * W).relu().sum() + 2", "np.maximum(x * w, 0).sum() + 2")[0], 0)
    self.assertGreater(self.run_graph("(X - W).relu().sum() + 1", "np.maximum(x - w, 0).sum() + 1")[0], 0)

  def test_changed_env_and_context_miss(self):
    miss = self.run_graph()
    self.assertGreater(self.run_graph(ALIGNED="0")[0], 0)   # any variable tinygrad reads by name
    self.assertEqual(self.run_graph(ALIGNED="0")[0], 0)
    code = SCHEDULE.replace("np.testing", "with Context(SPLIT_REDUCEOP=0): np.testing")
    self.assertGreater(self.run_graph(code=code)[0], 0)
    self.assertEqual(self.run_graph(code=code)[0], 0)
    self.assertEqual(self.run_graph(), (0, miss[1]))

  def test_off(self):
    self.run_graph()
    self.assertGreater(self.run_graph(SCHEDULE_KEEP="0")[0], 0)
    self.assertGreater(self.run_graph(CCACHE="0")[0], 0)
    self.assertGreater(self.run_graph(PROGRAM_CACHE="0")[0], 0)
    self.assertEqual(self.run_graph()[0], 0)

  def test_buffer_never_kept(self):
    from tinygrad.schedule import kept_schedule as ks
    pure = UOp(Ops.LINEAR, src=(UOp.sink(UOp.const(1.0, dtypes.float)),))
    buf = Tensor([1.0, 2.0]).realize().uop.base   # a BUFFER with a Buffer of this process
    with Context(PROGRAM_CACHE=1), unittest.mock.patch.object(ks, "diskcache_get", return_value=None), \
         unittest.mock.patch.object(ks, "diskcache_put") as put:
      self.assertIs(ks.kept_linear(UOp.sink(UOp.const(1.0, dtypes.float)), lambda f: pure), pure)
      self.assertEqual(put.call_count, 1)
      # a BUFFER in the function (its slot is this process's own), or one in the LINEAR that holds this process's data
      self.assertEqual(buf.op, Ops.BUFFER)
      ks.kept_linear(UOp.sink(UOp.const(2.0, dtypes.float)), lambda f: UOp(Ops.LINEAR, src=(buf.sink(),)))
      ks.kept_linear(buf.sink(), lambda f: pure)
      self.assertEqual(put.call_count, 1)
      # an intermediate (no Buffer yet) is kept, and a hit makes it again with a slot of its own
      mid = UOp.new_buffer("CPU", 4, dtypes.float)
      ks.kept_linear(UOp.sink(UOp.const(3.0, dtypes.float)), lambda f: UOp(Ops.LINEAR, src=(mid.sink(),)))
      self.assertEqual(put.call_count, 2)
      again = ks.fresh_buffers(put.call_args[0][2])
      (new,) = [u for u in again.toposort() if u.op is Ops.BUFFER]
      self.assertNotEqual(new.arg.slot, mid.arg.slot)
      self.assertEqual((new.arg.dtype, new.arg.device, new.src), (mid.arg.dtype, mid.arg.device, mid.src))

@skip_unless('first-build-tier')
@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU heuristics' quick builds")
class TestFirstBuildTier(unittest.TestCase):
  """a kernel's first build is quick (engine/first_tier.py: QUICK_OPTS, the opts that are slow to build left out) where it runs at once,
  its second lowering the full build; TinyJit captures full builds; results of every call agree with numpy in float64"""
  def setUp(self):
    from tinygrad.engine import first_tier
    self.ft = first_tier
    self.enterContext(Context(FIRST_NUMPY=0))   # the quick builds under the numpy run (test_first_numpy.py)
    self.rng = np.random.default_rng(56)

  def programs(self, linear:UOp) -> list[UOp]: return [u for u in linear.toposort() if u.op is Ops.PROGRAM]

  def check_tiers(self, f, args_np, want, rtol):
    from tinygrad import TinyJit, GlobalCounters
    jf, outs, kernels, first_quick = TinyJit(f), [], [], set()
    for i in range(4):
      k0, before = GlobalCounters.kernel_count, set(self.ft.quick_programs.values())
      outs.append(jf(*[Tensor(a) for a in args_np]).numpy())
      kernels.append(GlobalCounters.kernel_count - k0)
      if i == 0: first_quick = set(self.ft.quick_programs.values()) - before
    for o in outs: np.testing.assert_allclose(o, want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(outs[0], outs[-1], rtol=rtol, atol=rtol)   # the quick build and the full one
    self.assertEqual(len(set(kernels)), 1, kernels)
    self.assertTrue(first_quick, "the first call builds quick")
    # the capture (the second call) lowered them again: TinyJit replays full builds only
    prgs = self.programs(jf.captured._linear)
    self.assertTrue(prgs)
    self.assertTrue(first_quick.isdisjoint(prgs))
    self.assertTrue(set(self.ft.quick_programs.values()).isdisjoint(prgs))
    return first_quick, prgs

  def test_matmul(self):
    x, w = self.rng.standard_normal((256, 48), dtype=np.float32), self.rng.standard_normal((48, 32), dtype=np.float32)
    self.check_tiers(lambda X, W: (X @ W).relu().realize(), (x, w), np.maximum(x.astype(np.float64) @ w.astype(np.float64), 0), 1e-5)

  def test_sin(self):
    x = self.rng.uniform(-100, 100, (64, 40)).astype(np.float32)
    self.check_tiers(lambda X: (X.sin() * X.cos()).realize(), (x,), np.sin(x.astype(np.float64)) * np.cos(x.astype(np.float64)), 2e-6)

  def test_reduce_outputs_not_upcast(self):
    # a reduce that is not a matmul (bench W5's pairwise distances) is built quick with the full build's UNROLLs and none of its UPCASTs:
    # each output reduced in the full build's order, one lane of codegen instead of the tile's
    from tinygrad import vmap
    from tinygrad.codegen.opt import OptOps
    a, b = (self.rng.standard_normal(s).astype(np.float32) for s in ((64, 16), (48, 16)))
    want = np.sqrt(((a.astype(np.float64)[:, None] - b.astype(np.float64)[None]) ** 2).sum(-1))
    dist = lambda A, B: vmap(lambda p: vmap(lambda q: ((p - q) ** 2).sum().sqrt())(B))(A).realize()
    quick, full = self.check_tiers(dist, (a, b), want, 2e-6)
    (q,), (f,) = quick, full
    full_opts = f.src[0].arg.applied_opts
    self.assertIn(OptOps.UPCAST, [o.op for o in full_opts])
    self.assertIn(OptOps.UNROLL, [o.op for o in full_opts])
    self.assertEqual(q.src[0].arg.applied_opts, tuple(o for o in full_opts if o.op is not OptOps.UPCAST))

  def test_reduce_opts_after_a_whole_axis_upcast(self):
    # the full build's upcasts take two axes whole (5 and 7), so its THREAD's axis is a position that names another range without them:
    # the quick build threads the same range
    from tinygrad import vmap
    from tinygrad.codegen.opt import OptOps
    x = self.rng.standard_normal((5, 7, 4)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    with Context(NUM_CPU_THREADS=2, PARALLEL=0):
      quick, full = self.check_tiers(lambda X: vmap(vmap(lambda r: r.softmax(), chunk_size=3), chunk_size=2)(X).realize(), (x,),
                                     e / e.sum(-1, keepdims=True), 1e-6)
    opts = lambda prgs: {tuple(o.op for o in p.src[0].arg.applied_opts) for p in prgs}
    self.assertIn((OptOps.UPCAST, OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD), opts(full))
    self.assertIn((OptOps.UNROLL, OptOps.THREAD), opts(quick))

  def test_reduce_without_upcasts_built_once(self):
    # a reduce whose full build upcasts nothing (a sum to one number) has no quick build: it would be the full one
    x = self.rng.standard_normal(4096).astype(np.float32)
    n = len(self.ft.built_quick)
    np.testing.assert_allclose(Tensor(x).sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)
    self.assertEqual(len(self.ft.built_quick), n)

  def test_tiered_off(self):
    x = self.rng.uniform(-10, 10, (8, 72)).astype(np.float32)
    n = len(self.ft.quick_programs)
    with Context(TIERED=0): np.testing.assert_allclose((Tensor(x).sin() + 1).numpy(), np.sin(x.astype(np.float64)) + 1, rtol=2e-6, atol=2e-6)
    self.assertEqual(len(self.ft.quick_programs), n)

  def test_tiered_off_reaches_the_pool(self):
    # the tier is decided where the linear is lowered: a worker process of the compile pool does not see the caller's Context(TIERED=0)
    x = self.rng.uniform(-10, 10, (8, 40)).astype(np.float32)
    n = len(self.ft.quick_programs)
    with Context(TIERED=0, PARALLEL=2):
      a, b = Tensor(x).sin().contiguous(), (Tensor(x) * 2).exp().contiguous()
      a.realize(b)   # one schedule of two kernels: compiled by the pool
      got = [a.numpy(), b.numpy()]
    np.testing.assert_allclose(got[0], np.sin(x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got[1], np.exp(2 * x.astype(np.float64)), rtol=3e-6)
    self.assertEqual(len(self.ft.quick_programs), n)

  def test_eager_second_realize_full(self):
    x = self.rng.uniform(-10, 10, (16, 56)).astype(np.float32)
    want = np.exp(np.sin(x.astype(np.float64)))
    from tinygrad.codegen import to_program_cache
    outs, quick = [], []
    for _ in range(3):
      before = set(self.ft.quick_programs.values())
      outs.append((Tensor(x).sin().exp()).numpy())
      quick.append(set(self.ft.quick_programs.values()) - before)
    for o in outs: np.testing.assert_allclose(o, want, rtol=3e-6)
    # built quick first, in full at the second realize: the quick build left to_program's cache and none was built again
    self.assertTrue(quick[0])
    self.assertEqual(quick[1:], [set(), set()])
    self.assertTrue(quick[0].isdisjoint(to_program_cache.values()))

@skip_unless('codegen-quick-passes')
@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU renderer's kernels")
class TestQuickPasses(unittest.TestCase):
  """codegen/quick_passes.py: full_rewrite_to_sink skips a pass none of whose patterns can match the kernel; the sink, so the rendered
  source, is the same as with every pass run (QUICK_PASSES=0), for the bench's W1..W6-like vmapped kernels, a matmul and transcendentals,
  full and quick (QUICK_OPTS) builds; results against numpy"""
  def kernels(self, f, *args_np) -> list[UOp]:
    """the ASTs f's kernels are built from, after checking its result (want) against numpy"""
    import tinygrad.codegen as cg
    asts, orig = [], cg.do_to_program
    def record(ast, ren):
      asts.append(ast)
      return orig(ast, ren)
    with unittest.mock.patch.object(cg, "do_to_program", record), Context(TIERED=0, PARALLEL=0):   # built in this process
      cg.to_program_cache.clear()
      out, want = f(*[Tensor(a) for a in args_np]), f(*args_np)
      np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    self.assertTrue(asts)
    return [a for a in asts if a.op is Ops.SINK]

  def render(self, ast:UOp, quick:bool) -> tuple[UOp, str, int]:
    import tinygrad.codegen as cg
    from tinygrad.uop.ops import ProgramInfo
    ren, passes, orig = Device["CPU"].renderer, [0], cg.graph_rewrite
    def counting(*a, **kw):
      passes[0] += 1
      return orig(*a, **kw)
    with unittest.mock.patch.object(cg, "graph_rewrite", counting), Context(QUICK_OPTS=int(quick)):
      sink = cg.full_rewrite_to_sink(ast, ren, optimize=ast.tag is None)
    prg = cg.do_linearize(ren, UOp(Ops.PROGRAM, src=(sink,), arg=ProgramInfo.from_sink(sink, ren.target)), sink)
    if applied('codegen-cost'):   # the renderer's dtypes, scalars counted without max_numel: upstream's expression's
      from tinygrad.renderer.cstyle import uops_to_dtypes
      from tinygrad.helpers import dedup
      from tinygrad.dtype import AddrSpace
      uops = list(prg.src[1].src)
      self.assertEqual(uops_to_dtypes(uops), dedup((u.dtype, u.max_numel()) for u in uops
                                                   if u.addrspace in (AddrSpace.ALU, None) and u.dtype != dtypes.void and u._shape is not None))
    return sink, ren.render(list(prg.src[1].src)), passes[0]

  def check_same(self, f, *args_np):
    skipped = 0
    for ast in self.kernels(f, *args_np):
      for quick in (False, True):
        with Context(QUICK_PASSES=0): full_sink, full_src, full_passes = self.render(ast, quick)
        with Context(QUICK_PASSES=1): sink, src, passes = self.render(ast, quick)
        self.assertIs(sink, full_sink)
        self.assertEqual(src, full_src)
        skipped += full_passes - passes
    self.assertGreater(skipped, 0, "no pass was skipped")

  def setUp(self): self.rng = np.random.default_rng(56)

  def test_row_reduce(self):   # W1
    from tinygrad.vmap import vmap
    x = self.rng.standard_normal((300, 64)).astype(np.float32)
    self.check_same(lambda X: vmap(lambda r: (r * r).sum() * 2 + r.max())(X) if isinstance(X, Tensor) else (X*X).sum(1)*2 + X.max(1), x)

  def test_mlp(self):   # W2, a matmul with a bias and relu
    from tinygrad.vmap import vmap
    x, w1, b1 = self.rng.standard_normal((40, 64)).astype(np.float32), self.rng.standard_normal((64, 64)).astype(np.float32) / 8, \
      self.rng.standard_normal(64).astype(np.float32) / 8
    w2, b2 = self.rng.standard_normal((64, 8)).astype(np.float32) / 8, self.rng.standard_normal(8).astype(np.float32) / 8
    def f(X, W1, B1, W2, B2):
      if isinstance(X, Tensor): return vmap(lambda x, a, b, c, d: (x @ a + b).relu() @ c + d, in_axes=(0, None, None, None, None))(X, W1, B1, W2, B2)
      return np.maximum(X @ W1 + B1, 0) @ W2 + B2
    self.check_same(f, x, w1, b1, w2, b2)

  def test_stack_index(self):   # W3: rows of 3
    from tinygrad.vmap import vmap
    x = self.rng.standard_normal((100, 3)).astype(np.float32)
    def f(X):
      if isinstance(X, Tensor): return vmap(lambda r: Tensor.stack(r[0] * r[1], r[2] - r[0], r[1]) [1:])(X)
      return np.stack([X[:, 2] - X[:, 0], X[:, 1]], 1)
    self.check_same(f, x)

  def test_transcendental(self):   # W4-like: sin and cos of a batch, exp and log
    from tinygrad.vmap import vmap
    x = self.rng.uniform(-50, 50, (64, 6)).astype(np.float32)
    def f(X):
      if isinstance(X, Tensor): return vmap(lambda r: r.sin() * r.cos() + (r * 0.01).exp() + (r * r + 1).log())(X)
      X = X.astype(np.float64)
      return np.sin(X) * np.cos(X) + np.exp(X * 0.01) + np.log(X * X + 1)
    self.check_same(f, x)

  def test_padded(self):   # a pad: gated loads, an index that is Invalid outside the row
    from tinygrad.vmap import vmap
    x = self.rng.standard_normal((50, 9)).astype(np.float32)
    def f(X):
      if isinstance(X, Tensor): return vmap(lambda r: r.pad((2, 1)).reshape(3, 4).sum(0) * 3)(X)
      return np.pad(X, ((0, 0), (2, 1))).reshape(50, 3, 4).sum(1) * 3
    self.check_same(f, x)

  def test_stencil(self):   # a batch of 2D stencils: gated loads, where the gates pass runs and rewrites
    from tinygrad.vmap import vmap
    x = self.rng.standard_normal((6, 10, 12)).astype(np.float32)
    def f(X):
      if isinstance(X, Tensor):
        def st(g):
          p = g.pad(((1, 1), (1, 1)))
          return p[:-2, 1:-1] + p[2:, 1:-1] - p[1:-1, :-2] * 2
        return vmap(st)(X)
      p = np.pad(X, ((0, 0), (1, 1), (1, 1)))
      return p[:, :-2, 1:-1] + p[:, 2:, 1:-1] - p[:, 1:-1, :-2] * 2
    self.check_same(f, x)

  def test_nested_and_where(self):   # W5/W6-like: a nested vmap, a where, a sqrt and a reciprocal
    from tinygrad.vmap import vmap
    a, b = self.rng.standard_normal((12, 5)).astype(np.float32), self.rng.standard_normal((7, 5)).astype(np.float32)
    def f(A, B):
      if isinstance(A, Tensor):
        return vmap(lambda x: vmap(lambda y: ((x - y) * (x - y)).sum().sqrt() + (x > y).where(x, 1 / (1 + y * y)).sum())(B))(A)
      d = A[:, None, :] - B[None, :, :]
      return np.sqrt((d * d).sum(-1)) + np.where(A[:, None, :] > B[None], A[:, None, :], 1 / (1 + B[None] * B[None])).sum(-1)
    self.check_same(f, a, b)

  def test_gather(self):   # a tensor indexed by a tensor: the load collapse runs and rewrites
    x, idx = self.rng.standard_normal((50, 8)).astype(np.float32), self.rng.integers(0, 50, 30).astype(np.int32)
    self.check_same(lambda X, I: X[I] * 2 if isinstance(X, Tensor) else X[I] * 2, x, idx)

  def test_half_and_long(self):   # half and int64 dtypes: the dtype decompositions' pass runs
    x, y = self.rng.standard_normal((30, 7)).astype(np.float16), self.rng.integers(-1000, 1000, (30, 7)).astype(np.int64)
    self.check_same(lambda X, Y: X.float().sum(1) + (Y * 3).max(1).float() if isinstance(X, Tensor) else
                    X.astype(np.float32).sum(1) + (Y * 3).max(1).astype(np.float32), x, y)

@skip_unless('clang-together')
@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU device's clang")
class TestClangTogether(unittest.TestCase):
  """codegen/compile_together.py: a schedule's kernels compiled by one clang (cc1, an input file each), each object byte for byte the one
  ClangCompiler.compile gives the kernel alone; with CCACHE's disk cache, the program cache, the quick tier; CLANG_TOGETHER=0 is off"""
  def build(self, f, *args_np, **ctx) -> tuple[list[int], list[UOp]]:
    """f's kernels built in this process: the sizes of compile_many's batches and the PROGRAMs, its result checked against numpy"""
    import tinygrad.codegen as cg
    from tinygrad.codegen import compile_together as ct
    batches, progs, orig, orig_many = [], [], cg.do_to_program, ct.compile_many
    def record(ast, ren):
      progs.append(ret:=orig(ast, ren))
      return ret
    def many(args, srcs):
      batches.append(len(srcs))
      return orig_many(args, srcs)
    # CCACHE's disk cache off (an earlier test's kernels of the same source would be in it)
    with unittest.mock.patch.object(cg, "do_to_program", record), unittest.mock.patch.object(ct, "compile_many", many), \
         unittest.mock.patch.object(Device["CPU"].renderer.compiler, "cachekey", None), Context(**{"PARALLEL": 0, "TIERED": 0, **ctx}):
      cg.to_program_cache.clear()
      out, want = f(*[Tensor(a) for a in args_np]), f(*args_np)
      np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    return batches, progs

  def gradient(self, seed):   # W6-like: an MLP's loss and its gradient, five kernels
    rng = np.random.default_rng(seed)
    x, w1, w2 = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 12)).astype(np.float32), \
      rng.standard_normal((12, 1)).astype(np.float32)
    def f(X, W1, W2):
      if isinstance(X, Tensor):
        g1, g2 = ((X @ W1).relu() @ W2).square().sum().gradient(W1, W2)
        return g1.cat(g2.reshape(1, 12).expand(8, 12))
      h = X @ W1
      d = 2 * (np.maximum(h, 0) @ W2)
      g2 = np.maximum(h, 0).T @ d
      g1 = X.T @ ((d @ W2.T) * (h > 0))
      return np.concatenate([g1, np.broadcast_to(g2.reshape(1, 12), (8, 12))])
    return f, x, w1, w2

  def test_one_clang_same_objects(self):
    from tinygrad.uop.ops import Ops
    batches, progs = self.build(*self.gradient(1))
    self.assertEqual(len(batches), 1)
    self.assertGreaterEqual(batches[0], 3)
    comp = Device["CPU"].renderer.compiler
    for p in progs:   # each kernel's object: what clang gives its source alone
      src, lib = [u for u in p.src if u.op is Ops.SOURCE][0].arg, p.src[-1].arg
      self.assertEqual(lib, comp.compile(src))

  def test_off_same_programs(self):
    # CLANG_TOGETHER=0 compiles each kernel alone: the same PROGRAMs (linearized UOps, source, binary) as the kernels built together
    off, progs_off = self.build(*self.gradient(2), CLANG_TOGETHER=0)
    on, progs_on = self.build(*self.gradient(2))
    self.assertEqual((off, len(on)), ([], 1))
    self.assertEqual(sorted(p.key for p in progs_off), sorted(p.key for p in progs_on))

  def test_quick_tier(self):   # quick first builds (QUICK_OPTS) of transcendentals, one clang
    from tinygrad.vmap import vmap
    x = np.random.default_rng(3).uniform(-5, 5, (64, 6)).astype(np.float32)
    def f(X):
      if isinstance(X, Tensor): return vmap(lambda r: r.sin().contiguous().sum() + r.cos().exp().max())(X)
      return np.sin(X.astype(np.float64)).sum(1) + np.exp(np.cos(X.astype(np.float64))).max(1)
    batches, _ = self.build(f, x, TIERED=1, FIRST_NUMPY=0)   # the quick builds, not a first run as numpy
    self.assertEqual(batches, [2])

  def test_failed_clang_builds_alone(self):
    # cc1 fails (a source it can't compile): each kernel is compiled alone, so an error would be its own
    from tinygrad.codegen import compile_together as ct
    with unittest.mock.patch.object(ct, "compile_many", side_effect=subprocess.CalledProcessError(1, "clang")) as many, \
         unittest.mock.patch.object(Device["CPU"].renderer.compiler, "cachekey", None):
      f, *args = self.gradient(4)
      import tinygrad.codegen as cg
      with Context(PARALLEL=0, TIERED=0):
        cg.to_program_cache.clear()
        np.testing.assert_allclose(f(*[Tensor(a) for a in args]).numpy(), f(*args), rtol=2e-5, atol=2e-5)
    many.assert_called_once()

  def test_with_ccache_and_program_cache(self):
    # two fresh processes on one disk cache: the first compiles its kernels in one clang and keeps them, the second builds none
    code = AGAINST_NUMPY + """
import tinygrad.codegen as cg
from tinygrad.codegen import compile_together as ct
built, batches, orig, orig_many = set(), [], cg.do_to_program, ct.compile_many
def counting(ast, ren):   # (a kernel that waits for the one clang is in do_to_program twice: its codegen, then its object)
  built.add(ast.key)
  return orig(ast, ren)
cg.do_to_program, ct.compile_many = counting, lambda a, s: (batches.append(len(s)), orig_many(a, s))[1]
X, W = Tensor(x), Tensor(w)
np.testing.assert_allclose(((X * W).contiguous().sum() + (X - W).exp().max()).numpy(), (x * w).sum() + np.exp(x - w).max(), rtol=1e-5)
print(len(built), sum(batches), ",".join(sorted(p.key.hex() for p in cg.to_program_cache.values())))"""
    with tempfile.TemporaryDirectory() as tmp:
      env = {"CACHEDB": os.path.join(tmp, "cache.db"), "CCACHE": "1", "PROGRAM_CACHE": "1", "DEBUG": "0", "PARALLEL": "0", "TIERED": "0"}
      miss, hit = run_fresh(code, last=3, env=env).split(), run_fresh(code, last=3, env=env).split()
    self.assertGreaterEqual(int(miss[0]), 2)
    self.assertEqual(miss[1], miss[0])   # every kernel built went to the one clang
    self.assertEqual(hit[:2], ["0", "0"])
    self.assertEqual(miss[2], hit[2])    # the same PROGRAMs, binaries included

@skip_unless('devec-elements')
class TestDevecElements(TestQuickPasses):
  """codegen/devec_elements.py: devectorize2 takes a lane of a vector source from the STACK under its movement ops, without an INDEX
  for the rewrite to move there; the sink, so the rendered source, is the one with every INDEX made (DEVEC_ELEMENTS=0), for
  TestQuickPasses' kernels (W1..W6-like, a matmul, transcendentals, pads, full and quick builds) and a matmul tile"""
  def check_same(self, f, *args_np):
    from tinygrad.codegen import devec_elements as de
    lanes, orig = [0], de.lane
    def counting(x, ii):
      lanes[0] += (ret:=orig(x, ii)) is not None
      return ret
    for ast in self.kernels(f, *args_np):
      for quick in (False, True):
        with Context(DEVEC_ELEMENTS=0): full_sink, full_src, _ = self.render(ast, quick)
        with Context(DEVEC_ELEMENTS=1), unittest.mock.patch.object(de, "lane", counting): sink, src, _ = self.render(ast, quick)
        self.assertIs(sink, full_sink)
        self.assertEqual(src, full_src)
    self.assertGreater(lanes[0], 0, "no lane was taken without its INDEX")

  def test_matmul(self):   # a plain matmul: the CPU heuristic's register tile, its lanes RESHAPEs and EXPANDs of STACKs
    a, b = self.rng.standard_normal((48, 40)).astype(np.float32), self.rng.standard_normal((40, 36)).astype(np.float32)
    self.check_same(lambda A, B: A @ B, a, b)

@skip_unless('codegen-cost-2')
class TestCodegenCost2(TestQuickPasses):
  """uop/symbolic_shortcuts.py: resolve answered from the bounds of its operand as it is where they prove its default, a RESHAPE of
  constant indices in integers; the sink, so the rendered source, is upstream's resolve's and reshape's (FAST_REWRITE=0), for
  TestQuickPasses' kernels (W1..W6-like, a matmul, transcendentals, pads, a gather, half and long, full and quick builds). graph_rewrite's
  loop reads its attributes and stack limit once a call (uop/ops.py): test_rewrite_limit"""
  PROVEN = ('test_row_reduce', 'test_mlp', 'test_stencil', 'test_transcendental', 'test_matmul')
  def check_same(self, f, *args_np):
    from tinygrad.uop import symbolic_shortcuts as rl
    import tinygrad.schedule.indexing as indexing
    proven, orig, consts, orig_consts = [0], rl.resolve_proven, [0], rl.reshape_consts
    def counting(x, default):
      proven[0] += (ret:=orig(x, default))
      return ret
    def counting_consts(*a):
      consts[0] += (ret:=orig_consts(*a)) is not None
      return ret
    for ast in self.kernels(f, *args_np):
      for quick in (False, True):
        indexing.apply_movement_op.cache_clear()   # its cache would hand the other way's result back
        with Context(FAST_REWRITE=0): full_sink, full_src, full_passes = self.render(ast, quick)
        indexing.apply_movement_op.cache_clear()
        with Context(FAST_REWRITE=1), unittest.mock.patch.object(rl, "resolve_proven", counting), \
             unittest.mock.patch.object(rl, "reshape_consts", counting_consts): sink, src, passes = self.render(ast, quick)
        self.assertIs(sink, full_sink)
        self.assertEqual(src, full_src)
        self.assertEqual(passes, full_passes)
    # a vector load or store (memory coalescing's SHRINK) checks its offset's bounds in its shape
    if self._testMethodName in self.PROVEN: self.assertGreater(proven[0], 0, "no resolve answered from its operand's bounds")
    # a lane of a RESHAPEd vector (the matmul's tile, the pad's rows) is taken with integer indices
    if self._testMethodName in ('test_matmul', 'test_mlp', 'test_padded'): self.assertGreater(consts[0], 0, "no RESHAPE of constant indices")

  def test_matmul(self):   # a plain matmul: the CPU heuristic's register tile
    a, b = self.rng.standard_normal((48, 40)).astype(np.float32), self.rng.standard_normal((40, 36)).astype(np.float32)
    self.check_same(lambda A, B: A @ B, a, b)

  def test_rewrite_limit(self):   # the stack limit is read at each graph_rewrite: a Context around it still holds
    from tinygrad.uop.ops import graph_rewrite, PatternMatcher
    chain = UOp.const(1.0, dtypes.float)
    for i in range(80): chain = chain + UOp.const(float(i), dtypes.float)
    with Context(REWRITE_STACK_LIMIT=50), self.assertRaisesRegex(RuntimeError, "stack too big"): graph_rewrite(chain, PatternMatcher([]))

  def test_reshape_consts(self):   # a RESHAPE of constant indices: upstream's symbolic fold's CONSTs, or None where it doesn't apply
    import itertools
    from tinygrad.uop import symbolic_shortcuts as rl
    from tinygrad.schedule.indexing import apply_movement_op
    for in_shape, out_shape in [((64,), (4, 4, 4)), ((16,), (4, 4, 1)), ((4, 4, 4), (64,)), ((6, 4), (2, 3, 4)), ((5, 1, 7), (35,)), ((), ())]:
      for idx in itertools.islice(itertools.product(*[range(s) for s in out_shape]), 40):
        rngs = tuple(UOp.const(i, dtypes.weakint) for i in idx)
        fast = rl.reshape_consts(in_shape, out_shape, rngs)
        apply_movement_op.cache_clear()
        with Context(FAST_REWRITE=0): want = apply_movement_op(Ops.RESHAPE, in_shape, out_shape, rngs)
        self.assertIsNotNone(fast)
        self.assertEqual(len(fast), len(want))
        for a, b in zip(fast, want): self.assertIs(a, b)
    r = UOp.range(4, 0)
    self.assertIsNone(rl.reshape_consts((4,), (4,), (r,)))
    self.assertIsNone(rl.reshape_consts((4,), (4,), (UOp.const(1, dtypes.int),)))
    self.assertIsNone(rl.reshape_consts((4,), (4,), (UOp.const(-1, dtypes.weakint),)))
    self.assertIsNone(rl.reshape_consts((0, 4), (0,), (UOp.const(0, dtypes.weakint),)))

  def test_resolve_unproven(self):   # bounds that prove the other value, or none, go to upstream's simplify
    from tinygrad.uop.ops import resolve
    v = UOp.variable("v", 0, 10)
    self.assertTrue(resolve(v >= 0))
    self.assertFalse(resolve(v < 0, False))
    self.assertFalse(resolve(v < 0))   # proven False with the default True: simplify's answer, the same
    self.assertTrue(resolve(v < 5))   # not proven: the default
    self.assertFalse(resolve(v < 5, False))

@skip_unless('codegen-cost-3')
class TestCodegenCost3(TestQuickPasses):
  """codegen/decomp_templates.py: a transcendental's decomposition built once on placeholders and rebuilt on each lane's sources; the
  sink, so the rendered source, is the one built directly (DECOMP_TEMPLATES=0), for TestQuickPasses' kernels (W1..W6-like,
  transcendentals, pads, a gather, half and long, full and quick builds), a matmul tile for each ISA (forced, not the host's), the
  W4-like batch of sin and cos as vector lanes in float32 and float64, float64's exp and log"""
  TEMPLATED = ('test_transcendental', 'test_sin_cos_lanes', 'test_exp_log_f64')
  def check_same(self, f, *args_np): self.check_rendered(self.kernels(f, *args_np))

  def check_rendered(self, asts:list[UOp]):
    from tinygrad.codegen import decomp_templates as dt
    # templates counted by what they cache (a pattern's function is compiled with a copy of its globals: a patch of templated is unseen)
    built = 0
    for ast in asts:
      for quick in (False, True):
        with Context(DECOMP_TEMPLATES=0): full_sink, full_src, full_passes = self.render(ast, quick)
        dt._templates.clear()
        with Context(DECOMP_TEMPLATES=1): sink, src, passes = self.render(ast, quick)
        built += len(dt._templates)
        self.assertIs(sink, full_sink)
        self.assertEqual(src, full_src)
        self.assertEqual(passes, full_passes)
    if self._testMethodName in self.TEMPLATED: self.assertGreater(built, 0, "no decomposition from a template")

  def test_matmul(self):   # the register tile of each ISA: AVX2's 4x16 in ymm, AVX-512's 8x16 in zmm (forced, not the host's)
    import tinygrad.codegen.late.cpu_vectors as cpu_vectors
    a, b = self.rng.standard_normal((64, 40)).astype(np.float32), self.rng.standard_normal((40, 48)).astype(np.float32)
    asts = self.kernels(lambda A, B: A @ B, a, b)   # run with the host's ISA: AVX-512 code would be an illegal instruction on AVX2
    for vector_bytes in (32, 64):
      with self.subTest(vector_bytes=vector_bytes), unittest.mock.patch.object(cpu_vectors, "tile_vector_bytes", lambda: vector_bytes):
        self.check_rendered(asts)   # rendered only

  def test_sin_cos_lanes(self):   # W4-like: sin and cos of a batch's angles, the batch upcast to vector lanes, a cold branch each
    from tinygrad.vmap import vmap
    for dt, hi in ((np.float32, 3e4), (np.float64, 1e5)):
      x = self.rng.uniform(-hi, hi, (256, 3)).astype(dt)
      def f(X):
        if isinstance(X, Tensor): return vmap(lambda r: Tensor.stack(r[0].sin() * 2, r[1].cos() - r[2].sin(), r[2].cos()))(X)
        return np.stack([np.sin(X[:, 0]) * 2, np.cos(X[:, 1]) - np.sin(X[:, 2]), np.cos(X[:, 2])], 1)
      with self.subTest(dtype=dt.__name__): self.check_same(f, x)

  def test_exp_log_f64(self):   # float64's exp2 and log2 decompositions, their own templates
    x = self.rng.uniform(0.1, 20, (40, 5))
    self.check_same(lambda X: (X * 0.3).exp() - (X + 1).log() if isinstance(X, Tensor) else np.exp(X * 0.3) - np.log(X + 1), x)

  def test_template_is_direct(self):   # each decomposition alone, on lanes of loads and on an expression: the UOps built directly
    from tinygrad.codegen import decomp_templates as dt
    from tinygrad.codegen.decomp import transcendental as T
    dt._templates.clear()
    for dtype in (dtypes.float32, dtypes.float64, dtypes.float16):
      buf = UOp.placeholder((8,), dtype, 0)
      lanes = [buf.index(UOp.const(i, dtypes.weakint)).load() for i in range(3)]
      srcs = [*lanes, lanes[0] * lanes[1] + 2]
      for fxn, args in [(T.xsin, [(s,) for s in srcs]), (T.xexp2, [(s,) for s in srcs]), (T.xlog2, [(s,) for s in srcs]),
                        (dt._xsin_cos, [(s, t) for s, t in zip(srcs, srcs[1:])])]:
        for a in args:
          with Context(DECOMP_TEMPLATES=0): want = fxn(*a)
          self.assertIs(dt.templated(fxn, *a), want)
    self.assertEqual(len(dt._templates), 3 * 4)   # each function and dtype's template, built once
    c = UOp.const(3.0, dtypes.float32)   # a CONST: built directly
    self.assertIs(dt.templated(T.xsin, c), T.xsin(c))

if __name__ == "__main__":
  unittest.main()
