# the pattern cache (topic first-call-fixed-cost): a compiled UPat's match function kept across processes in tinygrad's disk cache, as
# Python keeps a module's bytecode. upat_compile renders each pattern to Python through two graph rewrites (~0.5-1 ms a pattern, 30-80 of
# them in a process's first kernel); a hit reads the code object and rebinds its literals, skipping the rewrites. The key is a walk of the
# UPat (pattern_key, ~8 us), the entries of the process's sources are read in one query (codegen-cost topic: a hit ~0.25 -> ~0.03 ms).
from __future__ import annotations
import functools, hashlib, itertools, marshal, os, pathlib, pickle, sqlite3, sys
from typing import Callable
from tinygrad.helpers import CACHELEVEL, VERSION, ContextVar, db_connection, diskcache_put
from tinygrad.uop.ops import UOp, UPat, Ops

# on by default; UPAT_CACHE=0 or 1 forces it. Left unset, it is off while pytest runs a test (a test may mock the generator, which the key
# sees only by its sources)
UPAT_CACHE = ContextVar("UPAT_CACHE", -1)
TABLE = "upat_walk"   # keyed by the generator and pattern_key (the table upat_code was keyed by clause_key)

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
  (it becomes a name, a0, a1, ...); any other arg must be a str, int or None, whose repr is exact (else None: not cached). Kept as the
  reference pattern_key is tested against"""
  idx, h = {u: i for i, u in enumerate(lits)}, {}
  for u in clause.toposort():
    if u.op is Ops.PYLITERAL: a = f"#{idx[u]}"
    elif u.arg is None or type(u.arg) in (str, int): a = repr(u.arg)
    else: return None
    h[u] = hashlib.sha256(repr((u.op, u.dtype, a, u.tag)).encode() + b"".join(h[s] for s in u.src)).digest()
  return hashlib.sha256(h[clause] + repr((has_ctx, generator_key())).encode()).hexdigest()

def pattern_key(p:UPat, has_ctx:bool) -> tuple[str, list, dict]|None:
  """the key without building the clause (_get_clause made ~90 UOps of a pattern and clause_key hashed each, ~0.2 ms a pattern, most of a
  cache hit): a walk of the fields _get_clause reads, in its order, each literal it would make a PYLITERAL of written as its class, the
  first literal equal to it (equal literals are one PYLITERAL, one name, as UOp's cache makes them one node). Returns the key, each class's
  literal and the class of each literal; None where the walk meets a src _get_clause can't build"""
  reps: list = []
  cls: dict = {}
  def lit(v) -> str:
    if (c:=cls.get(v)) is None: cls[v] = c = len(reps); reps.append(v)
    return f"#{c}"
  def walk(p:UPat) -> str:
    if p.is_any: return "any(" + ",".join(walk(s) for s in p.src[0]) + ")"
    f = []
    if p.op is not None: f.append(f"op in {lit(tuple(int(x) for x in p.op))}" if len(p.op) > 1 else f"op={p.op[0].value}")
    if p.arg is not None: f.append(f"arg={int(p.arg)}" if isinstance(p.arg, int) else f"arg=={lit(p.arg)}")
    if p.strict_length or p.required_len > 0: f.append(f"len{'==' if p.strict_length else '>='}{p.required_len}")
    if p.name is not None: f.append(f"name={p.name!r}")
    if p.match_dtype is not None:
      f.append(f"dtype in {lit(tuple(p.match_dtype))}" if len(p.match_dtype) > 1 else f"dtype=={lit(p.match_dtype[0])}")
    if p.match_tag is not None: f.append(f"tag in {lit(tuple(p.match_tag))}" if len(p.match_tag) > 1 else f"tag=={lit(p.match_tag[0])}")
    if p.src is not None:
      if len(p.src) == 1 and isinstance(p.src[0], tuple): f.append("src(" + ",".join(walk(s) for s in p.src[0]) + ")")
      elif len(p.src) == 1 and isinstance(p.src[0], itertools.repeat): f.append("rep(" + walk(next(p.src[0])) + ")")
      elif len(p.src) > 1 and all(isinstance(x, tuple) for x in p.src):
        f.append("fork(" + "|".join(",".join(walk(s) for s in ss) for ss in p.src) + ")")
      else: raise ValueError("a src _get_clause can't build")
    return "(" + ";".join(f) + ")"
  try: structure = walk(p)
  except (ValueError, TypeError): return None   # TypeError: an unhashable literal, which a PYLITERAL can't be either
  return hashlib.sha256(repr((structure, has_ctx)).encode()).hexdigest(), reps, cls

_kept: dict[str, bytes]|None = None
def kept() -> dict[str, bytes]:
  """every entry of this generator (its sources), read in one query at the first pattern a process compiles (a get a pattern was ~50 us)"""
  global _kept
  if _kept is None:
    try: _kept = dict(db_connection().execute(f"SELECT key, val FROM '{TABLE}_{VERSION}' WHERE gen=?", (generator_key(),)).fetchall())
    except sqlite3.OperationalError: _kept = {}   # no table yet
    except sqlite3.Error: return {}   # a disk cache this thread can't read (another thread's connection): a miss, asked again later
  return _kept

def lookup(key:str):
  """the entry: (code, each name's literal class), False (it doesn't compile), or None"""
  return None if (raw:=kept().get(key)) is None else pickle.loads(raw)

def store(key:str, val) -> None:
  kept()[key] = pickle.dumps(val)
  try: diskcache_put(TABLE, {"gen": generator_key(), "key": key}, val)
  except sqlite3.Error: pass

def cached_code(p:UPat, has_ctx:bool, get_clause:Callable, get_code:Callable):
  """get_code(p, has_ctx): (code, literals by name) or None, or what an earlier process rendered from a pattern of the same key"""
  if not enabled() or (pk:=pattern_key(p, has_ctx)) is None: return get_code(p, has_ctx)
  key, reps, cls = pk
  try: hit = lookup(key)
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError): hit = None   # a bad entry is a miss
  if hit is False: return None   # it doesn't compile (UPatCompileError): interpreted
  if hit is not None:
    try: return marshal.loads(hit[0]), {n: reps[c] for n, c in hit[1].items()}
    except (ValueError, EOFError, TypeError, IndexError, KeyError): pass
  ret = get_code(p, has_ctx)
  if ret is None: val = False
  else:
    # each name's literal class: the clause's PYLITERAL is the class's first literal (UOp's cache), of that type
    where = {n: cls.get(v) for n, v in ret[1].items()}
    if any(c is None or type(reps[c]) is not type(ret[1][n]) for n, c in where.items()): return ret
    # (dont_inherit: the flags upat.py's exec gives it, not this module's __future__ annotations)
    val = (marshal.dumps(compile(ret[0], "<string>", "exec", dont_inherit=True)), where)
  store(key, val)
  return ret
