# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
# TinyJit's replay on the 0.14.0 line (the eager-cost topic hooks it into CapturedJit.__call__): the captured linear's kernels as a plan
# made once, so a replay launches each kernel without run_linear's per-CALL work (a PatternMatcher dispatch, resolving and unwrapping
# every buffer, the runtime cache lookup, launch dims and stats re-derived): ~35-55 us a kernel in Python, the whole cost of a small one.
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Sequence
from tinygrad.helpers import DEBUG, PROFILE, GlobalCounters, perf_counter_us
from tinygrad.device import Buffer
from tinygrad.uop.ops import UOp, Ops, sym_infer
from tinygrad.engine.realize import ExecContext, get_call_arg_uops, call_bound_vars, get_runtime, estimate_uop, track_stats, pm_exec, run_linear

@dataclass
class KernelStep:
  """one single-device PROGRAM call: its runtime, its buffers (a Buffer, or the slot of a jit input), what a launch needs"""
  prg: Any
  runtime: Any
  device: str
  bufs: list[Buffer|int]
  bound: dict[str, int]
  dims: tuple|None     # (global_size, local_size) when no Variable sets them
  vals: tuple|None     # the Variables' values when the kernel has none
  ops: Any
  mem: Any

def _kernel_step(call:UOp) -> KernelStep|None:
  """the plan's step for a call, None where run_linear's path is needed (copies, graphs, hcq, several devices, a view of an input)"""
  if (ast:=call.src[0]).op is not Ops.PROGRAM or not isinstance(call.src[1].device, str): return None
  args = get_call_arg_uops(call)
  bufs: list[Buffer|int] = []
  for i in ast.arg.globals:
    if (a:=args[i]).op is Ops.PARAM: bufs.append(a.arg.slot)
    elif a.op in (Ops.MSELECT, Ops.SHRINK, Ops.MSTACK) or not isinstance(b:=a.buffer, Buffer): return None
    else: bufs.append(b.ensure_allocated())
  est = estimate_uop(call)
  return KernelStep(ast, get_runtime(call.src[1].device, ast), call.src[1].device, bufs, call_bound_vars(call),
                    None if ast.arg.vars else ast.arg.launch_dims({}), None if ast.arg.vars else ast.arg.vals({}), est.ops, est.mem)

def make_plan(linear:UOp) -> list[KernelStep|UOp]: return [_kernel_step(c) or c for c in linear.src]

def replay(plan:list[KernelStep|UOp], linear:UOp, var_vals:dict[str, int], input_uops:Sequence[UOp]):
  # DEBUG>=2 and PROFILE print or record each kernel: run_linear does that
  if DEBUG >= 2 or PROFILE: return run_linear(linear, var_vals, input_uops=input_uops, jit=True)
  inputs = tuple(input_uops)
  in_bufs: list[Any] = [u.buffer for u in inputs]
  if not all(isinstance(b, Buffer) for b in in_bufs): return run_linear(linear, var_vals, input_uops=inputs, jit=True)  # sharded inputs
  ctx = ExecContext(var_vals, inputs, True, True, False)
  for step in plan:
    if step.__class__ is not KernelStep:
      track_stats(ctx, step, perf_counter_us(), pm_exec.rewrite(step, ctx))
      continue
    bufs = [in_bufs[b].ensure_allocated() if b.__class__ is int else b for b in step.bufs]
    vv = {**var_vals, **step.bound} if step.bound else var_vals
    gs, ls = step.dims or step.prg.arg.launch_dims(vv)
    et = step.runtime(*[b.get_buf(step.device) for b in bufs], global_size=gs, local_size=ls,
                      vals=step.vals if step.vals is not None else step.prg.arg.vals(vv), wait=False)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += sym_infer(step.ops, vv)
    GlobalCounters.global_mem += sym_infer(step.mem, vv)
    if et is not None: GlobalCounters.time_sum_s += et
