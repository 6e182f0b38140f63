#!/usr/bin/env python3
"""CUDA's compiler on the kernels the vmap tests schedule, with no card and no driver (`make check-cuda`, the default line): the CUDA
renderer (the emulated device's heuristics, as test/test_gpu_emulated.py renders them) and NVRTC, pip's nvidia-cuda-nvrtc-cu12, which
compiles CUDA C to a CUBIN for a given sm_XX, ptxas included. Two uses:

  a pytest plugin (-p cuda_check, tools/ on PYTHONPATH): every kernel a test schedules on the CPU is rendered for each arch of
  CUDA_CHECK_ARCHS (sm_80,sm_90) and compiled, to PTX and for the last arch to a CUBIN (ptxas too); a compile error fails that
  test, naming the kernel, the arch and nvrtc's log
  python3 tools/cuda_check.py table [--write]: ptxas' registers, spills, stack and shared memory of bench/RESULTS-gpu.md's kernels (W1-W6
  through vmap and hand-batched, at the GPU table's N), printed, or written to bench/RESULTS-cuda-regs.md

NVRTC_PATH names libnvrtc.so.12 and CUDA_PATH the headers (cuda_fp16.h: pip's nvidia-cuda-runtime-cu12); `setup_env()` finds both in pip's
site-packages when they are unset."""
from __future__ import annotations
import ctypes, os, re, site, sys, glob
import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
ARCHS = tuple(a for a in os.environ.get("CUDA_CHECK_ARCHS", "sm_80,sm_90").split(",") if a)

def setup_env() -> None:
  """NVRTC_PATH and CUDA_PATH from pip's nvidia wheels, before tinygrad loads nvrtc (its autogen reads NVRTC_PATH at import)"""
  sps = site.getsitepackages() + [site.getusersitepackages()]
  if not os.environ.get("NVRTC_PATH") and (libs := [f for sp in sps for f in glob.glob(f"{sp}/nvidia/cuda_nvrtc/lib/libnvrtc.so.*")]):
    os.environ["NVRTC_PATH"] = sorted(libs, key=len)[0]
  if not os.environ.get("CUDA_PATH") and (incs := [d for sp in sps if Path(d := f"{sp}/nvidia/cuda_runtime").joinpath("include").is_dir()]):
    os.environ["CUDA_PATH"] = incs[0]

def cuda_source(ast, arch:str):
  """(name, global_size, local_size, source) of a kernel AST (a SINK) as the CUDA renderer for `arch` builds it, its heuristics applied"""
  from tinygrad.helpers import Target
  from tinygrad.uop.ops import Ops
  from tinygrad.renderer import Compiler
  from tinygrad.renderer.cstyle import CUDARenderer
  from tinygrad.codegen import do_to_program
  from tinygrad.codegen.opt import tc
  class SourceOnly(Compiler):
    def compile(self, src:str) -> bytes: return src.encode()
  class CUDASourceRenderer(CUDARenderer):
    def __init__(self, arch:str):   # 0.14's CUDARenderer loads nvrtc for its compiler: the same renderer, keeping the source
      super(CUDARenderer, self).__init__(Target("CUDA", "CUDA", arch))
      self.compiler, self.tensor_cores = SourceOnly(), tc.get_cuda(arch)
  if arch not in _renderers: _renderers[arch] = CUDASourceRenderer(arch)
  p = do_to_program(ast, _renderers[arch])
  src = next(u.arg for u in p.src if u.op is Ops.SOURCE)
  return re.sub(r"\x1b\[[0-9;]*m", "", p.arg.name), tuple(p.arg.global_size), tuple(p.arg.local_size or ()), src
_renderers: dict = {}

