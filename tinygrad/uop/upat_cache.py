# the pattern cache (topic first-call-fixed-cost): a compiled UPat's match function kept across processes in tinygrad's disk cache, as
# Python keeps a module's bytecode. upat_compile renders each pattern to Python through two graph rewrites (~0.5-1 ms a pattern, 30-80 of
# them in a process's first kernel); a hit reads the code object and rebinds its literals, skipping the rewrites.
from __future__ import annotations
import functools, hashlib, marshal, os, pathlib, sqlite3, sys
from typing import Callable
from tinygrad.helpers import CACHELEVEL, ContextVar, diskcache_get, diskcache_put
from tinygrad.uop.ops import UOp, UPat, Ops

# on by default; UPAT_CACHE=0 or 1 forces it. Left unset, it is off while pytest runs a test (a test may mock the generator, which the key
# sees only by its sources)
UPAT_CACHE = ContextVar("UPAT_CACHE", -1)
TABLE = "upat_code"

@functools.cache
def generator_key() -> str:
  """what renders a pattern besides the pattern: the uop package (upat.py, ops.py's rewrites), helpers and dtypes, by each file's size and
  mtime (what Python's bytecode cache checks), and the Python version (marshal's format is per version)"""
  root = pathlib.Path(__file__).resolve().parent.parent
  files = sorted(root.glob("uop/*.py")) + [root/"helpers.py", root/"dtype.py"]
  return hashlib.sha256(repr((sys.version, [(f.name, (st:=f.stat()).st_size, st.st_mtime_ns) for f in files])).encode()).hexdigest()

def enabled() -> bool:
  on = UPAT_CACHE.value > 0 or (UPAT_CACHE.value < 0 and "PYTEST_CURRENT_TEST" not in os.environ)
  return on and CACHELEVEL >= 1

def clause_key(clause:UOp, lits:list[UOp], has_ctx:bool) -> str|None:
  """the clause (the generator's input) with each literal as its index: the rendered code depends on a literal only by which node it is
  (it becomes a name, a0, a1, ...); any other arg must be a str, int or None, whose repr is exact (else None: not cached)"""
  idx, h = {u: i for i, u in enumerate(lits)}, {}
  for u in clause.toposort():
    if u.op is Ops.PYLITERAL: a = f"#{idx[u]}"
    elif u.arg is None or type(u.arg) in (str, int): a = repr(u.arg)
    else: return None
    h[u] = hashlib.sha256(repr((u.op, u.dtype, a, u.tag)).encode() + b"".join(h[s] for s in u.src)).digest()
  return hashlib.sha256(h[clause] + repr((has_ctx, generator_key())).encode()).hexdigest()

def cached_code(p:UPat, has_ctx:bool, get_clause:Callable, get_code:Callable):
  """get_code(p, has_ctx): (code, literals by name) or None, or what an earlier process rendered from the same clause"""
  if not enabled(): return get_code(p, has_ctx)
  clause = get_clause(p, UOp(Ops.CUSTOMI, arg="uop"))
  lits = [u for u in clause.toposort() if u.op is Ops.PYLITERAL]
  if (key:=clause_key(clause, lits, has_ctx)) is None: return get_code(p, has_ctx)
  # a disk cache that can't be read (another thread's connection, a bad entry) is a miss
  try: hit = diskcache_get(TABLE, key)
  except sqlite3.Error: hit = None
  if hit is False: return None   # it doesn't compile (UPatCompileError): interpreted
  if hit is not None:
    try: return marshal.loads(hit[0]), {n: lits[i].arg for n, i in hit[1].items()}
    except (ValueError, EOFError, TypeError, IndexError, KeyError): pass
  ret = get_code(p, has_ctx)
  if ret is None: val = False
  else:
    # each name's literal, by the node it came from (by identity: equal literals of different nodes stay apart)
    where = {n: [i for i, u in enumerate(lits) if u.arg is v] for n, v in ret[1].items()}
    if any(len(w) != 1 for w in where.values()): return ret
    # (dont_inherit: the flags upat.py's exec gives it, not this module's __future__ annotations)
    val = (marshal.dumps(compile(ret[0], "<string>", "exec", dont_inherit=True)), {n: w[0] for n, w in where.items()})
  try: diskcache_put(TABLE, key, val)
  except sqlite3.Error: pass
  return ret
