#!/usr/bin/env python3
"""Time one kernel of a vmapped workload under opt lists chosen by hand (or a grid of them), next to the default heuristics: the
measurement behind analysis.md's "what the heuristics could pick" for a workload. The kernel alone, median of 15 runs, on tinygrad's
default device (one thread on the CPU: CPU_COUNT=1).

  CPU_COUNT=1 PYTHONPATH=. python bench/kernel_opts.py W1 "UPCAST 0 8, UNROLL 1 4" "UPCAST 0 4, UNROLL 0 4, UNROLL 1 4"
  CUDA=1 PYTHONPATH=. python bench/kernel_opts.py W1 --scale 10 --grid --top 15     # the GPU table's N, a grid of launch shapes
  --kernel K picks the schedule's K-th kernel (default: the last); --grid times LOCAL x UPCAST on the first axis x GROUP x UNROLL on the
  first reduce; --beam adds BEAM=2's pick; --seconds caps the grid.
"""
import argparse, itertools, os, sys, statistics, time
from dataclasses import replace
if not any(os.environ.get(d) for d in ("CUDA", "NV", "AMD", "METAL", "CL", "PYTHON")): os.environ.setdefault("CPU_COUNT", "1")
os.environ.setdefault("IGNORE_BEAM_CACHE", "1")   # BEAM's pick searched here, not one cached under another CPU_COUNT
os.environ.setdefault("TIERED", "0")   # a runner built here is the full (-O2) build, not the quick -O1 one
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tinygrad import Tensor, Device, vmap
from tinygrad.codegen import get_program
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.helpers import Context
from tinygrad.uop.ops import KernelInfo
from tinygrad.engine.realize import CompiledRunner
from workloads import WORKLOADS

def parse(spec:str) -> tuple[Opt, ...]:
  """"UPCAST 0 8, UNROLL 1 4" -> (Opt(UPCAST, 0, 8), Opt(UNROLL, 1, 4))"""
  return tuple(Opt(OptOps[op], int(axis), int(arg)) for op, axis, arg in (o.split() for o in spec.split(",") if o.strip()))
def show(opts) -> str: return ", ".join(f"{o.op.name} {o.axis} {o.arg}" for o in opts) or "(none)"

def grid(has_local:bool) -> list[tuple[Opt, ...]]:
  """launch shapes for a kernel with a batch axis first and a reduce: threads per block on the batch, rows per thread, threads per row, unroll"""
  locs, groups = ((0, 32, 64, 128, 256), (0, 4, 8, 16)) if has_local else ((0,), (0,))
  out = []
  for l, u, g, r in itertools.product(locs, (1, 2, 4), groups, (1, 4)):
    # the unroll takes the innermost elements of a row (a vector load), then the group the next (its threads read adjacent vectors)
    out.append(tuple([Opt(OptOps.LOCAL, 0, l)] * bool(l) + [Opt(OptOps.UPCAST, 0, u)] * (u > 1) + [Opt(OptOps.UNROLL, 0, r)] * (r > 1) +
                     [Opt(OptOps.GROUP, 0, g)] * bool(g)))
  return out

def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("workload"); ap.add_argument("specs", nargs="*")
  ap.add_argument("--kernel", type=int, default=-1); ap.add_argument("--scale", type=int, default=1, help="N times the workload's n")
  ap.add_argument("--grid", action="store_true"); ap.add_argument("--beam", action="store_true"); ap.add_argument("--top", type=int, default=10)
  ap.add_argument("--seconds", type=float, default=120)
  a = ap.parse_intermixed_args()   # opt lists before or after the flags
  w, dev = WORKLOADS[a.workload], Device[Device.DEFAULT]
  n = w.n * a.scale
  xs = [Tensor(x).realize() for x in w.inputs(n, np.random.default_rng(0))]
  out = w.tg_vmap(vmap, w.tg)(*xs)
  si = [s for s in Tensor.schedule(*(out if isinstance(out, tuple) else (out,))) if s.ast.op.name == "SINK"][a.kernel]
  for b in si.bufs: b.ensure_allocated()
  def timed(opts:tuple[Opt, ...]|None, beam=False) -> tuple[float, str]:
    with Context(BEAM=2 if beam else 0):
      p = get_program(si.ast if opts is None else si.ast.replace(arg=KernelInfo(opts_to_apply=opts)), dev.renderer)
    runner = CompiledRunner(replace(p, device=Device.DEFAULT))   # the emulator renders for the device it emulates
    ms = statistics.median(runner(si.bufs, {}, wait=True) for _ in range(15)) * 1e3
    return ms, f"{ms:8.4f} ms  {show(runner.p.applied_opts)}  global {runner.p.global_size} local {runner.p.local_size}"
  extra = f", CPU_COUNT={os.environ['CPU_COUNT']}" if "CPU_COUNT" in os.environ else ""
  print(f"{a.workload} kernel {a.kernel} ({si.ast.arg.name if si.ast.arg else ''}) at N={n} on {Device.DEFAULT}{extra}", flush=True)
  print(f"  default     {timed(None)[1]}", flush=True)
  for spec in a.specs: print(f"  by hand     {timed(parse(spec))[1]}", flush=True)
  if a.beam:
    try: print(f"  BEAM=2      {timed(None, beam=True)[1]}", flush=True)
    except Exception as e: print(f"  BEAM=2      fails: {type(e).__name__}: {e}", flush=True)
  if a.grid:
    res, st, tried = [], time.perf_counter(), 0
    for opts in grid(dev.renderer.has_local):
      if time.perf_counter() - st > a.seconds: break
      tried += 1
      try: res.append(timed(opts))
      except Exception: pass   # an opt that does not apply (KernelOptError), or a block over the device's threads (a launch error)
    print(f"  grid: {len(res)} of {tried} opt lists apply ({time.perf_counter() - st:.0f} s); the fastest {a.top}:")
    for _, line in sorted(res)[:a.top]: print(f"  grid        {line}")

if __name__ == "__main__": main()
