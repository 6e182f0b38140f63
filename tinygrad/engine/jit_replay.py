# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
# TinyJit's replay on the 0.14.0 line (the jit-replay topic hooks it into CapturedJit.__call__): the captured linear's kernels as a plan
# made once, so a replay launches each kernel without run_linear's per-CALL work (a PatternMatcher dispatch, resolving and unwrapping
# every buffer, the runtime cache lookup, launch dims and stats re-derived): ~35-55 us a kernel in Python, the whole cost of a small one.
# A call's own cost is cut too (the jit-call-cost topic): the inputs' preparation is kept per input UOps (InputCache) and a CPU kernel is
# launched with its ctypes arguments made once (CPULaunch).
from __future__ import annotations
import ctypes, weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
from tinygrad.helpers import DEBUG, PROFILE, GlobalCounters, perf_counter_us
from tinygrad.device import Buffer
from tinygrad.tensor import Tensor
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
  fast: CPULaunch|None = field(default=None)

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
  step = KernelStep(ast, get_runtime(call.src[1].device, ast), call.src[1].device, bufs, call_bound_vars(call),
                    None if ast.arg.vars else ast.arg.launch_dims({}), None if ast.arg.vars else ast.arg.vals({}), est.ops, est.mem)
  step.fast = CPULaunch.make(step)
  return step

def make_plan(linear:UOp) -> list[KernelStep|UOp]: return [_kernel_step(c) or c for c in linear.src]

def replay(plan:list[KernelStep|UOp], linear:UOp, var_vals:dict[str, int], input_uops:Sequence[UOp]):
  # DEBUG>=2 and PROFILE print or record each kernel: run_linear does that
  if DEBUG >= 2 or PROFILE: return run_linear(linear, var_vals, input_uops=input_uops, jit=True)
  inputs = tuple(input_uops)
  in_bufs: list[Any] = [u.buffer for u in inputs]
  if not all(isinstance(b, Buffer) for b in in_bufs): return run_linear(linear, var_vals, input_uops=inputs, jit=True)  # sharded inputs
  ctx: ExecContext|None = None
  in_addrs: dict[str, list[Any]] = {}   # per device, each input's address: a CPU kernel's launch needs those alone
  for step in plan:
    if step.__class__ is not KernelStep:
      if ctx is None: ctx = ExecContext(var_vals, inputs, True, True, False)
      track_stats(ctx, step, perf_counter_us(), pm_exec.rewrite(step, ctx))
      continue
    if (fast:=step.fast) is not None and fast.valid():
      if (addrs:=in_addrs.get(step.device)) is None: addrs = in_addrs[step.device] = [None]*len(in_bufs)
      # only the inputs this kernel reads: another input may be on a device this one can't map (a PYTHON buffer a copy reads)
      for _,s in fast.slots:
        if addrs[s] is None: addrs[s] = in_bufs[s].ensure_allocated().get_buf(step.device).va_addr
      fast(addrs)
      GlobalCounters.kernel_count += 1
      GlobalCounters.global_ops += fast.ops
      GlobalCounters.global_mem += fast.mem
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

class CPULaunch:
  """a CPU kernel's launch with its ctypes arguments made once: a replay sets its inputs' addresses and calls the function, where
  CPUProgram.__call__ packs every argument again (~3 us a kernel). Only for a kernel with no Variables, launched from Python (not LVP)."""
  def __init__(self, step:KernelStep, fxn, fixed:list[tuple[Buffer, Any]], slots:list[tuple[int, int]], nargs:list, core:int|None, n:int,
               ops:int, mem:int):
    self.fxn, self.fixed, self.slots, self.args, self.core, self.n = fxn, fixed, slots, nargs, core, n
    self.device, self.ops, self.mem = step.device, ops, mem

  @staticmethod
  def make(step:KernelStep) -> CPULaunch|None:
    if not step.device.startswith("CPU") or step.dims is None or step.vals is None: return None
    # a kernel with no Variables: its estimates are numbers (a UOp only where the PROGRAM's estimates weren't folded)
    try: ops, mem = int(sym_infer(step.ops, {})), int(sym_infer(step.mem, {}))
    except Exception: return None
    from tinygrad.runtime.ops_cpu import CPUProgram, MAX_ARGS
    if (rt:=step.runtime).__class__ is not CPUProgram or rt.lvp or len(step.bufs) + len(step.vals) > MAX_ARGS: return None
    if not all(isinstance(v, int) for v in step.vals) or not all(isinstance(d, int) for d in step.dims[0]): return None
    args, fixed, slots = [], [], []
    for i,b in enumerate(step.bufs):
      if b.__class__ is int: slots.append((i, b)); args.append(ctypes.c_uint64(0))
      else:
        if step.device not in b._bufs: return None
        fixed.append((b, hb:=b._bufs[step.device]))
        args.append(ctypes.c_uint64(hb.va_addr))
    args += [ctypes.c_uint64(v) for v in step.vals]
    return CPULaunch(step, rt.fxn, fixed, slots, args, rt.runtimevars.get('core_id'), step.dims[0][0], ops, mem)

  # a kept Buffer freed (and allocated again) since the plan was made: run_linear's path for this launch
  def valid(self) -> bool:
    for b,hb in self.fixed:
      if b._bufs.get(self.device) is not hb: return False
    return True

  def __call__(self, addrs:list[int]):
    args = self.args
    for i,slot in self.slots: args[i] = ctypes.c_uint64(addrs[slot])
    if self.core is None:
      for _ in range(self.n): self.fxn(*args)
    else:
      for tid in range(self.n):
        args[self.core] = ctypes.c_uint64(tid)
        self.fxn(*args)

class InputCache:
  """TinyJit's input preparation (_prepare_jit_inputs) is a function of its input UOps: a call with the same UOps as the one before (the
  same Tensors, no realize to do) takes its result again. Containers in the arguments, and inputs no longer allocated, go the long way."""
  def __init__(self): self.refs, self.kw, self.bufs, self.ret, self.hits = (), (), (), None, 0

  def __call__(self, args:tuple, kwargs:dict, prepare:Callable):
    key: list = []
    for a in (args if not kwargs else args + tuple(kwargs[k] for k in sorted(kwargs))):
      if a.__class__ is Tensor: key.append(a.uop)
      elif isinstance(a, (tuple, list, dict)): return prepare(args, kwargs)  # prepare looks inside these
      else: key.append(a if isinstance(a, UOp) else None)
    if self.ret is not None and len(key) == len(self.refs) and tuple(sorted(kwargs)) == self.kw and self._same(key):
      self.hits += 1
      return self.ret
    ret = prepare(args, kwargs)
    # the UOps after prepare's realize: those are what the next call's Tensors hold
    key = [a.uop if a.__class__ is Tensor else k for a,k in zip(args + tuple(kwargs[k] for k in sorted(kwargs)), key)]
    self.refs, self.kw = tuple(None if k is None else weakref.ref(k) for k in key), tuple(sorted(kwargs))
    self.bufs = tuple(weakref.ref(b) for u in ret[0] if isinstance(b:=u.buffer, Buffer))
    self.ret = ret if len(self.bufs) == len(ret[0]) else None   # sharded inputs: the long way
    return ret

  def _same(self, key:list) -> bool:
    for r,k in zip(self.refs, key):
      if (k is not None if r is None else (k is None or r() is not k)): return False
    for r in self.bufs:
      if (b:=r()) is None or not b.is_allocated(): return False
    return True
