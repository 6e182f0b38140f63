#!/usr/bin/env python3
"""The vmap benchmark: every workload of bench/workloads.py through our vmap (eager, TinyJit), hand-batched tinygrad (eager, TinyJit),
a tinygrad Python loop over examples (extrapolated), upstream 0.12's pad+reduce idiom with an OUTER range, numpy, jax.jit(jax.vmap) and
torch.func.vmap, every output checked against the numpy oracle (float64).

  python bench/run.py              # the full run: bench/RESULTS.md, bench/results.json, docs/bench.png (make bench)
  python bench/run.py --quick      # smoke run for CI: small N, 2 repeats, every row runs and matches numpy (make bench QUICK=1)
  python bench/run.py --source W1  # the kernel source (what DEBUG=4 prints) of vmap and hand-batched tinygrad for W1, side by side
  python bench/run.py --source W1 --xla   # the HLO XLA runs for the JAX row, after fusion
  python bench/run.py --only W1,W3 --impls vmap_jit,hand_jit,jax --no-scaling   # a subset, printed, no files written
  python bench/run.py --render     # RESULTS.md and the plot again from results.json (after editing bench/analysis.md); with
                                   # UPSTREAM=0.12.0, RESULTS-0.12.0.md from results-0.12.0.json and analysis-0.12.0.md

Every (workload, implementation) row runs in a worker subprocess whose environment pins every framework to one thread before anything
is imported (THREAD_ENV). In the full run each row has a fresh process, so its first call is a cold first call: graph building,
scheduling, codegen and the clang compile (the compile cache is off, CCACHE=0), and the run. `--quick` runs one process per framework
for speed and keeps tinygrad's caches across rows, so its first calls aren't cold. The exit status is nonzero when any output is wrong or a
row that must run crashes; rows of frameworks that aren't installed are skipped with the reason.
"""
from __future__ import annotations
import argparse, datetime, gc, importlib.util, json, math, os, platform, shutil, statistics, subprocess, sys, tempfile, threading, time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT/"tools"))
import fork  # noqa: E402  (the upstream line: UPSTREAM=0.12.0 benches the frozen line)
LINE, DEFAULT_LINE = fork.upstream_line(ROOT), fork.is_default_line(ROOT)   # the default line writes RESULTS.md, another RESULTS-LINE.md
LINE_012 = LINE == "0.12.0"   # the frozen line: its scheduler's entry points are what TinygradHooks wraps (0.14's are others: totals only)

THREAD_ENV = {
  **fork.pin(ROOT)["cpu_env"],                 # tinygrad: the CPU device (CPU=1 on 0.12, DEV=CPU on 0.14)
  "CPU_COUNT": "1", "NUM_CPU_THREADS": "1",    # caps the THREAD opt (renderer global_max) at 1 thread (0.12's name; 0.14's)
  "CCACHE": "0",                               # tinygrad: no disk cache of compiled kernels, so a first call pays its clang compile
  "PROGRAM_CACHE": "0",                        # ... nor of their codegen (off with CCACHE=0 too; the warm rows turn both on: WARM_RUNS)
                                               # (0.14's pattern cache, uop/upat_cache.py, stays on: tinygrad's own compiled patterns,
                                               # as Python's bytecode cache; UPAT_CACHE=0 in the environment measures without it)
  "IGNORE_BEAM_CACHE": "1",                    # ... nor of BEAM search results, so the BEAM row's first call pays its search
  "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
  "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
  "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "0",
}

# implementation key -> (label, framework)
IMPLS = {
  "vmap":      ("tinygrad vmap (eager)", "tinygrad"),
  "vmap_jit":  ("tinygrad vmap (TinyJit)", "tinygrad"),
  "hand":      ("tinygrad hand-batched (eager)", "tinygrad"),
  "hand_jit":  ("tinygrad hand-batched (TinyJit)", "tinygrad"),
  "loop":      ("tinygrad Python loop (extrapolated)", "tinygrad"),
  "pad_outer": ("pad+reduce, OUTER range (fork)", "tinygrad"),
  "pad_loop":  ("pad+reduce, LOOP range (fork)", "tinygrad"),
  "pad_outer_vanilla": ("pad+reduce, OUTER range (vanilla 0.12.0)", "vanilla"),
  "numpy":     ("numpy hand-batched", "numpy"),
  "jax":       ("jax.jit(jax.vmap(f))", "jax"),
  "torch":     ("torch.func.vmap(f)", "torch"),
}
# W4 only: the Jacobian from the step function itself, by forward mode
# W1, W2: the batch sharded over two CPU devices (each one thread), the scale-out path of docs/vmap.md "More than one device"; and
# tinygrad's kernel search (BEAM=2, searched in the first call, never read from the disk cache) on the same vmapped function
SHARDED_BEAM = {"vmap_jit_2dev": ("tinygrad vmap, batch sharded on CPU:0+CPU:1 (TinyJit)", "tinygrad"),
                "vmap_jit_beam": ("tinygrad vmap (TinyJit, BEAM=2)", "tinygrad")}
