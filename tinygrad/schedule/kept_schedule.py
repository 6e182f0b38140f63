# line: 0.14.0 only (topic kept-schedule hooks it into schedule/__init__.py's lower_sink_to_linear)
"""The schedule kept across processes: lower_sink_to_linear's LINEAR for a function (its kernels' ASTs over the function's PARAMs and
the intermediate buffers it makes), kept in tinygrad's disk cache as the program cache keeps a kernel's PROGRAM, so a process's first call of a
graph an earlier process scheduled skips get_kernel_graph (rangeify, ~90% of a warm first call's schedule: bench W4 ~25 of ~50 ms).
The in-process schedule cache keys the same LINEAR by the function's key alone; across processes the key adds what the program cache's
does besides the AST (codegen/program_cache.py: every ContextVar's value, every environment variable tinygrad reads by name, the
sources and the machine). A function that holds a BUFFER (its slot names a buffer of this process) is not kept; the BUFFERs a schedule
makes (a LINEAR's intermediates, UOp.new_buffer) get new slots of this process on a hit, as a miss here would make them.
On with the program cache (PROGRAM_CACHE, CCACHE, the disk cache; off in a test unless forced), SCHEDULE_KEEP=0 turns it off alone.
Tested in test/test_first_call_cpu.py (TestKeptSchedule)."""
from __future__ import annotations
import hashlib, pickle, sqlite3
from dataclasses import replace
from typing import Callable
from tinygrad.helpers import ContextVar, diskcache_get, diskcache_put
from tinygrad.uop.ops import UOp, Ops, buffers
from tinygrad.codegen import program_cache

SCHEDULE_KEEP = ContextVar("SCHEDULE_KEEP", 1)
TABLE = "kept_schedule_v1"
# a BUFFER's slot is this process's own (UOp.unique_num, or a Buffer's id)
def fresh_buffers(linear:UOp) -> UOp:
  """the LINEAR with each BUFFER the schedule made given a new slot of this process (the same BUFFER twice, the same new one)"""
  if not (bufs:=[u for u in linear.toposort() if u.op is Ops.BUFFER]): return linear
  return linear.substitute({b: b.replace(arg=replace(b.arg, slot=next(UOp.unique_num))) for b in bufs}, name="kept schedule's buffers")

def enabled() -> bool: return bool(SCHEDULE_KEEP) and program_cache.enabled()

def schedule_key(function:UOp) -> str:
  """the function's key (as the in-process schedule cache) and what the program cache's key holds besides the kernel"""
  return hashlib.sha256(repr((function.key, program_cache.context_key())).encode()).hexdigest()

def kept_linear(function:UOp, build:Callable[[UOp], UOp]) -> UOp:
  """build(function), or the LINEAR an earlier process built for the same key"""
  if not enabled(): return build(function)
  try: hit = diskcache_get(TABLE, key:=schedule_key(function))
  except (sqlite3.Error, pickle.UnpicklingError, EOFError, AttributeError, TypeError): hit = None
  if isinstance(hit, UOp) and hit.op is Ops.LINEAR: return fresh_buffers(hit)
  linear = build(function)
  # a function's BUFFER is in the key by its slot, which another process gives to another buffer; a LINEAR's BUFFER that has a Buffer
  # already (or a Buffer's id for its slot: UOp.from_buffer) holds data of this process. Only the new, empty ones are made again
  if any(u.op is Ops.BUFFER for u in function.toposort()) or \
     any(u.op is Ops.BUFFER and (u.arg.slot < 0 or u in buffers) for u in linear.toposort()): return linear
  try: diskcache_put(TABLE, key, linear)
  except (pickle.PicklingError, TypeError, AttributeError, sqlite3.Error): pass
  return linear