def nvrtc_compile(src:str, arch:str, verbose:bool=False, cubin:bool=True) -> tuple[bool, str]:
  """CUDA C to a CUBIN for `arch` (ptxas runs; cubin=False: to PTX): (ok, nvrtc's log), the options tinygrad's NVRTCCompiler passes"""
  from tinygrad.runtime.autogen import nvrtc
  from tinygrad.helpers import to_char_p_p
  prog = nvrtc.nvrtcProgram()
  if (rc := nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"<null>", 0, None, None)) != 0: return False, f"nvrtcCreateProgram: {rc}"
  opts = [f"--gpu-architecture={arch if cubin else arch.replace('sm_', 'compute_')}", f"-I{os.environ.get('CUDA_PATH', '/usr/local/cuda')}/include",
          "--minimal"] + (["-Xptxas=-v"] if verbose else [])
  rc = nvrtc.nvrtcCompileProgram(prog, len(opts), to_char_p_p([o.encode() for o in opts]))
  nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n := ctypes.c_size_t()))
  nvrtc.nvrtcGetProgramLog(prog, log := ctypes.create_string_buffer(n.value))
  if rc == 0:   # a CUBIN (or PTX) comes out
    (nvrtc.nvrtcGetCUBINSize if cubin else nvrtc.nvrtcGetPTXSize)(prog, ctypes.byref(size := ctypes.c_size_t()))
    rc = 0 if size.value > 0 else -1
  nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
  return rc == 0, log.value.decode(errors="replace")

def ptxas_info(log:str) -> dict:
  """registers, stack frame, spill stores/loads and shared memory (bytes) from ptxas' -v lines"""
  g = lambda pat: int(m.group(1)) if (m := re.search(pat, log)) else 0
  return {"registers": g(r"Used (\d+) registers"), "stack": g(r"(\d+) bytes stack frame"), "spill_stores": g(r"(\d+) bytes spill stores"),
          "spill_loads": g(r"(\d+) bytes spill loads"), "smem": g(r"(\d+) bytes smem")}

# ---------------------------------------------------------------- the pytest plugin
_seen: set = set()
_pending: list = []

def pytest_configure(config):
  from tinygrad.fork_line import LINE_012
  if LINE_012: raise pytest.UsageError("cuda_check reads 0.14's codegen (do_to_program, CALLs): make check-cuda is the default line's")
  setup_env()
  import tinygrad.engine.realize as realize
  from tinygrad.uop.ops import Ops
  orig = realize._get_call_to_compile
  def recording(c):
    if (r := orig(c)) is not None and r[0].op is Ops.SINK and r[0].key not in _seen: _seen.add(r[0].key); _pending.append(r[0])
    return r
  realize._get_call_to_compile = recording

_sources: set = set()
_hand_built: list = []
def check_pending() -> list[str]:
  from tinygrad.uop.ops import Ops
  from tinygrad.renderer.cstyle import CUDARenderer
  errors = []
  while _pending:
    ast = _pending.pop()
    # an op no Tensor method makes, which a test built by hand for the renderers that have code for it (test_jvp's raw FDIV)
    if (missing := {u.op for u in ast.toposort() if u.op is Ops.FDIV} - set(CUDARenderer.code_for_op)): _hand_built.append(missing); continue
    for arch in ARCHS:
      try: name, _, _, src = cuda_source(ast, arch)
      except Exception as e: errors.append(f"rendering for {arch}: {type(e).__name__}: {e}"); continue
      if (src, arch) in _sources: continue   # another AST (other buffers, other metadata), the same kernel
      _sources.add((src, arch))
      # the last arch to a CUBIN (ptxas runs), the others to PTX: ptxas rarely rejects what the front end took, and each CUBIN costs
      ok, log = nvrtc_compile(src, arch, cubin=arch == ARCHS[-1])
      if not ok: errors.append(f"{name} for {arch} does not compile:\n{log}\n{src}")
  return errors

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
  res = yield
  if errors := check_pending(): raise AssertionError("nvrtc: " + "\n\n".join(errors))
  return res

_workers: list = []
def pytest_sessionfinish(session):
  if hasattr(session.config, "workeroutput"):   # an xdist worker's counts
    session.config.workeroutput["cuda_check"] = (len(_sources), len(_hand_built))
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error): _workers.append(getattr(node, "workeroutput", {}).get("cuda_check", (0, 0)))
def pytest_terminal_summary(terminalreporter):
  n, hand = len(_sources) + sum(w[0] for w in _workers), len(_hand_built) + sum(w[1] for w in _workers)
  terminalreporter.write_line(f"cuda_check: {n} kernel sources (distinct in each process) compiled by nvrtc for {', '.join(ARCHS)} (to PTX, "
                              f"for {ARCHS[-1]} to a CUBIN); {hand} left out: a raw FDIV a test built, which the CUDA renderer has no code for")

