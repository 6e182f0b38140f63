# line: 0.14.0 only (the clang-together topic hooks it into engine/realize.py and codegen/__init__.py; the 0.12 line's is engine/tiered.py)
"""One clang for the kernels of a schedule (0.14's lowering, engine/realize.py lower_and_compile, without a worker pool). A clang process
spends ~30 ms loading LLVM before it reads a byte, and each kernel started its own. The driver runs cc1 inside its own process only for
one input, so the kernels go to one `clang -cc1` with an input file each: each file is named `-` (its own directory), as a kernel piped to
clang alone is, and cc1 writes each object beside its input: byte for byte the object the kernel compiled alone gives (ClangCompiler's
compile). The cc1 arguments are the driver's (`clang -###`), asked once a machine and kept in the disk cache; on a miss the driver runs
beside the codegen.
The lowering builds each kernel as before, twice: the first time its compile stops at its source (Deferred, with the rendered PROGRAM),
then one cc1 compiles those sources, and the second time the kernel's codegen is that rendered PROGRAM and its compile the object: the
program cache, to_program's cache and the quick tier see one ordinary build. CLANG_TOGETHER=0 turns it off. Tested in
test/test_first_call_cpu.py (TestClangTogether)."""
from __future__ import annotations
import os, shlex, subprocess, tempfile
from typing import Callable, Iterable, Iterator
from tinygrad.helpers import BEAM, WIN, ContextVar, VIZ, diskcache_get, diskcache_put, getenv
from tinygrad.uop.ops import UOp, TRACK_MATCH_STATS

CLANG_TOGETHER = ContextVar("CLANG_TOGETHER", 1)

class Deferred(Exception):
  def __init__(self, prg:UOp): self.prg = prg

collecting = False               # the first build of the kernels: a compile that would run clang stops at its source
current: tuple|None = None       # the kernel do_to_program builds now
rendered: dict[tuple, UOp] = {}  # (ast, renderer, QUICK_OPTS) -> the PROGRAM its first build rendered (SINK, LINEAR, SOURCE)
ready: dict[str, bytes] = {}     # a source -> its object, from the one cc1

def prerendered(ast:UOp, renderer) -> UOp|None:
  """do_to_program's start: the PROGRAM the kernel's first build rendered (its codegen is skipped the second time)"""
  global current
  if not collecting and not rendered: return None
  current = (ast, id(renderer), ContextVar._cache["QUICK_OPTS"].value if "QUICK_OPTS" in ContextVar._cache else None)
  return rendered.pop(current, None)

def compile_lib(compiler, prg:UOp, src:str) -> bytes:
  """do_compile's object: the one cc1's, or, while collecting, Deferred for a source clang would compile (not in CCACHE's disk cache)"""
  if (lib:=ready.get(src)) is not None: return lib
  if collecting and current is not None and can(compiler) and (compiler.cachekey is None or diskcache_get(compiler.cachekey, src) is None):
    rendered[current] = prg
    raise Deferred(prg)
  return compiler.compile_cached(src)

def can(compiler) -> bool:
  from tinygrad.runtime.support.compiler_cpu import ClangCompiler
  return type(compiler) is ClangCompiler and not WIN

# ******** cc1's arguments ********

def _driver_argv(compiler) -> list[str]: return compiler.argv("-", "-o", "-")

def _cc1_args(out:str) -> list[str]|None:
  """the cc1 command line `clang -###` prints, without its input and output (those are each kernel's)"""
  lines = [l for l in out.splitlines() if '"-cc1"' in l]
  if len(lines) != 1: return None
  args = shlex.split(lines[0])
  # one job that writes the object itself (no separate assembler), reading stdin
  if "-emit-obj" not in args or "-o" not in args or args[-1] != "-": return None
  i = args.index("-o")
  return args[:i] + args[i+2:-1]

