# line: 0.12.0 only (the frozen line, the seeds' design; its topics in patches/ hook it, the 0.14.0 line never imports it)
"""Tiered builds (the first-call topic patch hooks them into engine/realize.py): a kernel's first build is quick (clang -O1, a third of
-O2's time, and without the heuristic's opts that are slow to build: QUICK_OPTS), and a kernel that runs a second time is rebuilt in
full in the background and swapped in. A schedule's kernels not built yet go to one compiler process together (compile_together).
A first call is codegen in Python, then clang: bench/analysis.md measures each piece; test/test_cpu_codegen.py tests them."""
from __future__ import annotations
import threading
from dataclasses import replace
from typing import TYPE_CHECKING
from tinygrad.helpers import DEBUG, BEAM, Context, dedup, getenv, diskcache_get, diskcache_put
from tinygrad.uop.ops import Ops, UOp
from tinygrad.device import Device
from tinygrad.codegen import get_program
if TYPE_CHECKING: from tinygrad.engine.realize import CompiledRunner, ExecItem

def quick_tier(compiler) -> bool:
  """whether a kernel's first build uses the compiler's quick tier (TIERED=0 turns it off; BEAM times its candidates at full optimization)"""
  return getattr(compiler, "quick_tier", False) and getenv("TIERED", 1) and not BEAM.value and not getenv("ASSERT_COMPILE")

def start_quick_spare(compiler):
  """a quick build's compiler process starts with the codegen of its kernel, which hides its startup (compiler_cpu's spare)"""
  if quick_tier(compiler) and hasattr(compiler, "start_spare"): compiler.start_spare(quick=True)

def tier_up(r:CompiledRunner, wait=False):
  """a quick build's second run starts its full build in the background (start_full_builds); the first run after it is done swaps it
  in. wait: finish it now"""
  if r.rebuild is None:
    if (runs:=r.quick_runs+1) < 2 and not wait:
      r.quick_runs = runs
      return
    start_full_builds([r])
  if wait and r.rebuild.is_alive(): r.rebuild.join()
  if r.full_lib is None: return
  r.quick, r.full_ast = False, None
  if isinstance(r.full_lib, Exception):
    if DEBUG >= 1: print(f"{r.p.name}: its full build failed, the quick build stays: {r.full_lib!r}")
    return
  if (comp:=Device[r.device].compiler).cachekey is not None: diskcache_put(comp.cachekey, r.full_p.src, r.full_lib)
  r.p = replace(r.full_p, lib=r.full_lib)
  r._prg = Device[r.device].runtime(r.p.function_name, r.full_lib, *r.p.aux)

def start_full_builds(runners:list[CompiledRunner]):
  """the full builds of quick runners, one clang per device, in a background thread: clang is a process of its own, so the caller goes on"""
  for dev in dedup(r.device for r in runners):
    todo, comp = [r for r in runners if r.device == dev and r.quick and r.rebuild is None], Device[dev].compiler
    # the full build of a kernel whose quick build left out opts (QUICK_OPTS) is its program with them: its codegen runs here, not in the thread
    for r in todo:
      if r.full_ast is not None: r.full_p = get_program(r.full_ast, Device[dev].renderer, compile_src=False)
      r.full_lib = diskcache_get(comp.cachekey, r.full_p.src) if comp.cachekey is not None else None  # built for another device
    def rebuild(todo=[r for r in todo if r.full_lib is None], comp=comp):
      srcs, names = [r.full_p.src for r in todo], [r.full_p.function_name for r in todo]
      try: libs = comp.compile_many(srcs, names, spare=False) if len(todo) > 1 else [comp.compile(srcs[0], spare=False)]
      except Exception as e: libs = [e] * len(todo)
      for r,lib in zip(todo, libs): r.full_lib = lib
    thread = threading.Thread(target=rebuild, daemon=True)
    for r in todo: r.rebuild = thread
    if any(r.full_lib is None for r in todo): thread.start()

def finish_full_builds(runners:list[CompiledRunner]):
  """quick runners built in full now (a jit graph keeps the programs it captures)"""
  start_full_builds(quick:=[r for r in runners if r.quick])
  for r in quick: tier_up(r, wait=True)

def compile_together(schedule:list[ExecItem]):
  """the kernels of a schedule not compiled yet, built in one compiler call per device: a clang process costs ~35 ms before it reads a byte"""
  from tinygrad.engine.realize import method_cache, runner_keys, get_runner
  todo: dict[tuple, tuple[str, UOp]] = {}
  again: list[CompiledRunner] = []   # quick builds that run a second time: their full builds start together
  for ei in schedule:
    if ei.prg is not None or ei.ast.op is not Ops.SINK or ei.bufs[0] is None: continue
    ckey, bkey = runner_keys(dev:=ei.bufs[0].device, ei.ast)
    if (r:=method_cache.get(ckey)) is not None:
      ei.prg = r   # what lower() would look up again
      if r.quick and r.quick_runs >= 1: again.append(r)
    elif bkey not in method_cache: todo.setdefault(bkey, (dev, ei.ast))
  if again: start_full_builds(again)
  if BEAM.value or len(todo) < 2: return  # BEAM compiles its candidates itself
  for dev in dedup([d for d,_ in todo.values()]):
    if len(asts:=[a for d,a in todo.values() if d == dev]) < 2 or not hasattr(comp:=Device[dev].compiler, "compile_many"): continue
    start_quick_spare(comp)
    with Context(QUICK_OPTS=quick_tier(comp)): prgs = [get_program(a, Device[dev].renderer, compile_src=False) for a in asts]
    libs = comp.compile_cached_many([p.src for p in prgs], [p.function_name for p in prgs], quick=quick_tier(comp))
    for a,p,(lib,quick) in zip(asts, prgs, libs): get_runner(dev, a, replace(p, lib=lib), quick=quick)
