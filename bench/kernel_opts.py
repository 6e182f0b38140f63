#!/usr/bin/env python3
"""Time one kernel of a vmapped workload under opt lists chosen by hand, next to the default heuristics: the measurement behind
analysis.md's "what the heuristics could pick" for a workload. One thread (CPU_COUNT=1), median of 15 runs of the kernel alone.

  CPU_COUNT=1 PYTHONPATH=. python bench/kernel_opts.py W1 "UPCAST 0 8, UNROLL 1 4" "UPCAST 0 4, UNROLL 0 4, UNROLL 1 4"
"""
import os, sys, statistics
os.environ.setdefault("CPU_COUNT", "1")
os.environ.setdefault("TIERED", "0")   # a runner built here is the full (-O2) build, not the quick -O1 one
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tinygrad import Tensor, Device, vmap
from tinygrad.codegen import get_program
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.uop.ops import KernelInfo
from tinygrad.engine.realize import CompiledRunner
from workloads import WORKLOADS

def parse(spec:str) -> tuple[Opt, ...]:
  """"UPCAST 0 8, UNROLL 1 4" -> (Opt(UPCAST, 0, 8), Opt(UNROLL, 1, 4))"""
  return tuple(Opt(OptOps[op], int(axis), int(arg)) for op, axis, arg in (o.split() for o in spec.split(",") if o.strip()))

def main(name:str, specs:list[str], kernel:int=-1):
  w = WORKLOADS[name]
  xs = [Tensor(a).realize() for a in w.inputs(w.n, np.random.default_rng(0))]
  out = w.tg_vmap(vmap, w.tg)(*xs)
  si = [s for s in Tensor.schedule(*(out if isinstance(out, tuple) else (out,))) if s.ast.op.name == "SINK"][kernel]
  for b in si.bufs: b.ensure_allocated()
  def timed(opts:tuple[Opt, ...]|None) -> str:
    runner = CompiledRunner(get_program(si.ast if opts is None else si.ast.replace(arg=KernelInfo(opts_to_apply=opts)), Device["CPU"].renderer))
    ms = statistics.median(runner(si.bufs, {}, wait=True) for _ in range(15)) * 1e3
    return f"{ms:7.2f} ms  {', '.join(f'{o.op.name} {o.axis} {o.arg}' for o in runner.p.applied_opts)}"
  print(f"{name} kernel {kernel} at N={w.n}, CPU_COUNT={os.environ['CPU_COUNT']}")
  print(f"  default     {timed(None)}")
  for spec in specs: print(f"  by hand     {timed(parse(spec))}")

if __name__ == "__main__": main(sys.argv[1], sys.argv[2:])
