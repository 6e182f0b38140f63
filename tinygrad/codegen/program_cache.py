# the program cache (topic program-cache, 0.14 line): to_program's PROGRAM (linearized, rendered, compiled) kept across processes in
# tinygrad's disk cache, so a process's first call of a kernel built before skips its Python codegen as well as its clang. Upstream's
# compile cache keys binaries by their source, which a process only has after the codegen: most of a first call on 0.14.
from __future__ import annotations
import functools, hashlib, os, pathlib, pickle, platform, re, shutil, sqlite3, sys
from typing import Callable
from tinygrad.uop.ops import UOp
from tinygrad.helpers import CACHELEVEL, CCACHE, DEBUG, VIZ, ContextVar, diskcache_get, diskcache_put, getenv

# on by default, as upstream's CCACHE: PROGRAM_CACHE=1 forces it on, PROGRAM_CACHE=0 off. Left unset, it is off while pytest runs a test
# (PYTEST_CURRENT_TEST): the key can't see a function or attribute patched in a process (a test's mock.patch of a codegen function), so
# a suite's processes sharing it could give one test another's program. It also needs CCACHE (CCACHE=0, a cold compile, turns both off)
# and the disk cache (CACHELEVEL>=1)
PROGRAM_CACHE = ContextVar("PROGRAM_CACHE", -1)
TABLE = "program_cache_v2"   # v2: (PROGRAM, its key and device)

# the names of the environment variables tinygrad reads by name: getenv("X"), ContextVar("X", ...), os.getenv / os.environ
ENV_NAME = re.compile(r"""(?:getenv|ContextVar|os\.environ\.get|os\.environ\[)\(?\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")
ROOT = pathlib.Path(__file__).resolve().parent.parent   # the tinygrad package

def _sources() -> list[tuple[str, int, int]]:
  """every module of the package but the bindings (runtime/autogen): path, size and mtime, what Python's bytecode cache checks a source by"""
  ret, n = [], len(str(ROOT)) + 1
  for dp, dns, fns in os.walk(ROOT):
    dns[:] = sorted(d for d in dns if d not in ("autogen", "__pycache__"))
    for fn in sorted(fns):
      if fn.endswith(".py"): ret.append(((p:=os.path.join(dp, fn))[n:], (st:=os.stat(p)).st_size, st.st_mtime_ns))   # relative to ROOT
  return ret

@functools.cache
def env_names(sources:tuple[tuple[str, int, int], ...]) -> tuple[str, ...]:
  """the names the sources read, scanned once per version of the sources (kept in the disk cache: the scan reads 2 MB)"""
  skey = hashlib.sha256(repr(list(sources)).encode()).hexdigest()
  if (names:=diskcache_get(TABLE+"_env_names", skey)) is None:
    names = tuple(sorted({n for f, _, _ in sources for n in ENV_NAME.findall((ROOT/f).read_text(errors="replace"))}))
    diskcache_put(TABLE+"_env_names", skey, names)
  return names

@functools.cache
def machine() -> tuple:
  """what a program depends on beyond tinygrad: this CPU's features (the CPU heuristics and clang's -march=native), the compiler binary"""
  try: cpu = [l for l in pathlib.Path("/proc/cpuinfo").read_text().splitlines() if l.startswith(("flags", "model name"))][:2]
  except OSError: cpu = []
  cc = shutil.which(getenv("CC", "clang"))
  # platform.processor() only without /proc/cpuinfo: on Linux it runs `uname -p` (~5 ms a process) for what cpuinfo's lines say better
  return (sys.version, platform.machine(), platform.processor() if not cpu else None, tuple(cpu), cc,
          (st:=os.stat(cc)).st_size if cc else None, st.st_mtime_ns if cc else None)

@functools.cache
def _process_key() -> tuple:
  """per process: the sources, the machine, and the ContextVars whose values the key holds, those registered by the time of the first
  kernel (a Context override of one registered later, a device's own, is not seen; its environment variable is)"""
  import tinygrad.codegen.opt.heuristic_cpu  # noqa: F401  (its QUICK_OPTS, whether or not this kernel's codegen has imported it yet)
  return (tuple(_sources()), machine(), tuple(sorted(ContextVar._cache)))

def program_key(ast, renderer) -> str:
  """everything to_program's output depends on: the kernel AST (its key, as to_program's own cache in a process), the renderer, every
  ContextVar's value now (Context included), every environment variable tinygrad reads by name, the sources and the machine"""
  # the renderer's plain settings too (a patch.object of its has_local or supports_float4 changes the program)
  ren = (type(renderer).__module__, type(renderer).__qualname__, repr(renderer.target),
         sorted((k, v) for k, v in vars(renderer).items() if isinstance(v, (bool, int, float, str, type(None)))))
  return hashlib.sha256(repr((ast.key, ren, context_key())).encode()).hexdigest()

def context_key() -> str:
  """the key's part besides the kernel and the renderer (the kept schedule's too: schedule/kept_schedule.py): every ContextVar's value
  now, every environment variable tinygrad reads by name, the sources and the machine"""
  srcs, mach, names = _process_key()
  ctxvars = tuple((k, repr(ContextVar._cache[k].value)) for k in names)
  # the variables set of those names, one pass over the environment (a lookup of each of ~170 names was ~0.25 ms a key)
  env = tuple(sorted((n, v) for n, v in os.environ.items() if n in _name_set(srcs)))
  return hashlib.sha256(repr((ctxvars, env, _static_key(srcs, mach))).encode()).hexdigest()

@functools.cache
def _name_set(srcs:tuple) -> frozenset[str]: return frozenset(env_names(srcs))
@functools.cache
def _static_key(srcs:tuple, mach:tuple) -> str: return hashlib.sha256(repr((srcs, mach)).encode()).hexdigest()   # once a process

def enabled() -> bool:   # DEBUG>=3 and VIZ show the codegen
  on = PROGRAM_CACHE.value > 0 or (PROGRAM_CACHE.value < 0 and "PYTEST_CURRENT_TEST" not in os.environ)
  return on and bool(CCACHE) and CACHELEVEL >= 1 and not VIZ and DEBUG < 3

# the PROGRAM's own key and device, kept with it: the runtime and the launch ask for both, and an unpickled PROGRAM would find them by
# walking its whole graph again (bench W4's kernel, ~8,500 UOps: 30 of a warm first call's 125 ms). Each is what the same UOps give
# (the launch needs them in this process too)
KEPT = ("key", "device")
def restore(prg:UOp, props:dict) -> UOp:
  for nm, v in props.items(): prg.__dict__.setdefault(nm, v)   # (a PROGRAM this process holds already has them)
  return prg

def lookup(ast, renderer) -> UOp|None:
  """the PROGRAM an earlier process built from this key, its key and device restored, or None"""
  return restore(*hit) if enabled() and (hit:=diskcache_get(TABLE, program_key(ast, renderer))) is not None else None

def cached_to_program(ast, renderer, build:Callable):
  """build(ast, renderer), or the PROGRAM an earlier process built from the same key"""
  if not enabled(): return build(ast, renderer)
  if (hit:=diskcache_get(TABLE, key:=program_key(ast, renderer))) is not None: return restore(*hit)
  prg = build(ast, renderer)
  # a PROGRAM that doesn't pickle, or a disk cache that can't be written, is only not kept
  try: diskcache_put(TABLE, key, (prg, {getattr(UOp, p).nm: getattr(prg, p) for p in KEPT}))
  except (pickle.PicklingError, TypeError, AttributeError, sqlite3.Error): pass
  return prg
