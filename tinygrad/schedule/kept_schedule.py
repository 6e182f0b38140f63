# line: 0.14.0 only (topic kept-schedule hooks it into schedule/__init__.py's lower_sink_to_linear)
"""The schedule kept across processes: lower_sink_to_linear's LINEAR for a function (its kernels' ASTs over the function's PARAMs, no
buffer of this process), kept in tinygrad's disk cache as the program cache keeps a kernel's PROGRAM, so a process's first call of a
graph an earlier process scheduled skips get_kernel_graph (rangeify, ~90% of a warm first call's schedule: bench W4 ~25 of ~50 ms).
The in-process schedule cache keys the same LINEAR by the function's key alone; across processes the key adds what the program cache's
does besides the AST (codegen/program_cache.py: every ContextVar's value, every environment variable tinygrad reads by name, the
sources and the machine). A LINEAR or function that holds a BUFFER (its slot is this process's own) is not kept.
On with the program cache (PROGRAM_CACHE, CCACHE, the disk cache; off in a test unless forced), SCHEDULE_KEEP=0 turns it off alone.
Tested in test/test_first_call_cpu.py (TestKeptSchedule)."""
from __future__ import annotations
import hashlib, pickle, sqlite3
from typing import Callable
from tinygrad.helpers import ContextVar, diskcache_get, diskcache_put
from tinygrad.uop.ops import UOp, Ops
from tinygrad.codegen import program_cache

SCHEDULE_KEEP = ContextVar("SCHEDULE_KEEP", 1)
TABLE = "kept_schedule_v1"
# a BUFFER's slot is this process's own (UOp.unique_num, or a Buffer's id): a graph with one is not the same graph in another process
PROCESS_OPS = {Ops.BUFFER}

def enabled() -> bool: return bool(SCHEDULE_KEEP) and program_cache.enabled()

def schedule_key(function:UOp) -> str:
  """the function's key (as the in-process schedule cache) and what the program cache's key holds besides the kernel"""
  return hashlib.sha256(repr((function.key, program_cache.context_key())).encode()).hexdigest()

def kept_linear(function:UOp, build:Callable[[UOp], UOp]) -> UOp:
  """build(function), or the LINEAR an earlier process built for the same key"""
  if not enabled(): return build(function)
  try: hit = diskcache_get(TABLE, key:=schedule_key(function))
  except (sqlite3.Error, pickle.UnpicklingError, EOFError, AttributeError, TypeError): hit = None
  if isinstance(hit, UOp) and hit.op is Ops.LINEAR: return hit
  linear = build(function)
  # only a pure LINEAR: its kernels over PARAMs. (function's own process ops are checked too: the key holds them by their ids)
  if any(u.op in PROCESS_OPS for u in linear.toposort()) or any(u.op in PROCESS_OPS for u in function.toposort()): return linear
  try: diskcache_put(TABLE, key, linear)
  except (pickle.PicklingError, TypeError, AttributeError, sqlite3.Error): pass
  return linear