EXTRA_IMPLS = {
  "W1": SHARDED_BEAM, "W2": SHARDED_BEAM,
  "W4": {"vmap_jacfwd_jit": ("tinygrad vmap(jacfwd(step)) (TinyJit)", "tinygrad"),
         "jax_jacfwd": ("jax.jit(jax.vmap(jax.jacfwd(step)))", "jax")},
}
# first call: the median of FIRST_RUNS fresh processes for the rows the first-call target compares (tinygrad's vmap against JAX), one
# process for the rest. The extra processes run after all rows, a round of every such row at a time, so each row's samples spread over
# the run and sit beside JAX's: this machine's speed drifts over minutes (JAX's own W5 first call measured 61, 62, 87 and 93 ms)
FIRST_REPEATED, FIRST_RUNS = ("vmap", "vmap_jit", "jax", "vmap_jacfwd_jit", "jax_jacfwd"), 5
# the same rows' first calls with warm caches across processes (0.14's program cache, tinygrad/codegen/program_cache.py, and the compile
# cache; JAX's persistent compilation cache): a process that fills a cache of this run's own, then WARM_RUNS fresh processes that read it
WARM_RUNS = 3
def warm_env(d:str) -> dict[str, str]:
  return {"CCACHE": "1", "PROGRAM_CACHE": "1", "CACHEDB": os.path.join(d, "cache.db"), "JAX_COMPILATION_CACHE_DIR": os.path.join(d, "jax"),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
SCALING = {"W1": ["vmap", "vmap_jit", "hand", "jax"], "W2": ["vmap", "vmap_jit", "hand", "jax"]}
SCALING_N = [10**2, 10**3, 10**4, 10**5, 10**6]
SCALING_N_QUICK = [10**2, 10**3]

# --device (bench/RESULTS-gpu.md): every row on one accelerator (tinygrad's backend of that name, JAX's and torch's GPU), batches GPU_SCALE
# times the CPU table's, BEAM=2 on every workload; JAX at full fp32 (its GPU default for matmuls is TF32, which fails float32 tolerances)
GPU_SCALE = 10
GPU_IMPLS = ("vmap", "vmap_jit", "vmap_jit_beam", "hand", "hand_jit", "jax", "torch")
def bench_device() -> str|None: return os.environ.get("BENCH_DEVICE") or None
def device_select(device:str) -> dict[str, str]:
  """how this line's tinygrad picks a device: CUDA=1 on 0.12, DEV=CUDA on 0.14 (whose CUDA=1 is an error), as its cpu_env picks the CPU"""
  return {"DEV": device} if "DEV" in fork.pin(ROOT)["cpu_env"] else {device: "1"}
def device_env(device:str) -> dict[str, str]:
  gpu = device in ("CUDA", "NV")
  return {**device_select(device), "CCACHE": "0", "IGNORE_BEAM_CACHE": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_ENABLE_X64": "0", "BENCH_DEVICE": device,
          "JAX_PLATFORMS": "cuda" if gpu else "cpu", "JAX_DEFAULT_MATMUL_PRECISION": "highest"}

# the rows that need what a line doesn't have: on 0.14 the pad+reduce idiom's OUTER ranges (upstream removed OUTER), skipped saying so
NOT_PORTED = {"0.14.0": {"pad_outer", "pad_loop", "pad_outer_vanilla"}}
def not_ported(impl:str) -> str|None:
  return None if impl not in NOT_PORTED.get(LINE, set()) else f"skipped: tinygrad {LINE} has no OUTER range (docs/internals.md, 'The {LINE} line')"

def impls_of(w:str) -> dict[str, tuple[str, str]]:
  return {**IMPLS, **EXTRA_IMPLS.get(w, {}), **({"vmap_jit_beam": SHARDED_BEAM["vmap_jit_beam"]} if bench_device() else {})}
def status_row(task:dict, status:str) -> dict:
  """the table row of a task that produced no timings (skipped, or not reached in time): what it is and why"""
  label, fw = impls_of(task["workload"])[task["impl"]]
  return {"workload": task["workload"], "impl": task["impl"], "label": label, "framework": fw, "n": task["n"], "status": status}

# ================================================================ worker: runs in a subprocess with THREAD_ENV

class Mismatch(Exception): """an output differs from the numpy oracle: the run fails"""

def median(xs): return statistics.median(xs) if xs else None

def check(got, want, what:str):
  """got (one array or a tuple) against the float64 oracle, float32 tolerances; raises AssertionError naming the worst element"""
  import numpy as np
  gots, wants = (got, want) if isinstance(want, tuple) else ((got,), (want,))
  if len(gots) != len(wants): raise Mismatch(f"{what}: {len(gots)} outputs, the oracle has {len(wants)}")
  for i, (g, w) in enumerate(zip(gots, wants)):
    g = np.asarray(g)
    if g.shape != w.shape: raise Mismatch(f"{what}: output {i} has shape {g.shape}, the oracle {w.shape}")
    err = np.abs(g.astype(np.float64) - w)
    tol = 1e-4 + 1e-4 * np.abs(w)
    if not (err <= tol).all():
      j = np.unravel_index(np.argmax(err - tol), err.shape)
      raise Mismatch(f"{what}: output {i} differs from numpy at {tuple(int(x) for x in j)}: got {g[j]}, want {w[j]}")

class TinygradHooks:
  """time spent scheduling (and schedule-cache hits/misses), in codegen (get_program) + clang (Compiler.compile_cached), and in clang
  alone, counted by wrapping tinygrad's functions from the outside (tinygrad itself is not edited)"""
  def __init__(self):
    import tinygrad.tensor, tinygrad.engine.realize
    from tinygrad.device import Compiler
    self.reset()
    if not LINE_012: return self.hook_014()
    import tinygrad.engine.schedule as sched
    orig_sched, orig_program, orig_compile = tinygrad.tensor.complete_create_schedule_with_vars, tinygrad.engine.realize.get_program, \
      Compiler.compile_cached
    hooks = self
    def schedule(big_sink):
      n, st = len(sched.schedule_cache), time.perf_counter()
      try: return orig_sched(big_sink)
      finally:
        hooks.schedule_s += time.perf_counter() - st
        if len(sched.schedule_cache) > n: hooks.misses += 1
        else: hooks.hits += 1
    def get_program(*args, **kwargs):   # codegen (and, on vanilla, the compile): the kernel AST to C source (get_runner calls it on a miss)
      st, hooks.in_program = time.perf_counter(), True
      try: return orig_program(*args, **kwargs)
      finally: hooks.lower_s, hooks.in_program = hooks.lower_s + time.perf_counter() - st, False
    tinygrad.tensor.complete_create_schedule_with_vars = schedule
    tinygrad.engine.realize.get_program = get_program
    from tinygrad.runtime.support.compiler_cpu import ClangJITCompiler
    if (orig_clang:=getattr(ClangJITCompiler, "_clang", None)) is not None:
      # the fork: every clang run goes through _clang, also the kernels compiled after their codegen (compile_together, a first build
      # in the quick tier): the clang column counts it, and so does the codegen+compile column. Not the background -O2 rebuilds.
      def _clang(self_, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread(): return orig_clang(self_, *args, **kwargs)
        st = time.perf_counter()
        try: return orig_clang(self_, *args, **kwargs)
        finally:
          hooks.compile_s += (dt:=time.perf_counter() - st)
          if not hooks.in_program: hooks.lower_s += dt
      ClangJITCompiler._clang = _clang
    else:
      def compile_cached(self_, src):
        st = time.perf_counter()
        try: return orig_compile(self_, src)
        finally: hooks.compile_s += time.perf_counter() - st
      Compiler.compile_cached = compile_cached

  def hook_014(self):
    """the 0.14 line's entry points: the schedule is create_linear_with_vars (tensor.py's realize and callify_cache.py's import it),
    codegen and compile lower_and_compile (compile_linear's), clang ClangCompiler.compile (a kernel alone) and compile_together's
    compile_many (a schedule's kernels in one clang). Schedule-cache hits and misses are the 0.12 line's only"""
    import tinygrad.tensor as tensor_mod, tinygrad.engine.callify_cache as callify_cache, tinygrad.engine.realize as realize
    import tinygrad.codegen.compile_together as compile_together
    from tinygrad.runtime.support.compiler_cpu import ClangCompiler
    def timed(fn, attr:str):
      def wrapped(*args, **kwargs):
        st = time.perf_counter()
        try: return fn(*args, **kwargs)
        finally: setattr(self, attr, getattr(self, attr) + time.perf_counter() - st)
      return wrapped
    for mod in (tensor_mod, callify_cache): mod.create_linear_with_vars = timed(mod.create_linear_with_vars, "schedule_s")
    realize.lower_and_compile = timed(realize.lower_and_compile, "lower_s")
    compile_together.compile_many = timed(compile_together.compile_many, "compile_s")
    ClangCompiler.compile = timed(ClangCompiler.compile, "compile_s")

  def reset(self):
    self.schedule_s, self.lower_s, self.compile_s, self.build_s, self.hits, self.misses, self.in_program = 0.0, 0.0, 0.0, 0.0, 0, 0, False
  def snapshot(self) -> dict: return {"schedule_ms": self.schedule_s*1e3, "codegen_compile_ms": self.lower_s*1e3,
                                      "clang_ms": self.compile_s*1e3, "build_ms": self.build_s*1e3,
                                      "sched_hits": self.hits, "sched_misses": self.misses}

_HOOKS: TinygradHooks|None = None
def hooks() -> TinygradHooks:
  global _HOOKS
  if _HOOKS is None: _HOOKS = TinygradHooks()
  return _HOOKS

def clear_tinygrad_caches():
  """the schedule cache and the method cache (compiled kernels) of this process: the next call schedules and compiles again"""
  import importlib
  # where each line keeps them (0.14: no method cache of this name)
  caches = (("tinygrad.engine.schedule", "schedule_cache"), ("tinygrad.engine.realize", "method_cache")) if LINE_012 else \
    (("tinygrad.schedule", "schedule_cache"),)
  for mod, cache in caches: getattr(importlib.import_module(mod), cache).clear()

def pad_vmap(fn, in_axes, axis_type, n:int):
  """upstream 0.12's own vmap idiom, written with upstream ops only (as test/test_native_vmap_pad.py does): fn on the slice (r, r+1) of
  the batch axis for a RANGE r, its result padded back to n slots at offset r and summed over r: only example r's own slot is nonzero.
  With AxisType.OUTER the schedule runs the kernels once per example."""
  from tinygrad import Tensor
  from tinygrad.uop.ops import UOp, Ops
  def run(*xs):
    r = UOp.range(n, next(_pad_ids), axis_type)
    def one(x, a):
      return x.shrink(tuple((r, r+1) if i == a else None for i in range(x.ndim))).reshape(x.shape[:a] + x.shape[a+1:])
    ys = fn(*[x if a is None else one(x, a) for x, a in zip(xs, in_axes)])
    def back(y):
      y = y.reshape((1,) + y.shape).pad(((r, n-1-r),) + (None,)*y.ndim)
      return Tensor(y.uop.reduce(r, arg=Ops.ADD))
    return tuple(back(y) for y in ys) if isinstance(ys, tuple) else back(ys)
  return run
def _pad_id_gen():
  i = -(1 << 24)
  while True: yield i; i -= 1
_pad_ids = _pad_id_gen()

def warm_up(calls:list, n:int):
  """n calls of each; then, on the fork, the background full builds these calls started are waited for and one more call swaps them in:
  a kernel's first build is quick (-O1) and its -O2 build starts at its second run (engine/realize.py). The steady state is after that."""
  for _ in range(n):
    for c in calls: c()
  if not LINE_012: return   # 0.14 builds nothing in the background: a quick first build is rebuilt in full at its next lowering
  from tinygrad.engine.realize import method_cache
  if not (building:=[r.rebuild for r in set(method_cache.values()) if getattr(r, "quick", False) and r.rebuild is not None and r.rebuild.is_alive()]):
    return
  for t in building: t.join()
  for c in calls: c()

def leaf(a, grad:bool):
  """a realized input Tensor; requires_grad where it is asked for and Tensor takes it (0.14's Tensor has no requires_grad: its gradient
  needs none)"""
  from tinygrad import Tensor
  return (Tensor(a, requires_grad=True) if grad and LINE_012 else Tensor(a)).realize()

def tinygrad_impl(w, impl:str, args_np, n:int):
  """call() runs one call of the implementation to completion and returns its outputs (Tensors)"""
  import numpy as np
  from tinygrad import Tensor, TinyJit, Device
  from tinygrad.uop.ops import AxisType
  from tinygrad.helpers import dedup
  if impl.startswith("vmap"): from tinygrad import vmap, jacfwd   # the other rows also run on vanilla upstream
  dev = Device[Device.DEFAULT]
  grad_args = w.extra.get("requires_grad", ())
  def tensor(a, i): return leaf(a, i in grad_args)
  ts = [tensor(a, i) for i, a in enumerate(args_np)]
  def finish(out):
    outs = out if isinstance(out, tuple) else (out,)
    Tensor.realize(*outs)
    for d in dedup(d for o in outs for d in (o.device if isinstance(o.device, tuple) else (o.device,))): Device[d].synchronize()
    return out
  def jitted(f):
    j = TinyJit(lambda *a: (lambda o: (Tensor.realize(*o) if isinstance(o, tuple) else o.realize(), o)[1])(f(*a)))
    return lambda *a: j(*a)
  if impl == "vmap": f = w.tg_vmap(vmap, w.tg)
  elif impl == "vmap_jit": f = jitted(w.tg_vmap(vmap, w.tg))
  elif impl == "vmap_jit_2dev":
    devs = ("CPU:0", "CPU:1")
    ts = [t.shard(devs, axis=0).realize() if ax == 0 else t.to(devs).realize() for t, ax in zip(ts, w.in_axes)]
    f = jitted(w.tg_vmap(vmap, w.tg))
  elif impl == "vmap_jit_beam":
    from tinygrad.helpers import Context
    vj = jitted(w.tg_vmap(vmap, w.tg))
    def f(*a):
      with Context(BEAM=2): return vj(*a)
  elif impl == "hand": f = w.tg_hand
  elif impl == "hand_jit": f = jitted(w.tg_hand)
  elif impl == "vmap_jacfwd_jit":
    from workloads import bicycle_step
    jac = vmap(jacfwd(bicycle_step, argnums=(0, 1)))
    f = jitted(lambda S, U: (lambda A, B: A.cat(B, dim=2))(*jac(S, U)))
  elif impl in ("pad_outer", "pad_loop"):
    outer = AxisType.OUTER if impl == "pad_outer" else AxisType.LOOP
    if w.extra.get("pad_inner"):   # nested: the outer scope OUTER (or LOOP), the inner one a LOOP (test_native_vmap_pad.py's TestPadOuter)
      n2 = args_np[1].shape[0]
      inner = lambda p, B: pad_vmap(lambda q: w.tg(p, q), (0,), AxisType.LOOP, n2)(B)
      f = pad_vmap(inner, w.in_axes, outer, n)
    else: f = pad_vmap(w.tg, w.in_axes, outer, n)
  elif impl == "loop":
    # the examples as separate realized Tensors (as if they came from a list), so every iteration is the same graph: a schedule-cache hit
    exs = [[tensor(a, j) for j, a in enumerate(ex)] for ex in
           [(w.loop_examples or (lambda a, i: [x if ax is None else np.array(x[i]) for x, ax in zip(a, w.in_axes)]))(args_np, i) for i in range(n)]]
    def call_loop():
      outs = []
      for ex in exs:
        o = w.tg(*ex)
        Tensor.realize(*(o if isinstance(o, tuple) else (o,)))
        outs.append(o)
      dev.synchronize()
      return outs
    return call_loop
  else: raise ValueError(impl)
  def call():
    st = time.perf_counter()
    out = f(*ts)   # eager: builds the graph (for vmap: traces fn); TinyJit: the whole replay
    hooks().build_s += time.perf_counter() - st
    return finish(out)
  # the kernel detail of the GPU table (kernel_detail) lowers one eager call of the jitted function the way the jit captured it
  call.eager = {"vmap_jit": lambda: w.tg_vmap(vmap, w.tg), "vmap_jit_beam": lambda: w.tg_vmap(vmap, w.tg), "hand_jit": lambda: w.tg_hand}.get(impl)
  call.inputs, call.beam = ts, impl == "vmap_jit_beam"
  return call

def kernel_detail(call, cnt:int=15) -> list[dict]:
  """each kernel of one call, lowered as TinyJit captured it: name, launch dims, opts, median device time (µs) of cnt runs with wait"""
  from tinygrad import Tensor
  from tinygrad.helpers import Context
  if not LINE_012: return kernel_detail_linear(call, cnt)
  from tinygrad.engine.realize import CompiledRunner
  with Context(BEAM=2 if call.beam else 0):   # a hit in the method cache: the jit's capture compiled these
    out = call.eager()(*call.inputs)
    sched, var_vals = Tensor.schedule_with_vars(*(out if isinstance(out, tuple) else (out,)))
    for ei in sched: ei.lower()
  for ei in sched: ei.run(var_vals)
  ret = []
  for ei in sched:
    tms = [ei.run(var_vals, wait=True, do_update_stats=False) for _ in range(cnt)]
    d = {"runner": type(ei.prg).__name__, "name": ei.prg.display_name if not isinstance(ei.prg, CompiledRunner) else ei.prg.p.function_name,
         "us": median(tms) * 1e6 if all(t is not None for t in tms) else None}
    if isinstance(ei.prg, CompiledRunner):
      d.update(global_size=list(ei.prg.p.global_size or []), local_size=list(ei.prg.p.local_size or []),
               opts=[f"{o.op.name} {o.axis} {o.arg}" for o in ei.prg.p.applied_opts])
    ret.append(d)
  return ret

def kernel_detail_linear(call, cnt:int) -> list[dict]:
  """kernel_detail on the 0.14 line, whose schedule is a LINEAR of CALLs: each CALL compiled and timed on the device (time_call waits)"""
  from tinygrad import Tensor
  from tinygrad.helpers import Context
  from tinygrad.uop.ops import UOp, Ops
  from tinygrad.engine.realize import time_call, compile_linear
  with Context(BEAM=2 if call.beam else 0):
    out = call.eager()(*call.inputs)
    linear, var_vals = Tensor.linear_with_vars(*(out if isinstance(out, tuple) else (out,)))
    programs = [compile_linear(UOp(Ops.LINEAR, src=(c,))).src[0].src[0] for c in linear.src]
  ret = []
  for c, prg in zip(linear.src, programs):
    timer = time_call(c, var_vals)
    tms = [next(timer) for _ in range(cnt)]
    d = {"runner": "CompiledRunner" if prg.op is Ops.PROGRAM else str(prg.op), "us": median(tms) * 1e6}
    if prg.op is Ops.PROGRAM:
      info = next(u.arg for u in prg.src if u.op is Ops.SINK)
      d.update(name=prg.arg.function_name, global_size=list(prg.arg.global_size or []), local_size=list(prg.arg.local_size or []),
               opts=[f"{o.op.name} {o.axis} {o.arg}" for o in info.applied_opts])
    else: d["name"] = str(c.src[0].arg)
    ret.append(d)
  return ret

def to_numpy(out):
  import numpy as np
  return tuple(o.numpy() for o in out) if isinstance(out, tuple) else np.asarray(out.numpy())

def stack_loop(outs):
  import numpy as np
  if isinstance(outs[0], tuple): return tuple(np.stack([o[k].numpy() for o in outs]) for k in range(len(outs[0])))
  return np.stack([o.numpy() for o in outs])

def loop_oracle(w, args_np, n):
  """the oracle of the first n examples of the loop (for the nested W5, the first n pairs in row-major order)"""
  import numpy as np
  want = w.oracle(args_np)
  if w.extra.get("pad_inner"): return want.reshape(-1)[:n]
  return tuple(x[:n] for x in want) if isinstance(want, tuple) else want[:n]

def other_impl(w, impl:str, args_np):
  """call() for numpy, jax and torch rows"""
  if impl == "numpy":
    return lambda: w.np_hand(*args_np)
  if impl in ("jax", "jax_jacfwd"):
    import jax, jax.numpy as jnp
    xs = [jax.device_put(a) for a in args_np]
    if impl == "jax_jacfwd":
      from workloads import bicycle_step_jax
      jac = jax.vmap(jax.jacfwd(bicycle_step_jax(jax, jnp), argnums=(0, 1)))
      f = jax.jit(lambda S, U: jnp.concatenate(jac(S, U), axis=2))
    else:
      f1 = w.jax_fn(jax, jnp)
      f = jax.jit(w.jax_vmap(jax, f1) if w.jax_vmap else jax.vmap(f1, in_axes=w.in_axes))
    return lambda: jax.block_until_ready(f(*xs))
  if impl == "torch":
    import torch
    torch.set_num_threads(1)
    dev = "cuda" if bench_device() in ("CUDA", "NV") else "cpu"
    xs = [torch.from_numpy(a).to(dev) for a in args_np]
    f1 = w.torch_fn(torch)
    f = w.torch_vmap(torch, f1) if w.torch_vmap else torch.func.vmap(f1, in_dims=w.in_axes)
    def call():
      with torch.no_grad() if "requires_grad" not in w.extra else torch.enable_grad(): out = f(*xs)
      if dev == "cuda": torch.cuda.synchronize()
      return out
    return call
  raise ValueError(impl)

def out_numpy(impl, out):
  import numpy as np
  if isinstance(out, tuple): return tuple(out_numpy(impl, o) for o in out)
  if hasattr(out, "numpy") and not isinstance(out, np.ndarray):
    return out.detach().cpu().numpy() if hasattr(out, "detach") else out.numpy()
  return np.asarray(out)

def nbytes(x) -> int:
  if isinstance(x, tuple): return sum(nbytes(o) for o in x)
  return int(x.nbytes)

def run_row(task:dict) -> dict:
  import numpy as np
  from workloads import WORKLOADS
  w, impl, quick = WORKLOADS[task["workload"]], task["impl"], task["quick"]
  label, fw = impls_of(w.name)[impl]
  n = task["n"]
  row = {"workload": w.name, "impl": impl, "label": label, "framework": fw, "n": n, "quick": quick, "status": "ok"}
  if fw == "vanilla":   # upstream 0.12.0 without the fork's patches (the worker's PYTHONPATH points at the pristine tree)
    import tinygrad
    row["tinygrad_path"], fw, impl = str(Path(tinygrad.__file__).parent), "tinygrad", "pad_outer"
    row["framework"] = "tinygrad"
  if impl == "loop": n_run = w.n_loop if not quick else min(w.n_loop, 5)
  elif impl in ("pad_outer", "pad_loop", "pad_outer_vanilla"): n_run = w.n_pad if not quick else 16
  else: n_run = n
  # the loop runs its examples out of the full batch; pad+reduce runs on a batch of its own size
  rng = np.random.default_rng(task.get("seed", 0))
  args_np = w.inputs(n if impl == "loop" else n_run, rng)
  row["n_run"] = n_run
  if fw == "tinygrad":
    from tinygrad import GlobalCounters, Tensor
    row["threads"] = ", ".join(f"{k}={os.environ.get(k)}" for k in ("CPU_COUNT", "NUM_CPU_THREADS") if os.environ.get(k))
    h = hooks()
    if not quick: clear_tinygrad_caches()   # quick shares a process and its compiled kernels across rows: speed over cold first calls
    if impl == "loop":
      call = tinygrad_impl(w, impl, args_np, n_run)
      want, getout = loop_oracle(w, args_np, n_run), stack_loop
    else:
      call = tinygrad_impl(w, impl, args_np, n_run)
      want, getout = w.oracle(args_np), to_numpy
  else:
    if fw == "jax":
      import jax
      row["threads"] = os.environ.get("XLA_FLAGS", "")
      row["version"] = jax.__version__
    elif fw == "torch":
      import torch
      torch.set_num_threads(1)
      row["threads"], row["version"] = f"torch.get_num_threads()={torch.get_num_threads()}", torch.__version__
    else: row["threads"], row["version"] = "single-threaded", np.__version__
    call = other_impl(w, impl, args_np)
    want, getout = w.oracle(args_np), (lambda o: out_numpy(impl, o))
  if impl == "jax_jacfwd" or impl == "vmap_jacfwd_jit": want = w.oracle(args_np)

  # first call: cold (a fresh process in the full run), with its parts for tinygrad rows. The garbage left by imports and input setup is
  # collected first (a collection of it measured 35-48 ms, landing in whichever call triggers it), as timeit keeps GC out of its timings
  gc.collect()
  if fw == "tinygrad": h.reset(); k0 = GlobalCounters.kernel_count
  st = time.perf_counter()
  try: out = call()
  except Exception as e:
    if impl in ("pad_outer", "pad_loop"):
      row["status"] = f"fails: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
      return row
    raise
  row["first_ms"] = (time.perf_counter() - st) * 1e3
  if fw == "tinygrad":
    row["first"] = h.snapshot()
    row["first"]["kernels"] = GlobalCounters.kernel_count - k0
  try: check(getout(out), want, f"{w.name} {label}")
  except Mismatch as e:
    if "tinygrad_path" not in row: raise
    row["status"] = f"wrong answer (upstream's bug, not a failure of this run): {e}"
    return row
  # the second call: tinygrad's first-build tier builds a costly kernel in full on its second lowering (TinyJit's capture), so the time
  # to the steady state is the first two calls; timed in every process, as the first
  st = time.perf_counter()
  call()
  row["second_ms"] = (time.perf_counter() - st) * 1e3
  if task.get("first_only"): return row

  # steady state: warm-up (TinyJit captures on the 2nd call), then the median of `repeats`
  warmup, repeats = task["warmup"], task["repeats"]
  if impl in ("loop", "pad_outer", "pad_loop"): warmup, repeats = min(warmup, 1), (max(1, repeats // 3) if not quick else 1)
  warm_up([call], warmup - 1)   # the second call above was the first of them
  times, kernels, hm = [], [], []
  for _ in range(repeats):
    if fw == "tinygrad": h.reset(); k0 = GlobalCounters.kernel_count
    st = time.perf_counter()
    out = call()
    times.append(time.perf_counter() - st)
    if fw == "tinygrad":
      kernels.append(GlobalCounters.kernel_count - k0)
      hm.append(h.snapshot())
  check(getout(out), want, f"{w.name} {label} (steady state)")
  row["times_ms"] = [t * 1e3 for t in times]
  row["ms"], row["min_ms"] = median(times) * 1e3, min(times) * 1e3
  ex_run = w.n_examples(args_np) if impl != "loop" else n_run
  row["examples_run"] = ex_run
  if impl in ("loop", "pad_outer", "pad_loop"):
    full = w.n_examples(w.inputs(n, np.random.default_rng(0))) if impl != "loop" else w.n_examples(args_np)
    row["per_example_ms"] = row["ms"] / ex_run
    row["extrapolated_ms"] = row["per_example_ms"] * full
  if fw == "tinygrad":
    row["kernels"] = kernels[-1]
    row["sched_steady"] = {"hits": hm[-1]["sched_hits"], "misses": hm[-1]["sched_misses"], "schedule_ms": median([x["schedule_ms"] for x in hm]),
                           "build_ms": median([x["build_ms"] for x in hm])}
    if impl == "vmap":
      # the kernels of the one-example function: what vmap's kernels per call should equal
      ex = [x if ax is None else x[0] for x, ax in zip(args_np, w.in_axes)] if not w.extra.get("pad_inner") else [args_np[0][0], args_np[1][0]]
      grad = w.extra.get("requires_grad", ())
      k0 = GlobalCounters.kernel_count
      o = w.tg(*[leaf(np.array(x), i in grad) for i, x in enumerate(ex)])
      k1 = GlobalCounters.kernel_count
      Tensor.realize(*(o if isinstance(o, tuple) else (o,)))
      row["kernels_one_example"] = GlobalCounters.kernel_count - k1
  if fw == "tinygrad" and bench_device() and getattr(call, "eager", None) is not None:
    row["kernel_detail"] = kernel_detail(call)
    row["kernels_us"] = sum(k["us"] or 0 for k in row["kernel_detail"])
  if impl not in ("loop", "pad_outer", "pad_loop"):
    row["bytes"] = sum(a.nbytes for a in args_np) + nbytes(getout(out) if fw != "numpy" else out)
    row["gbps"] = row["bytes"] / (row["ms"] * 1e-3) / 1e9
  if w.flops is not None and impl not in ("loop", "pad_outer", "pad_loop", "pad_outer_vanilla") and not bench_device():
    row["gflops"], row["fma_peak"] = w.flops(n_run) / (row["ms"] * 1e-3) / 1e9, fma_peak()
  return row

def run_scale(task:dict) -> list[dict]:
  """time per call and schedule time against N for one (workload, implementation), in one process: each new N is a new shape, so its
  first call is a schedule-cache miss and a fresh compile"""
  import numpy as np
  from workloads import WORKLOADS
  w, impl = WORKLOADS[task["workload"]], task["impl"]
  label, fw = impls_of(w.name)[impl]
  rows = []
  for n in task["ns"]:
    args_np = w.inputs(n, np.random.default_rng(n))
    if fw == "tinygrad":
      from tinygrad import GlobalCounters
      h = hooks()
      call = tinygrad_impl(w, impl, args_np, n)
      getout = to_numpy
      h.reset()
    else:
      call, getout = other_impl(w, impl, args_np), (lambda o: out_numpy(impl, o))
    st = time.perf_counter()
    out = call()
    first = (time.perf_counter() - st) * 1e3
    row = {"workload": w.name, "impl": impl, "label": label, "n": n, "first_ms": first}
    if fw == "tinygrad": row["first"] = h.snapshot()
    check(getout(out), w.oracle(args_np), f"{w.name} {label} N={n}")
    warm_up([call], task["warmup"])
    times, sched = [], []
    for _ in range(task["repeats"] if n < 10**6 else max(3, task["repeats"] // 2)):
      if fw == "tinygrad": h.reset()
      st = time.perf_counter()
      call()
      times.append(time.perf_counter() - st)
      if fw == "tinygrad": sched.append(h.schedule_s * 1e3)
    row["ms"] = median(times) * 1e3
    if fw == "tinygrad": row["steady_schedule_ms"] = median(sched)
    rows.append(row)
    del args_np, call, out
  return rows

def run_ab(task:dict) -> dict:
  """vmap against hand-batched tinygrad, eager and TinyJit, calls interleaved in one process (A B A B ...), so load that comes and
  goes on a shared machine hits both alike: the ratio of the medians is the vmap overhead, robust to the noise the table carries"""
  import numpy as np
  from workloads import WORKLOADS
  w = WORKLOADS[task["workload"]]
  args_np = w.inputs(task["n"], np.random.default_rng(0))
  res = {"workload": w.name, "n": task["n"]}
  for mode in ("", "_jit"):
    a, b = tinygrad_impl(w, "vmap" + mode, args_np, task["n"]), tinygrad_impl(w, "hand" + mode, args_np, task["n"])
    warm_up([a, b], task["warmup"])
    ta, tb = [], []
    for _ in range(task["repeats"]):
      for f, ts in ((a, ta), (b, tb)):
        st = time.perf_counter(); f(); ts.append(time.perf_counter() - st)
    res["eager" if not mode else "jit"] = {"vmap_ms": median(ta) * 1e3, "hand_ms": median(tb) * 1e3, "ratio": median(ta) / median(tb)}
  return res

FMA_PEAK_C = r"""
#define CHAINS(R) "vfmadd231ps %%" R "14,%%" R "15,%%" R "0\n vfmadd231ps %%" R "14,%%" R "15,%%" R "1\n vfmadd231ps %%" R "14,%%" R "15,%%" \
  R "2\n vfmadd231ps %%" R "14,%%" R "15,%%" R "3\n vfmadd231ps %%" R "14,%%" R "15,%%" R "4\n vfmadd231ps %%" R "14,%%" R "15,%%" R "5\n" \
  " vfmadd231ps %%" R "14,%%" R "15,%%" R "6\n vfmadd231ps %%" R "14,%%" R "15,%%" R "7\n vfmadd231ps %%" R "14,%%" R "15,%%" R "8\n" \
  " vfmadd231ps %%" R "14,%%" R "15,%%" R "9\n vfmadd231ps %%" R "14,%%" R "15,%%" R "10\n vfmadd231ps %%" R "14,%%" R "15,%%" R "11\n"
#define CLOBBER "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm14","xmm15"
void ymm(long n) { __asm__ volatile("vzeroall\n 1:\n" CHAINS("ymm") " dec %0\n jnz 1b\n vzeroupper" : "+r"(n) :: CLOBBER); }
__attribute__((target("avx512f"))) void zmm(long n) {
  __asm__ volatile("vzeroall\n 1:\n" CHAINS("zmm") " dec %0\n jnz 1b\n vzeroupper" : "+r"(n) :: CLOBBER); }
"""

def fma_peak() -> dict|None:
  """one core's float32 FMA peak, measured: 12 independent chains of vfmadd231ps (enough to cover 2 ports x 4-5 cycles of latency) on
  ymm (AVX2) and, where the CPU has AVX-512, zmm, the faster of the two (Zen 4 runs zmm as two ymm halves: the same peak; a Xeon with two
  512-bit FMA ports twice ymm's). Measured, not taken from a clock: this machine's boost clock is what the kernels get. None off x86"""
  if platform.machine() not in ("x86_64", "AMD64"): return None
  import ctypes, tempfile
  avx512 = "avx512f" in Path("/proc/cpuinfo").read_text().split()
  with tempfile.TemporaryDirectory() as d:
    (src:=Path(d) / "fma.c").write_text(FMA_PEAK_C)
    subprocess.run(["clang", "-O2", "-shared", "-fPIC", str(src), "-o", str(Path(d) / "fma.so")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(Path(d) / "fma.so"))
  # the two interleaved, the best of 15 each: a shared machine's other load halved either for a run at a time (72 of 117 GFLOP/s)
  lanes, ts, n = {"ymm": 8, **({"zmm": 16} if avx512 else {})}, {}, 1_000_000
  for _ in range(15):
    for isa in lanes:
      st = time.perf_counter(); getattr(lib, isa)(ctypes.c_long(n)); ts.setdefault(isa, []).append(time.perf_counter() - st)
  ret = {isa: n * 12 * lanes[isa] * 2 / min(ts[isa]) / 1e9 for isa in lanes}
  return {**ret, "gflops": max(ret.values()), "isa": max(ret, key=ret.get)}

def fmt_gflops(r:dict) -> str:
  """a row's GFLOP/s and its share of the core's FMA peak (measured in the row's worker, next to the row)"""
  if "gflops" not in r: return ""
  pk = r.get("fma_peak")
  if not pk: return f"{r['gflops']:.0f} GFLOP/s"
  return f"{r['gflops']:.0f} GFLOP/s ({100 * r['gflops'] / pk['gflops']:.0f}% of the {pk['gflops']:.0f} GFLOP/s {pk['isa']} FMA peak)"

def machine_copy_bandwidth() -> float:
  """numpy copy of a 256 MB float32 array, GB/s counting bytes read + bytes written (the convention of the table's GB/s)"""
  import numpy as np
  a = np.ones(64 * 2**20, np.float32)
  b = np.empty_like(a)
  ts = []
  for _ in range(7):
    st = time.perf_counter(); np.copyto(b, a); ts.append(time.perf_counter() - st)
  return 2 * a.nbytes / median(ts[1:]) / 1e9

def device_copy_bandwidth() -> float:
  """a copy kernel of 1 GB of float32 on the bench device (tinygrad's), timed on the device (waiting for it, as kernel_detail: a wall
  clock around a 0.3 ms kernel counted the launch and the synchronize, and read 683 GB/s on an H200), GB/s counting bytes read + written"""
  from tinygrad import Tensor
  a = Tensor.ones(256 * 2**20).contiguous().realize()
  if LINE_012:
    ei = (a * 2).schedule()[-1].lower()
    ts = [ei.run(wait=True, do_update_stats=False) for _ in range(9)]
  else:   # the 0.14 line: the copy kernel is the linear's last CALL, time_call runs it and waits
    from tinygrad.engine.realize import time_call
    linear, var_vals = (a * 2).linear_with_vars()
    timer = time_call(linear.src[-1], var_vals)
    ts = [next(timer) for _ in range(9)]
  return 2 * a.nbytes() / median(ts[1:]) / 1e9

def worker(tasks:list[dict]):
  # one core, not just one thread: XLA's CPU client runs work on more threads than XLA_FLAGS' single-thread settings cover (jax 0.10
  # used 1.66 cores on W2 with them). The sharded row is about using both cores, so it keeps them.
  if hasattr(os, "sched_setaffinity") and not bench_device() and not any(t.get("impl") == "vmap_jit_2dev" for t in tasks):
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
  for task in tasks:
    try:
      if task["kind"] == "row": res = run_row(task)
      elif task["kind"] == "scale": res = run_scale(task)
      elif task["kind"] == "bandwidth": res = {"copy_gbps": device_copy_bandwidth() if bench_device() else machine_copy_bandwidth()}
      elif task["kind"] == "ab": res = run_ab(task)
      else: raise ValueError(task["kind"])
      print("@@RESULT " + json.dumps({"task": task, "result": res}), flush=True)
    except Mismatch as e:
      print("@@RESULT " + json.dumps({"task": task, "wrong": str(e)}), flush=True)
    except Exception as e:
      print("@@RESULT " + json.dumps({"task": task, "error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()}), flush=True)

# ================================================================ the kernel source of vmap vs hand-batched (DEBUG=4's kernels)

def show_xla(wname:str, n:int|None):
  """the HLO XLA compiles jax.jit(jax.vmap(f)) to, after its fusion passes: what the JAX row runs"""
  import numpy as np, jax, jax.numpy as jnp
  from workloads import WORKLOADS
  w = WORKLOADS[wname]
  args_np = w.inputs(n or w.n, np.random.default_rng(0))
  f1 = w.jax_fn(jax, jnp)
  f = jax.jit(w.jax_vmap(jax, f1) if w.jax_vmap else jax.vmap(f1, in_axes=w.in_axes))
  print(f.lower(*args_np).compile().as_text())

def show_source(wname:str, n:int|None, impls:list[str]):
  import numpy as np
  sys.path.insert(0, str(ROOT))   # this repo's tinygrad, as the workers' PYTHONPATH gives them
  from tinygrad import Tensor, vmap
  from workloads import WORKLOADS
  w = WORKLOADS[wname]
  args_np = w.inputs(n or w.n, np.random.default_rng(0))
  grad = w.extra.get("requires_grad", ())
  ts = [leaf(a, i in grad) for i, a in enumerate(args_np)]
  for impl in impls:
    f = {"vmap": w.tg_vmap(vmap, w.tg), "hand": w.tg_hand}[impl]
    out = f(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    if not LINE_012:   # the 0.14 line: a LINEAR of CALLs, each compiled to a PROGRAM
      from tinygrad.uop.ops import UOp, Ops
      from tinygrad.engine.realize import compile_linear
      linear, _ = Tensor.linear_with_vars(*outs)
      prgs = [compile_linear(UOp(Ops.LINEAR, src=(c,))).src[0].src[0] for c in linear.src]
      print(f"=================== {wname} {impl}: {len(prgs)} kernel(s)")
      for prg in prgs:
        opts = next((u.arg.applied_opts for u in prg.src if u.op is Ops.SINK), ())
        print(f"----- {prg.arg.name}  global_size={prg.arg.global_size} local_size={prg.arg.local_size} opts={opts}")
        print(next((u.arg for u in prg.src if u.op is Ops.SOURCE), ""))
      continue
    sched = outs[0].schedule(*outs[1:])
    print(f"=================== {wname} {impl}: {len(sched)} kernel(s)")
    for ei in sched:
      ei.lower()
      p = ei.prg.p
      print(f"----- {p.name}  global_size={p.global_size} local_size={p.local_size} opts={p.applied_opts}")
      print(p.src)

# ================================================================ the orchestrator

def have(mod:str) -> bool: return importlib.util.find_spec(mod) is not None

def versions() -> dict:
  v = {"python": platform.python_version()}
  for m in ("numpy", "jax", "jaxlib", "torch", "matplotlib"):
    if have(m):
      try:
        from importlib.metadata import version
        v[m] = version(m)
      except Exception: v[m] = "?"
  v["tinygrad"] = next((l.split("=", 1)[1].strip().strip('"') for l in (ROOT/"pyproject.toml").read_text().splitlines()
                        if l.startswith("version")), "?")
  try: v["clang"] = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
  except Exception: v["clang"] = "?"
  try: v["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
  except Exception: pass
  return v

def machine() -> dict:
  m = {"platform": platform.platform(), "cores": os.cpu_count()}
  try:
    cpu = [l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")]
    m["cpu"] = cpu[0].split(":", 1)[1].strip() if cpu else platform.processor()
    flags = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")), "")
    m["simd"] = " ".join(f for f in ("avx2", "fma", "avx512f") if f" {f}" in flags)
  except Exception: m["cpu"] = platform.processor()
  try: m["load_avg"] = os.getloadavg()
  except Exception: pass
  return m

def pristine() -> Path|None:
  """vanilla upstream 0.12.0 as tools/fork.py keeps it (materialized by `make fork`/`make test`), or None"""
  p = Path(os.environ.get("FORK_CACHE", ROOT/".cache"/"upstream"))/f"pristine-{fork.pin(ROOT, '0.12.0')['wheel']['sha256'][:16]}"
  return p if (p/"tinygrad"/"__init__.py").exists() else None

def spawn(tasks:list[dict], timeout:float) -> list[dict]:
  vanilla = any(t.get("impl") == "pad_outer_vanilla" for t in tasks)
  # the GPU table's workers see its device alone (tinygrad picks the first device variable it finds)
  base = {k:v for k,v in os.environ.items() if not (bench_device() and k in ("CPU", "CUDA", "NV", "CL", "METAL", "AMD", "LLVM", "PYTHON", "DEV"))}
  env = {**base, **(device_env(bench_device()) if bench_device() else THREAD_ENV),
         "PYTHONPATH": os.pathsep.join([str(pristine() if vanilla else ROOT), str(BENCH)] +
                                       ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])), **tasks[0].get("env", {})}
  for k in ("DEBUG", "BEAM", "NOOPT", "JIT"): env.pop(k, None)
  try:
    p = subprocess.run([sys.executable, str(BENCH/"run.py"), "--worker", json.dumps(tasks)], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    out, err, rc = p.stdout, p.stderr, p.returncode
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    err, rc = f"timed out after {timeout:.0f} s", "timeout"
  res = [json.loads(l[len("@@RESULT "):]) for l in out.splitlines() if l.startswith("@@RESULT ")]
  done = {json.dumps(r["task"], sort_keys=True) for r in res}
  for t in tasks:
    if json.dumps(t, sort_keys=True) not in done:
      res.append({"task": t, "error": f"worker died (exit {rc}): {err.strip().splitlines()[-1] if err.strip() else ''}", "tb": err[-3000:]})
  return res

def fmt(x, nd=2):
  if x is None: return "-"
  if x >= 100: return f"{x:.0f}"
  if x >= 10: return f"{x:.1f}"
  return f"{x:.{nd}f}"

def write_line_results(data:dict, rows:list, scale_rows:list, bw) -> None:
  """RESULTS-LINE.md of another upstream line (beside the default line's RESULTS.md): its table, then bench/analysis-LINE.md"""
  m = data["machine"]
  (BENCH/f"RESULTS-{LINE}.md").write_text("\n".join([
    f"# vmap benchmark on tinygrad {LINE} (`make bench UPSTREAM={LINE}`)", "",
    f"Generated on {data['date']}: {m.get('cpu', '?')}, one thread per row, as bench/RESULTS.md (the default line, "
    f"{fork.fork_config(ROOT)['default']}). The fork's rows run on the {LINE} line's full series ({fork.pin(ROOT)['patches']}/series).", "",
    render_table(rows, bw), ""] + ([render_scaling(scale_rows), ""] if scale_rows else []) +
    ([(BENCH/f"analysis-{LINE}.md").read_text().strip(), ""] if (BENCH/f"analysis-{LINE}.md").exists() else [])))

def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", default=bool(int(os.environ.get("QUICK", "0") or 0)))
  ap.add_argument("--only", default="", help="comma-separated workloads (W1,...)")
  ap.add_argument("--impls", default="", help="comma-separated implementations: " + ",".join(IMPLS))
  ap.add_argument("--no-scaling", action="store_true")
  ap.add_argument("--without", default="", help="comma-separated frameworks to treat as not installed (jax,torch): the skip path CI takes")
  ap.add_argument("--repeats", type=int, default=None)
  ap.add_argument("--source", default=None, help="print the kernel source of vmap and hand-batched tinygrad for this workload")
  ap.add_argument("--n", type=int, default=None, help="batch size for --source")
  ap.add_argument("--xla", action="store_true", help="with --source: print the optimized HLO of the JAX row instead")
  ap.add_argument("--write", action="store_true", help="write bench/RESULTS.md, results.json and docs/bench.png (default: full runs of everything)")
  ap.add_argument("--render", action="store_true", help="rewrite RESULTS.md and docs/bench.png from bench/results.json (after editing analysis.md); "
                  "with --device, RESULTS-gpu.md from results-gpu.json and results-gpu-after.json (after editing analysis-gpu.md)")
  ap.add_argument("--device", default=None, help="the GPU table: every row on this device (CUDA, NV; CPU tries it out), bench/RESULTS-gpu.md")
  ap.add_argument("--deadline", type=float, default=None, help="seconds for the whole run: a worker still running then is stopped, the "
                  "rows it finished kept, and the rows not reached written as 'not run: time limit' (tools/gpu_check.sh's budget)")
  ap.add_argument("--json", default=None, help="with --device: also write the run's results (rows, kernels, copy bandwidth) to this file")
  ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.device: os.environ["BENCH_DEVICE"] = a.device
  if a.worker is not None: return worker(json.loads(a.worker))
  if a.render and a.device:
    after = BENCH/"results-gpu-after.json"
    write_gpu_results(json.loads((BENCH/"results-gpu.json").read_text()), json.loads(after.read_text()) if after.exists() else None)
    return print(f"wrote {BENCH/'RESULTS-gpu.md'}")
  if a.render and not DEFAULT_LINE:
    d = json.loads((BENCH/f"results-{LINE}.json").read_text())
    write_line_results(d, d["rows"], d["scaling"], d["copy_gbps"])
    return print(f"wrote {BENCH/f'RESULTS-{LINE}.md'} from {BENCH/f'results-{LINE}.json'}")
  if a.render:
    d = json.loads((BENCH/"results.json").read_text())
    write_results(d); plot(d["scaling"])
    return print(f"wrote {BENCH/'RESULTS.md'} and {ROOT/'docs'/'bench.png'} from {BENCH/'results.json'}")
  if a.source:
    for k, v in THREAD_ENV.items(): os.environ.setdefault(k, v)
    return show_xla(a.source, a.n) if a.xla else show_source(a.source, a.n, ["vmap", "hand"])

  from workloads import WORKLOADS
  quick = a.quick
  wls = [x for x in (a.only.split(",") if a.only else WORKLOADS)]
  sel = set(a.impls.split(",")) if a.impls else (set(GPU_IMPLS) if a.device else None)
  repeats, warmup = (a.repeats or (2 if quick else 9)), (1 if quick else 3)
  without = set(filter(None, a.without.split(",")))
  available = {fw: fw not in without and (fw in ("tinygrad", "numpy") or have(fw)) for fw in ("tinygrad", "numpy", "jax", "torch")}
  available["vanilla"] = "vanilla" not in without and pristine() is not None
  t_start = time.perf_counter()
  print(f"vmap benchmark ({'QUICK smoke run' if quick else 'full run'}): workloads {', '.join(wls)}; every framework on one thread", flush=True)
  for fw in ("jax", "torch"):
    if not available[fw]: print(f"  skipping the {fw} rows: {fw} is not installed" +
                                (" (--without)" if fw in without else f" (pip install $(python tools/fork.py deps bench))"))
  if not available["vanilla"]: print("  skipping the vanilla 0.12.0 rows: no pristine upstream under .cache/upstream (make fork puts it there)")

  row_tasks, first_tasks, skipped = [], [], []
  for wn in wls:
    w = WORKLOADS[wn]
    for impl, (label, fw) in impls_of(wn).items():
      if sel and impl not in sel: continue
      if not available[fw] or not_ported(impl):
        skipped.append(status_row({"workload": wn, "impl": impl, "n": w.size(quick) * (GPU_SCALE if a.device else 1)}, not_ported(impl) or
                                  (f"skipped: {fw} is not installed" if fw != "vanilla" else "skipped: no pristine upstream 0.12.0")))
        continue
      row_tasks.append({"kind": "row", "workload": wn, "impl": impl, "n": w.size(quick) * (GPU_SCALE if a.device else 1), "quick": quick,
                        "repeats": repeats, "warmup": warmup})
      # the rows whose first calls the targets compare get FIRST_RUNS fresh processes in the full run: one first call swings 1.5-2x
      if not quick and not a.device and impl in FIRST_REPEATED: first_tasks += [{**row_tasks[-1], "first_only": True, "seed": k} for k in range(1, FIRST_RUNS)]
  row_tasks += sorted(first_tasks, key=lambda t: t["seed"])   # a round of every repeated row at a time (stable: rows keep their order)
  # warm caches: one filling process a row (seed 0), then the rounds that read them
  warm_dir = tempfile.mkdtemp(prefix="bench-warm-")
  warm_tasks = [{**t, "seed": k, "warm": True, "env": warm_env(warm_dir)} for t in row_tasks if t.get("first_only") and t["seed"] == 1
                for k in range(WARM_RUNS + 1)]
  row_tasks += sorted(warm_tasks, key=lambda t: t["seed"])
  scale_tasks = []
  if not a.no_scaling and not a.device:
    for wn, impls in SCALING.items():
      if wn not in wls: continue
      for impl in impls:
        if (sel and impl not in sel) or not available[impls_of(wn)[impl][1]] or not_ported(impl): continue
        scale_tasks.append({"kind": "scale", "workload": wn, "impl": impl, "ns": SCALING_N_QUICK if quick else SCALING_N,
                            "repeats": repeats if quick else 7, "warmup": warmup, "quick": quick})

  ab_tasks = [] if a.device or not DEFAULT_LINE or (sel and not {"vmap", "hand"} <= sel) else \
    [{"kind": "ab", "workload": wn, "n": WORKLOADS[wn].size(quick), "repeats": 3 if quick else 21, "warmup": 1 if quick else 3}
     for wn in (wls[:1] if quick else wls)]   # quick: one workload exercises the code
  row_tasks += ab_tasks
  # group the tasks into worker processes: the full run gives every row a fresh process (a cold first call); quick, one per framework
  groups: list[list[dict]] = [[{"kind": "bandwidth"}]] if not quick or a.device else []
  if quick or a.device:   # the GPU table: steady-state timings, so a process per framework (CUDA and JAX take seconds to start)
    by_fw: dict[str, list[dict]] = {}
    for t in row_tasks + scale_tasks:   # BEAM's search takes the longest: its rows run last, in a process of their own
      by_fw.setdefault("beam" if t.get("impl") == "vmap_jit_beam" else impls_of(t["workload"])[t["impl"]][1] if "impl" in t else "tinygrad",
                       []).append(t)
    groups += [by_fw[k] for k in sorted(by_fw, key=lambda k: k == "beam")]
    if groups and "numpy" in by_fw:   # numpy rows ride along with tinygrad's process: one interpreter start less
      groups = [g for g in groups if g is not by_fw["numpy"]]
      groups[0] = by_fw["numpy"] + groups[0] if "tinygrad" in by_fw else groups[0]
      if "tinygrad" not in by_fw: groups.append(by_fw["numpy"])
  else:
    groups += [[t] for t in row_tasks] + [[t] for t in scale_tasks]

  results, rows, scale_rows, ab_rows, wrong, errors, bw = [], [], [], [], [], [], None
  more_firsts: dict[tuple[str, str], list[float]] = {}
  warm_firsts: dict[tuple[str, str], list[float]] = {}
  more_seconds: dict[tuple[str, str], list[float]] = {}
  for g in groups:
    left = None if a.deadline is None else a.deadline - (time.perf_counter() - t_start)
    if left is not None and left < 5:
      rows += [status_row(t, "not run: time limit (--deadline)") for t in g if t["kind"] == "row"]
      continue
    for r in spawn(g, timeout=min(120 if quick else 1800, left if left is not None else math.inf)):
      t = r["task"]
      # cut by --deadline: a row not reached, not a crash (without a deadline a worker's timeout is an error, below)
      if left is not None and "error" in r and r["error"].startswith("worker died (exit timeout)") and t["kind"] == "row":
        rows.append(status_row(t, "not run: time limit (--deadline)"))
        continue
      if "wrong" in r: wrong.append(r["wrong"]); print(f"  WRONG {r['wrong']}", flush=True)
      elif "error" in r:
        errors.append(f"{t.get('workload', '')} {t.get('impl', t['kind'])}: {r['error']}")
        print(f"  ERROR {errors[-1]}\n{r.get('tb', '')}", flush=True)
      elif t["kind"] == "bandwidth": bw = r["result"]["copy_gbps"]
      elif t["kind"] == "ab":
        ab_rows.append(r["result"])
        x = r["result"]
        print(f"  {x['workload']} vmap / hand-batched, interleaved: eager {x['eager']['ratio']:.2f}x, TinyJit {x['jit']['ratio']:.2f}x", flush=True)
      elif t["kind"] == "scale":
        scale_rows += r["result"]
        for s in r["result"]: print(f"  scaling {s['workload']} {s['label']:34s} N={s['n']:>8d} {fmt(s['ms']):>8s} ms/call", flush=True)
      elif t.get("warm"):   # seed 0 filled the caches: not a warm first call
        if t["seed"]: warm_firsts.setdefault((t["workload"], t["impl"]), []).append(r["result"]["first_ms"])
      elif t.get("first_only"):
        more_firsts.setdefault((t["workload"], t["impl"]), []).append(r["result"]["first_ms"])
        more_seconds.setdefault((t["workload"], t["impl"]), []).append(r["result"].get("second_ms"))
      else:
        rows.append(r["result"])
        x = r["result"]
        shown = f"{fmt(x.get('ms'))} ms" + (f" (at N={x['n_run']}; {fmt(x['extrapolated_ms'])} ms extrapolated)" if "extrapolated_ms" in x else "")
        if x["status"] == "ok" and "gflops" in x: shown += f"  {fmt_gflops(x)}"
        print(f"  {x['workload']} {x['label']:40s} {x['status'] if x['status'] != 'ok' else shown}", flush=True)
  for x in rows:
    if (more:=more_firsts.get((x["workload"], x["impl"]))):
      x["first_runs_ms"] = [x["first_ms"]] + more
      x["first_ms"] = median(x["first_runs_ms"])
      if "second_ms" in x and None not in (sec:=more_seconds.get((x["workload"], x["impl"]), [])):
        x["second_runs_ms"] = [x["second_ms"]] + sec
        x["second_ms"] = median(x["second_runs_ms"])
    if (warm:=warm_firsts.get((x["workload"], x["impl"]))): x["first_warm_runs_ms"], x["first_warm_ms"] = warm, median(warm)
  shutil.rmtree(warm_dir, ignore_errors=True)
  rows += skipped
  for s in skipped: print(f"  {s['workload']} {s['label']:40s} {s['status']}")

  missing = [f"{wn} {impl}" for wn in wls for impl in impls_of(wn) if (not sel or impl in sel) and
             not any(r["workload"] == wn and r["impl"] == impl for r in rows)]
  print()
  print(render_table(rows, bw))
  if ab_rows: print(render_ab(ab_rows))
  if any("first_warm_ms" in r for r in rows): print(render_first(rows))
  if scale_rows: print(render_scaling(scale_rows))
  elapsed = time.perf_counter() - t_start
  print(f"workloads: {', '.join(wls)}; {len(rows)} rows ({len(skipped)} skipped); {elapsed:.1f} s")

  write = a.write or (not quick and not a.only and not a.impls and not a.no_scaling)
  if a.device and (write or a.json):
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "device": a.device, "gpu": gpu_info(), "machine": machine(),
            "versions": versions(), "env": device_env(a.device), "copy_gbps": bw, "rows": rows, "errors": errors, "wrong": wrong}
    if a.json: Path(a.json).write_text(json.dumps(data, indent=1))
    if write and not DEFAULT_LINE:   # another upstream line: its run beside the default line's table, which it leaves alone
      (BENCH/f"results-gpu-{LINE}.json").write_text(json.dumps(data, indent=1))
      print(f"wrote {BENCH/f'results-gpu-{LINE}.json'}")
    elif write:
      (BENCH/"results-gpu.json").write_text(json.dumps(data, indent=1))
      (BENCH/"results-gpu-after.json").unlink(missing_ok=True)   # a later run of some rows: a new full run supersedes it
      write_gpu_results(data)
      print(f"wrote {BENCH/'RESULTS-gpu.md'}, {BENCH/'results-gpu.json'}")
  elif write and not DEFAULT_LINE:   # another upstream line: its own table beside the default line's, which it leaves alone
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "line": LINE, "machine": machine(), "versions": versions(),
            "thread_env": THREAD_ENV, "copy_gbps": bw, "rows": rows, "scaling": scale_rows, "errors": errors, "wrong": wrong}
    (BENCH/f"results-{LINE}.json").write_text(json.dumps(data, indent=1))
    write_line_results(data, rows, scale_rows, bw)
    print(f"wrote {BENCH/f'RESULTS-{LINE}.md'}, {BENCH/f'results-{LINE}.json'}")
  elif write:
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(), "versions": versions(),
            "thread_env": THREAD_ENV, "copy_gbps": bw, "rows": rows, "ab": ab_rows, "scaling": scale_rows, "errors": errors, "wrong": wrong}
    (BENCH/"results.json").write_text(json.dumps(data, indent=1))
    write_results(data)
    plot(scale_rows)
    print(f"wrote {BENCH/'RESULTS.md'}, {BENCH/'results.json'}, {ROOT/'docs'/'bench.png'}")
  if wrong or errors or missing:
    if missing: print("rows that produced nothing: " + ", ".join(missing))
    print(f"FAIL: {len(wrong)} wrong output(s), {len(errors)} crashed row(s)")
    sys.exit(1)
  print("PASS: every row ran" + (" (or was skipped, with the reason)" if skipped else "") + " and every output matches numpy"
        " (upstream's pad+reduce idiom: its failures are the row's status)")

# ================================================================ output

def _ratio(x, base):
  return f"{x / base:.2f}x" if x is not None and base else "-"

def row_time(r):
  """the time of a call at the workload's N: measured, or extrapolated for the loop and pad+reduce rows"""
  return r.get("extrapolated_ms", r.get("ms"))

def render_table(rows:list[dict], bw:float|None) -> str:
  by = {(r["workload"], r["impl"]): r for r in rows}
  from workloads import WORKLOADS
  out = ["| workload | implementation | N | ms / call | first call ms | kernels / call (1 example) | schedule cache first; steady | GB/s | "
         "÷ tinygrad hand | ÷ JAX | status |", "|" + " --- |" * 11]
  order = list(dict.fromkeys(list(IMPLS) + [k for e in EXTRA_IMPLS.values() for k in e]))
  for wn in dict.fromkeys(r["workload"] for r in rows):
    w = WORKLOADS[wn]
    for impl in order:
      r = by.get((wn, impl))
      if r is None: continue
      t = row_time(r)
      base = by.get((wn, "hand" if impl in ("vmap", "hand") else "hand_jit"), {})
      jax_ = by.get((wn, "jax"), {})
      if r["status"] != "ok":
        out.append(f"| {wn} | {r['label']} | {r['n']} | - | - | - | - | - | - | - | {r['status']} |"); continue
      ms = fmt(r.get("ms")) if "extrapolated_ms" not in r else \
        f"{fmt(r['extrapolated_ms'])} (extrapolated: {fmt(r['per_example_ms'], 3)} ms/example at N={r['n_run']})"
      k = "-"
      if "kernels" in r:
        k = str(r["kernels"]) + (f" ({r['kernels_one_example']})" if "kernels_one_example" in r else "")
      sc = "-"
      if r["framework"] == "tinygrad" and LINE_012:   # 0.14's scheduler isn't hooked (TinygradHooks)
        f, s = r.get("first", {}), r.get("sched_steady", {})
        sc = f"{f.get('sched_misses', 0)} miss/{f.get('sched_hits', 0)} hit; " + \
          ("jit replay" if s.get("hits", 0) + s.get("misses", 0) == 0 else f"{s['misses']} miss/{s['hits']} hit")
      gb = "-" if "gbps" not in r else (f"{r['gbps']:.2f}" + (f" ({100 * r['gbps'] / bw:.0f}% of copy)" if bw and w.memory_bound else ""))
      if "gflops" in r: gb += f"; {fmt_gflops(r)}"
      out.append(f"| {wn} | {r['label']} | {r['n']} | {ms} | {fmt(r.get('first_ms'))} | {k} | {sc} | {gb} | "
                 f"{_ratio(t, row_time(base) if base.get('status') == 'ok' else None)} | "
                 f"{_ratio(t, row_time(jax_) if jax_.get('status') == 'ok' else None)} | {r['status']} |")
  return "\n".join(out)

def render_first(rows:list[dict]) -> str:
  """first calls, cold (no cache: CCACHE=0) and warm (a fresh process after one that filled this run's caches), medians of processes"""
  out = ["| workload | implementation | first call ms, cold caches | first call ms, warm caches | ÷ JAX's, cold | ÷ JAX's, warm | "
         "second call ms, cold | first two calls ÷ JAX's, cold |", "|" + " --- |" * 8]
  jax = {(r["workload"], r["impl"] in ("vmap_jacfwd_jit", "jax_jacfwd")): r for r in rows if r.get("impl") in ("jax", "jax_jacfwd")}
  for r in rows:
    if "first_warm_ms" not in r: continue
    j = jax.get((r["workload"], r["impl"] in ("vmap_jacfwd_jit", "jax_jacfwd")), {})
    out.append(f"| {r['workload']} | {r['label']} | {fmt(r.get('first_ms'))} | {fmt(r['first_warm_ms'])} | "
               f"{_ratio(r.get('first_ms'), j.get('first_ms'))} | {_ratio(r['first_warm_ms'], j.get('first_warm_ms'))} | "
               f"{fmt(r.get('second_ms'))} | {_ratio(two(r), two(j))} |")
  return "\n".join(out)

def two(r:dict) -> float|None:
  """the first two calls of a cold process: the time to the steady state (tinygrad's second call builds its costly kernels in full)"""
  return r["first_ms"] + r["second_ms"] if r.get("first_ms") is not None and r.get("second_ms") is not None else None

def render_ab(ab:list[dict]) -> str:
  out = ["| workload | N | eager: vmap ms | hand ms | vmap / hand | TinyJit: vmap ms | hand ms | vmap / hand |", "|" + " --- |" * 8]
  for x in sorted(ab, key=lambda x: x["workload"]):
    e, j = x["eager"], x["jit"]
    out.append(f"| {x['workload']} | {x['n']:,} | {fmt(e['vmap_ms'])} | {fmt(e['hand_ms'])} | **{e['ratio']:.2f}x** | {fmt(j['vmap_ms'])} | "
               f"{fmt(j['hand_ms'])} | **{j['ratio']:.2f}x** |")
  return "\n".join(out)

def render_scaling(srows:list[dict]) -> str:
  out = ["| workload | implementation | N | ms / call | first call ms | first-call schedule ms (miss) | first-call codegen+compile ms | "
         "steady schedule ms (hit) |", "|" + " --- |" * 8]
  for r in sorted(srows, key=lambda r: (r["workload"], list(IMPLS).index(r["impl"]), r["n"])):
    f = r.get("first", {})
    out.append(f"| {r['workload']} | {r['label']} | {r['n']:,} | {fmt(r['ms'], 3)} | {fmt(r['first_ms'])} | "
               f"{fmt(f.get('schedule_ms'))} | {fmt(f.get('codegen_compile_ms'))} | {fmt(r.get('steady_schedule_ms'), 3)} |")
  return "\n".join(out)

def gpu_info() -> dict:
  """the GPU and driver nvidia-smi reports, or what it said when it isn't there"""
  try:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=30).stdout.strip().splitlines()
    name, driver, mem = [x.strip() for x in out[0].split(",")]
    return {"name": name, "driver": driver, "memory": mem, "count": len(out)}
  except Exception as e: return {"name": f"unknown ({type(e).__name__})"}

def gpu_run_head(d:dict, what:str) -> str:
  g, v = d["gpu"], d["versions"]
  return (f"{what} on {d['date']}: {g.get('name')}, driver {g.get('driver', '?')}, {g.get('memory', '?')}; {d['machine'].get('cpu', '?')}. "
          f"tinygrad {v.get('tinygrad')}, jax {v.get('jax', '-')}, torch {v.get('torch', '-')}, numpy {v.get('numpy')}; git {v.get('git', '?')}. "
          f"Copy bandwidth (a tinygrad copy kernel, read + write): {fmt(d['copy_gbps'])} GB/s.")

def write_gpu_results(d:dict, after:dict|None=None):
  """bench/RESULTS-gpu.md: the GPU table of one run on one card (results-gpu.json), its TinyJit rows' kernels, and a later run of some
  rows on the same card (results-gpu-after.json, `--json`: the rows a change moved) with bench/analysis-gpu.md"""
  head = [f"# vmap benchmark on a GPU ({d['device']})", "",
          gpu_run_head(d, f"Every row of one run, `python bench/run.py --device {d['device']}` (tools/gpu_check.sh),"), "",
          f"Batches are {GPU_SCALE}x the CPU table's (bench/RESULTS.md). Every output is checked against the numpy oracle. JAX runs with "
          "`jax_default_matmul_precision=highest` (full fp32): its GPU default, TF32, fails the float32 tolerances. ms / call is the median "
          "wall time of a call to its end (synchronized), so it counts Python and launches too.", ""]
  notes = [f"- {x}" for x in d["errors"] + d["wrong"]]
  out = head + [render_table(d["rows"], d["copy_gbps"]), ""] + (["Errors:", *notes, ""] if notes else []) + [render_kernel_detail(d["rows"]), ""]
  if after is not None:
    out += ["# A later run of some rows, on the same card", "", gpu_run_head(after, "`bench/run.py --device CUDA --impls ... --json`"), "",
            render_table(after["rows"], after["copy_gbps"]), "", render_kernel_detail(after["rows"]), ""]
  if (BENCH/"analysis-gpu.md").exists(): out += [(BENCH/"analysis-gpu.md").read_text().strip(), ""]
  (BENCH/"RESULTS-gpu.md").write_text("\n".join(out))

def render_kernel_detail(rows:list[dict]) -> str:
  """the kernels of each TinyJit row, each timed alone on the device: where a call's time goes (kernels vs the rest: Python, launches)"""
  out = ["## Where a TinyJit call's time goes", "",
         "Each kernel of one call, timed alone (median of 15 runs, waiting for each); `rest` is the call's median time less the kernels' sum: "
         "the replay's Python, launches and the synchronize.", "",
         "| workload | implementation | ms / call | kernels' sum ms | rest ms | kernel | global | local | opts | µs |", "|" + " --- |" * 10]
  for r in rows:
    if r.get("status") != "ok" or "kernel_detail" not in r: continue
    ks = r["kernel_detail"]
    for i, k in enumerate(ks):
      lead = f"| {r['workload']} | {r['label']} | {fmt(r['ms'], 3)} | {fmt(r['kernels_us'] / 1e3, 3)} | {fmt(r['ms'] - r['kernels_us'] / 1e3, 3)} |" \
        if i == 0 else "| | | | | |"
      out.append(f"{lead} `{k['name']}` | {k.get('global_size', '-')} | {k.get('local_size', '-')} | {', '.join(k.get('opts', [])) or '-'} | "
                 f"{fmt(k['us'], 1)} |")
  return "\n".join(out)

# a first call's tiers on the fork, in the W7 and W8 sections' words
TIERS_FIRST_W = ("its -O1 builds" if LINE_012 else
                 "numpy for a function's first realize and a kernel's first run (engine/first_graph.py, first_numpy.py, a scan's kernel a loop in "
                 "Python: first_loop.py; kept for what TinyJit's first call runs again)")

def render_w7() -> str:
  """RESULTS.md's W7 section from bench/results-w7.json (bench/w7_trajopt.py --write), when it has been measured"""
  if not (path := BENCH/"results-w7.json").exists(): return ""
  w7 = json.loads(path.read_text())
  rows = w7["rows"]
  base = {(r["T"], r["B"]): r["ms"] for r in rows if r["impl"] == "tinygrad"}
  lines = ["| T | B | implementation | ms / iteration | (each process) | ÷ tinygrad | first call ms | kernels / iteration |", "|" + " --- |" * 8]
  lines += [f"| {r['T']} | {r['B']} | {r['label']} | {fmt(r['ms'])} | {', '.join(fmt(x) for x in r.get('runs_ms', []))} | "
            f"{fmt(r['ms'] / b) if (b:=base.get((r['T'], r['B']))) else '-'} | {fmt(r['first_ms'])} | {r.get('kernels', '-')} |" for r in rows]
  sizes = ", ".join(dict.fromkeys(f"T={r['T']} B={r['B']}" for r in rows))
  return f"""## W7: a trajectory optimizer, one iteration

examples/trajopt.py's iLQR (bench/w7_trajopt.py, measured {w7['date']}): one iteration over B problems of T knots ({sizes}), float32, one
thread and one core per framework, each in a fresh process (bench/run.py's environment), 3 processes each, in rounds. *ms / iteration*:
median of 9 after 3 warm-up iterations (TinyJit captures on the 2nd) in the median process, then each process's; *first call*: the
first iteration of that process (tinygrad: graph building, then {TIERS_FIRST_W} where it applies, else scheduling,
codegen, clang; JAX: trace and XLA compile). The same algorithm in all three (test/test_trajopt.py's numpy iLQR is the spec): derivatives
by vmap of jacfwd / jacrev / hessian over the knots, a Riccati recursion backward and the rollouts of 5 step sizes forward, the best
step kept per problem. Every framework's iterates are checked against numpy float64 (`python bench/w7_trajopt.py`: float64 to 1e-6).

{chr(10).join(lines)}
"""

def render_w8() -> str:
  """RESULTS.md's W8 section from bench/results-w8.json (bench/w8_mpc.py --write), when it has been measured"""
  if not (path := BENCH/"results-w8.json").exists(): return ""
  w8 = json.loads(path.read_text())
  rows = w8["rows"]
  base = {r["B"]: r["ms"] for r in rows if r["impl"] == "tinygrad"}
  lines = ["| implementation | B | ms / period: median | worst | (each process's median) | ÷ tinygrad | first call ms | kernels / period |",
           "|" + " --- |" * 8]
  lines += [f"| {r['label']} | {r['B']} | {fmt(r['ms'], 3)} | {fmt(r['worst_ms'], 3)} | {', '.join(fmt(x, 3) for x in r.get('runs_ms', []))} | "
            f"{fmt(r['ms'] / base[r['B']]) if r['B'] in base else '-'} | {fmt(r['first_ms'])} | {r.get('kernels', '-')} |" for r in rows]
  r0 = rows[0]
  return f"""## W8: model-predictive control, one control period

examples/mpc.py's closed loop (bench/w8_mpc.py, measured {w8['date']}): B cars (1, then a fleet) drive to the goal past the obstacles;
every control period each framework re-solves the T={r0['T']} knot horizon from the last plan shifted by one knot and the car's measured
state (a rollout, then {r0['iters']} iLQR iterations of W7's algorithm), and the first control drives the numpy car one step. Float32,
one thread and one core per framework, each in a fresh process (bench/run.py's environment), 3 processes each, in rounds. *ms / period*:
the solve's wall time, state in to control out, median and worst of {r0['periods'] - 3} periods after 3 warm-up periods in the median
process (the goal: under 1 ms at B=1; a worst far above every framework's median is the machine preempting the process); *first
call*: the first period (tinygrad: graph building, then {TIERS_FIRST_W} where it applies, else scheduling, codegen, clang; JAX: trace
and XLA compile). Each framework's closed loop
is checked against numpy float64's (`python bench/w8_mpc.py`: controls and path to 5e-3).

{chr(10).join(lines)}
"""

def write_results(d:dict):
  m, v = d["machine"], d["versions"]
  analysis = (BENCH/"analysis.md").read_text() if (BENCH/"analysis.md").exists() else ""
  first_parts = ["| workload | implementation | first call ms | schedule ms | codegen+compile ms (clang ms) | kernels |", "|" + " --- |" * 6]
  for r in d["rows"]:
    if r.get("framework") == "tinygrad" and r.get("status") == "ok" and "first" in r:
      f = r["first"]
      # a run before the 0.14 line's hooks (TinygradHooks.hook_014) has its totals only: its parts unmeasured, not zero
      parts = (fmt(f['schedule_ms']), f"{fmt(f['codegen_compile_ms'])} ({fmt(f['clang_ms'])})") if f['kernels'] == 0 or \
        any(f[k] for k in ('schedule_ms', 'codegen_compile_ms', 'clang_ms')) else ("-", "-")
      first_parts.append(f"| {r['workload']} | {r['label']} | {fmt(r.get('first_runs_ms', [r['first_ms']])[0])} | {' | '.join(parts)} | "
                         f"{f['kernels']} |")
  eager_parts = ["| workload | implementation | ms / call | build the graph ms | schedule ms (cache hit) | the rest: lower, run, sync ms |",
                 "|" + " --- |" * 6]
  for r in d["rows"]:
    if r.get("impl") in ("vmap", "hand") and r.get("status") == "ok" and "sched_steady" in r:
      s_ = r["sched_steady"]
      eager_parts.append(f"| {r['workload']} | {r['label']} | {fmt(r['ms'])} | {fmt(s_['build_ms'])} | {fmt(s_['schedule_ms'])} | "
                         f"{fmt(r['ms'] - s_['build_ms'] - s_['schedule_ms'])} |")
  TIERS_STEADY = "after the clang -O2 builds those calls started in the background (a kernel's first build is -O1)" if LINE_012 else \
    "with every kernel's full build (its first run is numpy's or\na quick build's, its full one from TinyJit's capture on: engine/first_tier.py)"
  TIERS_FIRST = "the -O1 build" if LINE_012 else "a first run as numpy or a quick build of such a kernel"
  txt = f"""# Benchmark results

Generated by `make bench` (`python bench/run.py`) on {d['date']}; the raw numbers are in `bench/results.json`. The gap analysis below
the tables is written by hand from `bench/analysis.md`, from the kernel source `python bench/run.py --source W<k>` prints.

**Machine**: {m.get('cpu')} ({m.get('simd', '')}), {m.get('cores')} cores, {m.get('platform')}; load average at the end of the run
{', '.join(f'{x:.2f}' for x in m.get('load_avg', ()))} (the machine is shared: other jobs run beside the benchmark, so figures carry noise).
**Versions**: {', '.join(f'{k} {x}' for k, x in v.items())}.
**Threads**: every framework pinned to one thread, set in each worker's environment before any import:
`{' '.join(f'{k}={x!r}' if ' ' in x else f'{k}={x}' for k, x in d['thread_env'].items())}`, and `torch.set_num_threads(1)`; and each
worker process pinned to one core (`sched_setaffinity`: jax 0.10's CPU client used 1.66 cores on W2 despite its XLA flags), except the
sharded row's, which uses both.
**Copy bandwidth** of this machine, one thread (numpy copy of 256 MB, bytes read + written): **{fmt(d['copy_gbps'])} GB/s**.

## The table

Each row runs in a fresh worker process. *ms / call*: median of 9 calls after 3 warm-up calls (TinyJit captures on the 2nd) and, on the
fork, {TIERS_STEADY}, the tinygrad device synchronized
before the clock stops (`.block_until_ready()` for JAX). *First call*: the first call in that fresh process, inputs already on the device
and the imports' garbage collected (`gc.collect()`, as timeit keeps GC out): graph building, scheduling, codegen and clang (the compile
cache is off, `CCACHE=0`; on the fork {TIERS_FIRST}) and the run; for JAX, trace and XLA compile and the run. It swings 1.5-2x from one
process to the next, so the vmap and JAX rows show the median of {FIRST_RUNS} fresh processes, run in rounds spread over the whole run (each
one's figure is `first_runs_ms` in results.json); the breakdown below is the table's own process. *Kernels / call*: kernels one steady call
runs, and in parentheses the kernels of the per-example function run on ONE example (the number vmap should match). *Schedule cache*: misses
and hits on the first call; on a steady call (a TinyJit replay doesn't schedule). *GB/s*: (input bytes + output bytes) / time; the % of the
copy bandwidth is shown for the memory-bound workloads; a compute-bound workload's GFLOP/s (W2: its matmuls' multiply-adds, 2 flops each)
is shown against one core's FMA peak, measured in the row's process (12 independent FMA chains on ymm, and zmm where the CPU has AVX-512:
the faster). *÷ tinygrad hand*: eager rows against hand-batched eager, every other row against
hand-batched TinyJit. The Python loop and pad+reduce rows run a few examples (the loop: separate realized per-example Tensors, so each
iteration is a schedule-cache hit) and are extrapolated linearly to N; pad+reduce's cost grows as N^2 (N kernels, each writing N slots), so
its extrapolation is a lower bound.

{render_table(d['rows'], d['copy_gbps'])}

Workloads: {'; '.join(f'**{w}** {t}' for w, t in _titles().items())}.

### vmap against hand-batched tinygrad, interleaved

The table's rows each run in their own process, minutes apart, so on a shared machine two rows can see different load. Here the vmap
and the hand-batched call alternate in one process (21 rounds after 3 warm-up rounds; medians): the ratio is vmap's own overhead.

{render_ab(d.get('ab', []))}

### Where a tinygrad first call goes

{chr(10).join(first_parts)}

### First calls, cold and warm caches

*Cold* is the table's first call (no cache across processes: `CCACHE=0`, which turns the program cache off too). *Warm*: the same first
call in a fresh process after one process of the same row filled caches of this run's own (tinygrad's disk cache with `CCACHE=1`: the
0.14 line's program cache, codegen's output per kernel, and the compile cache; JAX's persistent compilation cache), the median of
{WARM_RUNS} processes. A user's second run of a script is the warm case; a new kernel, tinygrad's sources or the environment changed, the cold.
*Second call*: the next call in the cold processes (median). On the 0.14 line a function's first realize is numpy over its tensor
graph, not scheduled (engine/first_graph.py), where numpy computes it as the kernels would; the second call (TinyJit's capture)
schedules it and builds its kernels in full (engine/first_tier.py; an eager second call runs a CPU kernel as numpy over its ranges
first, engine/first_numpy.py): the first two calls are the time to the steady state.

{render_first(d["rows"]) if any("first_warm_ms" in r for r in d["rows"]) else "(not measured in this run)"}

### Where a steady eager call goes

Medians over the steady calls: building the graph (the Python function call; for vmap, tracing fn), the schedule (a cache hit: the
graph is canonicalized and looked up), and the rest (lowering the cached schedule to runners, the kernels, the synchronize).

{chr(10).join(eager_parts)}

## Scaling with N

One process per (workload, implementation), N from 10^2 to 10^6: each new N is a new shape, so its first call is a schedule-cache miss
and a fresh compile. *ms / call*: median of 7 (3 at 10^6). Schedule and compile should stay flat in N and the run grow linearly;
`docs/bench.png` plots ms / call against N.

{render_scaling(d['scaling'])}

![time per call against N](../docs/bench.png)

{render_w7()}
{render_w8()}
{analysis}
"""
  if d["errors"] or d["wrong"]:
    txt += "\n## Failures of this run\n\n" + "\n".join(f"- {e}" for e in d["wrong"] + d["errors"]) + "\n"
  (BENCH/"RESULTS.md").write_text(txt)

def _titles() -> dict:
  from workloads import WORKLOADS
  return {k: f"{w.title}, N={w.n:,}" for k, w in WORKLOADS.items()}

def plot(srows:list[dict]):
  if not srows or not have("matplotlib"): return
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  wls = sorted({r["workload"] for r in srows})
  fig, axes = plt.subplots(1, len(wls), figsize=(6 * len(wls), 4.5), squeeze=False)
  from workloads import WORKLOADS
  for ax, wn in zip(axes[0], wls):
    for impl in IMPLS:
      pts = sorted((r["n"], r["ms"]) for r in srows if r["workload"] == wn and r["impl"] == impl)
      if pts: ax.plot(*zip(*pts), marker="o", label=IMPLS[impl][0])
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlabel("N (examples)"); ax.set_ylabel("ms per call (median, one thread)")
    ax.set_title(f"{wn}: {WORKLOADS[wn].title}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3); ax.legend(fontsize=8)
  fig.tight_layout()
  (ROOT/"docs").mkdir(exist_ok=True)
  fig.savefig(ROOT/"docs"/"bench.png", dpi=110)

if __name__ == "__main__":
  main()