def _cc1_key(compiler) -> str:
  # -march=native is this CPU's, the clang binary's own: program_cache.machine() has both
  from tinygrad.codegen.program_cache import machine
  return repr((machine(), os.getcwd(), _driver_argv(compiler)))

known_cc1: dict[str, list[str]|None] = {}   # this process's answers (without the disk cache too, CACHELEVEL=0)

class Cc1:
  """cc1's arguments for this compiler: known, from the disk cache, or from a `clang -###` started now and read when needed"""
  def __init__(self, compiler):
    self.key, self.proc = _cc1_key(compiler), None
    if self.key not in known_cc1 and (args:=diskcache_get("clang_cc1_args", self.key)) is not None: known_cc1[self.key] = args
    if self.key not in known_cc1:
      self.proc = subprocess.Popen([compiler.cc, "-###", *_driver_argv(compiler)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
  def get(self) -> list[str]|None:
    if self.proc is not None:
      _, err = self.proc.communicate()
      known_cc1[self.key] = args = _cc1_args(err) if self.proc.returncode == 0 else None
      if args is not None: diskcache_put("clang_cc1_args", self.key, args)
      self.proc = None
    return known_cc1.get(self.key)

def compile_many(cc1:list[str], srcs:list[str]) -> list[bytes]:
  """the objects of the sources from one cc1: each source its own file `-`, so each object is the one `clang -` writes for it alone"""
  with tempfile.TemporaryDirectory(prefix="tinygrad-clang-") as tmp:
    paths = []
    for i, src in enumerate(srcs):
      os.mkdir(d:=os.path.join(tmp, str(i)))
      with open(p:=os.path.join(d, "-"), "w") as f: f.write(src)
      paths.append(p)
    subprocess.run([*cc1, *paths], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    libs = []
    for p in paths:
      with open(p+".o", "rb") as f: libs.append(f.read())
  return libs

# ******** the lowering's map ********

def enabled(tasks:list) -> bool:
  return bool(CLANG_TOGETHER) and len(tasks) > 1 and not BEAM.value and not VIZ and TRACK_MATCH_STATS < 2 and not getenv("ASSERT_COMPILE") \
    and all(can(getattr(t[1][1], "compiler", None)) and not getattr(t[1][0].arg, "beam", 0) for t in tasks)

def compile_map(fn:Callable, tasks:Iterable) -> Iterator:
  """map(fn, tasks) for lower_and_compile's tasks ((i, (ast, renderer), context, quick)), their clang compiles in one cc1 a compiler"""
  global collecting, current
  if not enabled(tasks:=list(tasks)):
    yield from map(fn, tasks)
    return
  comps = {id(t[1][1].compiler): t[1][1].compiler for t in tasks}
  cc1: dict[int, Cc1] = {}   # started at a compiler's first kernel to compile, beside the codegen of the others
  deferred: list[tuple] = []   # (task, its source)
  try:
    collecting = True
    for t in tasks:
      try: ret = fn(t)
      except Deferred as d:
        deferred.append((t, d.prg.src[-1].arg))
        if (cid:=id(t[1][1].compiler)) not in cc1: cc1[cid] = Cc1(comps[cid])
        continue
      finally: current = None
      yield ret
    collecting = False
    for cid, comp in comps.items():
      srcs = list(dict.fromkeys(s for t, s in deferred if id(t[1][1].compiler) == cid))
      if len(srcs) < 2 or cid not in cc1 or (args:=cc1[cid].get()) is None: continue
      # a source that fails is compiled alone by its kernel's second build: the error is that kernel's own
      try: libs = compile_many(args, srcs)
      except (subprocess.CalledProcessError, OSError): continue
      for s, lib in zip(srcs, libs):
        if comp.cachekey is not None: diskcache_put(comp.cachekey, s, lib)
        ready[s] = lib
    for t, _ in deferred: yield fn(t)
  finally:
    collecting, current = False, None
    for c in cc1.values(): c.get()   # the driver started for cc1's arguments is waited on (and its answer kept)
    rendered.clear()
    ready.clear()
