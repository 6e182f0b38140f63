# line: 0.14.0 only (the first-build-tier topic hooks it into engine/realize.py; the 0.12 line's tiers are engine/tiered.py)
"""Tiered builds on the 0.14 line: a kernel lowered for a linear that runs now (run_linear, an eager realize) is built quick first,
without the heuristic's opts that are slow to build (heuristic_cpu.py's QUICK_OPTS: the vector transcendentals, the tall matmul tile),
and in full the next time it is lowered: its second run, or a TinyJit capture or HCQ graph, which keep the programs they get and so
always get full builds. A cold first call on 0.14 is Python codegen (full_rewrite_to_sink ~80%), which those opts multiply (bench W4's
8 lanes of sin). Quickest of all, where numpy computes the kernel as the C program would, is no build: the first run is numpy over the
kernel's ranges (engine/first_numpy.py, the first-numpy topic), asked first. The reduction order is the full build's: QUICK_OPTS
leaves out elementwise upcasts, the tile's M and N and a reduce's upcast outputs, never a reduce's unroll. Rounding can differ where a transcendental is vector math in one build and scalar in the other
(clang fuses multiply-adds differently). A quick build is kept in the program cache too, under its own key. Tested in
test/test_first_call_cpu.py."""
from __future__ import annotations
from tinygrad.helpers import BEAM, Context, ContextVar, getenv
from tinygrad.uop.ops import Ops, UOp
from tinygrad.renderer import Renderer
import tinygrad.codegen as codegen
from tinygrad.codegen import to_program, to_program_cache, program_cache
from tinygrad.codegen.opt.heuristic_cpu import quick_opts_differ
import tinygrad.engine.first_numpy as first_numpy
from tinygrad.engine.first_numpy import numpy_program, numpy_spent, BUILD_S, BUILD_S_PER_NODE, jit_first_call  # noqa: F401 (TinyJit's hook)
from tinygrad.engine.first_graph import is_graph_program

TIERED = ContextVar("TIERED", 1)   # TIERED=0: every build is full
quick_programs: dict[tuple, UOp] = {}   # to_program_cache's keys whose PROGRAM is a quick build: that PROGRAM
quick_asts: dict[UOp, UOp] = {}         # a quick PROGRAM: its kernel's AST
built_quick: set[tuple] = set()         # the keys built quick once: a kernel is built quick at most once a process

def tiering(ast:UOp, ren:Renderer) -> bool:
  """whether the kernel's first build may be quick: not with TIERED=0, BEAM (it times full builds) or ASSERT_COMPILE, and only on CPU"""
  if not TIERED or BEAM or getenv("ASSERT_COMPILE") or ast.op is not Ops.SINK or getattr(ast.arg, "beam", 0): return False
  return ren.target.device == "CPU"

def first_build(ast:UOp, ren:Renderer, quick:bool) -> tuple[UOp, bool]:
  """(the PROGRAM, whether it is a quick build): quick only for a linear that runs now (quick) and when the program cache has no full
  build of the kernel, asked first, so a warm process never builds quick. Quickest is numpy over the kernel's ranges
  (engine/first_numpy.py); then, where the full build has opts a quick one lacks, the quick opts"""
  if not quick or not tiering(ast, ren): return to_program(ast, ren), False
  if (prg:=program_cache.lookup(ast, ren)) is not None: return prg, False   # (the kept entry is the PROGRAM with its key and device)
  if (prg:=numpy_program(ast)) is not None: return prg, True
  if not quick_opts_differ(ast, ren): return to_program(ast, ren), False
  # no full build kept: the quick one, itself kept under its own key (QUICK_OPTS is in it), so a process that runs a kernel once builds
  # it once across processes. do_to_program looked up at the call: a test's mock of it sees it
  with Context(QUICK_OPTS=1): return program_cache.cached_to_program(ast, ren, lambda a, r: codegen.do_to_program(a, r)), True

def stays_quick(key:tuple) -> bool:
  """in a TinyJit's first call (first_numpy's jit_first_call), a kernel lowered again keeps its numpy run while its runs took less than a
  build of it would: the capture builds it"""
  if not first_numpy.jit_first or (prg:=quick_programs.get(key)) is None or (spent:=numpy_spent.get(prg)) is None: return False
  return spent < BUILD_S + BUILD_S_PER_NODE * len(quick_asts[prg].toposort())

def add_quick(key:tuple, prg:UOp, ast:UOp) -> None:
  quick_programs[key], quick_asts[prg] = prg, ast
  built_quick.add(key)

def requeue(linear:UOp) -> UOp:
  """the linear with each quick PROGRAM its kernel's AST again, for the lowering to build it in full (a linear compiled once is kept by
  the schedule cache: its CALLs hold their PROGRAMs)"""
  if not quick_asts: return linear
  subs = {c: c.replace(src=(quick_asts[c.src[0]], *c.src[1:])) for c in linear.src if c.op is Ops.CALL and c.src[0] in quick_asts}
  return linear.replace(src=tuple(subs.get(c, c) for c in linear.src)) if subs else linear

def full_builds(keys) -> None:
  """the quick builds of these kernels, lowered again, leave to_program's cache: the lowering builds them in full"""
  for k in keys:
    if not stays_quick(k) and quick_programs.pop(k, None) is not None: to_program_cache.pop(k, None)

def has_quick(linear:UOp) -> bool:
  """whether a compiled linear runs a quick build (an eager realize keeps only full ones: engine/callify_cache.py)"""
  if any(c.op is Ops.CALL and is_graph_program(c.src[0]) for c in linear.src): return True   # a function's first run (engine/first_graph.py)
  return bool(quick_programs) and not (quick:=set(quick_programs.values())).isdisjoint(c.src[0] for c in linear.src if c.op is Ops.CALL)