# ---------------------------------------------------------------- the register table
def bench_kernels() -> list[tuple[str, str, object]]:
  """(workload, vmap or hand, kernel AST) of every kernel of bench/RESULTS-gpu.md's eager rows, at the GPU table's N"""
  sys.path[:0] = [str(ROOT/"bench"), str(ROOT)]
  import numpy as np
  from workloads import WORKLOADS
  from tinygrad import Tensor, vmap
  from tinygrad.dtype import _from_np_dtype
  from tinygrad.uop.ops import Ops
  out = []
  for name, w in WORKLOADS.items():
    args = w.inputs(w.size(False) * 10, np.random.default_rng(0))   # bench/run.py's GPU_SCALE
    ts = [Tensor.empty(*a.shape, dtype=_from_np_dtype(a.dtype)) if a.ndim else Tensor(a) for a in args]
    for impl in ("vmap", "hand"):
      res = w.tg_vmap(vmap, w.tg)(*ts) if impl == "vmap" else w.tg_hand(*ts)
      linear, _ = Tensor.linear_with_vars(*(res if isinstance(res, tuple) else (res,)))
      out += [(name, impl, c.src[0]) for c in linear.src if c.src[0].op is Ops.SINK]
  return out

def table() -> tuple[str, list[str]]:
  """the markdown table, and the names of the kernels that spill"""
  spills = []
  rows = ["| workload | impl | kernel | arch | global x local | registers | spill stores / loads (bytes) | stack (bytes) | shared (bytes) |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for w, impl, ast in bench_kernels():
    for arch in ARCHS:
      name, gs, ls, src = cuda_source(ast, arch)
      ok, log = nvrtc_compile(src, arch, verbose=True)
      if not ok: raise RuntimeError(f"{w} {impl} {name} for {arch} does not compile:\n{log}")
      i = ptxas_info(log)
      if i["spill_stores"] or i["spill_loads"]: spills.append(name)
      rows.append(f"| {w} | {impl} | `{name}` | {arch} | {gs} x {ls} | {i['registers']} | "
                  f"{i['spill_stores']} / {i['spill_loads']} | {i['stack']} | {i['smem']} |")
  return "\n".join(rows), spills

HEADER = """# Registers and spills of the GPU table's kernels (ptxas, no card)

`make check-cuda` (`python3 tools/cuda_check.py table --write`): every kernel of bench/RESULTS-gpu.md's eager rows (W1-W6, vmap and
hand-batched, at the GPU table's N) rendered by tinygrad's CUDA renderer with its heuristics and compiled to a CUBIN by NVRTC {ver}
(pip's nvidia-cuda-nvrtc-cu12), ptxas' `-v` report per arch. A kernel that spills is named in bench/analysis-gpu.md with its cause.
Registers are per thread; an H100/H200 SM has 64K of them, so a block of 256 threads at 128 registers still fits two blocks an SM.

"""

if __name__ == "__main__":
  setup_env()
  os.environ.setdefault("DEV", "CPU")
  if sys.argv[1:2] != ["table"]: sys.exit(__doc__)
  from tinygrad.runtime.autogen import nvrtc
  nvrtc.nvrtcVersion(ctypes.byref(major := ctypes.c_int()), ctypes.byref(minor := ctypes.c_int()))
  rows, spills = table()
  text = HEADER.format(ver=f"{major.value}.{minor.value}") + rows + "\n"
  if "--write" in sys.argv: (ROOT/"bench"/"RESULTS-cuda-regs.md").write_text(text)
  print(text)
  analysis = (ROOT/"bench"/"analysis-gpu.md").read_text()
  if unnamed := sorted({k for k in spills if k not in analysis}):
    sys.exit(f"cuda_check: these kernels spill and bench/analysis-gpu.md does not name them (say why there): {', '.join(unnamed)}")
  print(f"cuda_check: {len(set(spills))} spilling kernels, each named in bench/analysis-gpu.md")
