"""The CUDA backend's kernels without a GPU: the CUDA renderer renders source on any machine and its heuristics (local sizes, GROUP,
upcasts, tensor cores) are the renderer's, so what becomes a kernel on an NVIDIA GPU is tested here; PYTHON=1 EMULATE=CUDA runs such
kernels in the emulator. Only timings need the card (make test-gpu, tools/gpu_check.sh)."""
import json, os, re, subprocess, sys, unittest
from dataclasses import dataclass
from math import prod
from pathlib import Path
import numpy as np
from tinygrad import Tensor, vmap
from tinygrad.renderer.cstyle import CUDARenderer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/"bench"))
from workloads import WORKLOADS  # noqa: E402
from fork_topics import skip_unless  # noqa: E402

from tinygrad.fork_line import LINE_012   # tinygrad 0.12: a schedule of ExecItems; 0.14: a LINEAR of CALLs

@dataclass(frozen=True)
class Kernel:
  global_size: tuple
  local_size: tuple
  applied_opts: tuple
  src: str
  fills_constant: bool = False   # a kernel with no input: 0.14's full_like, a buffer of its own

def cuda_kernels(*outs:Tensor) -> list[Kernel]:
  """each kernel of the schedule as the CUDA renderer (sm_80) builds it: launch dims, the heuristic's opts, the source"""
  if LINE_012:
    from tinygrad.codegen import get_program
    ps = [get_program(si.ast, CUDARenderer("sm_80")) for si in Tensor.schedule(*outs) if si.ast.op.name == "SINK"]
    return [Kernel(tuple(p.global_size), tuple(p.local_size or ()), tuple(p.applied_opts), p.src) for p in ps]
  from tinygrad.helpers import Target
  from tinygrad.uop.ops import Ops
  from tinygrad.renderer import Compiler
  from tinygrad.codegen import do_to_program
  class SourceOnly(Compiler):
    def compile(self, src:str) -> bytes: return src.encode()
  class CUDASourceRenderer(CUDARenderer):
    """0.14's CUDA renderer loads nvrtc to compile: this one renders the same source and keeps it"""
    def __init__(self):
      from tinygrad.codegen.opt import tc
      super(CUDARenderer, self).__init__(Target("CUDA", "CUDA", "sm_80"))
      self.compiler, self.tensor_cores = SourceOnly(), tc.get_cuda("sm_80")
  ren, (linear, _) = CUDASourceRenderer(), Tensor.linear_with_vars(*outs)
  ps = [do_to_program(c.src[0], ren) for c in linear.src if c.src[0].op is Ops.SINK]
  return [Kernel(tuple(p.arg.global_size), tuple(p.arg.local_size or ()), next(u.arg.applied_opts for u in p.src if u.op is Ops.SINK),
                 next(u.arg for u in p.src if u.op is Ops.SOURCE), len(p.arg.globals) == 1) for p in ps]

def workload_kernels(name:str, batched:bool) -> list:
  w = WORKLOADS[name]
  args = w.inputs(w.size(True), np.random.default_rng(0))
  grad = w.extra.get("requires_grad", ())
  ts = [Tensor(a, **({"requires_grad": True if i in grad else None} if LINE_012 else {})).realize() for i, a in enumerate(args)]
  out = w.tg_vmap(vmap, w.tg)(*ts) if batched else w.tg_hand(*ts)
  return cuda_kernels(*(out if isinstance(out, tuple) else (out,)))

def emulated_row_reduce(rows:int, setup:str="") -> tuple[float, list[str]]:
  """PYTHON=1 EMULATE=CUDA: the CUDA renderer's kernel choices for a vmapped row reduce, executed by the emulator: its max error against
  numpy, and the opts its kernel was built with"""
  all_opts = ("[o for r in method_cache.values() for o in r.p.applied_opts]" if LINE_012 else
              "[o for p in to_program_cache.values() for u in p.src if u.op is Ops.SINK for o in u.arg.applied_opts]")
  cache = "from tinygrad.engine.realize import method_cache" if LINE_012 else "from tinygrad.codegen import to_program_cache\nfrom tinygrad.uop.ops import Ops"
  code = (f"import json, numpy as np\n{setup}\nfrom tinygrad import Tensor, vmap\n{cache}\n"
          f"x = np.random.default_rng(1).standard_normal(({rows}, 40)).astype(np.float32)\n"
          "got = vmap(lambda r: (r * r).sum() * 2 + r.max())(Tensor(x)).numpy()\n"
          f"opts = sorted({{f'{{o.op.name}} {{o.axis}} {{o.arg}}' for o in {all_opts}}})\n"
          "print(json.dumps([float(np.abs(got - ((x.astype(np.float64)**2).sum(1)*2 + x.max(1))).max()), opts]))")
  env = {k:v for k,v in os.environ.items() if k not in {"CPU", "CL", "METAL", "CUDA", "AMD", "NV", "LLVM", "DEBUG", "DEV"}}
  emulate = {"PYTHON": "1", "EMULATE": "CUDA"} if LINE_012 else {"DEV": "PYTHON::sm_80"}   # 0.14 names the emulated target in DEV
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**env, **emulate, "PYTHONPATH": str(ROOT)})
  assert r.returncode == 0, r.stderr
  err, opts = json.loads(r.stdout.strip().splitlines()[-1])
  return err, opts

class TestCUDAKernels(unittest.TestCase):
  def test_vmap_kernels_are_the_hand_batched_ones(self):
    # the bench's workloads under CUDA's heuristics: vmap gives the hand-batched expression's kernels, the same launch dims and opts
    # (on 0.12 W5's two upcasts come in the other order). On 0.14 a batch that is a PERMUTE of elementwise ops is computed permuted, as
    # the hand-batched expression is: W6's weight gradients were written transposed, rows of 16 not 32 (261 against 77 us on an H200).
    # 0.14's full_like is a buffer filled by a kernel of its own: hand-batched W4 makes three, which vmap reads as the constants they are
    for name in WORKLOADS:
      with self.subTest(workload=name):
        v, h = workload_kernels(name, True), [k for k in workload_kernels(name, False) if not k.fills_constant]
        self.assertEqual(len(v), len(h))
        for pv, ph in zip(v, h):
          self.assertEqual((pv.global_size, pv.local_size), (ph.global_size, ph.local_size))
          self.assertEqual(sorted(map(str, pv.applied_opts)), sorted(map(str, ph.applied_opts)))

  def test_batch_axis_is_the_grid(self):
    # a vmapped row reduce: the batch is the launch grid (global x local covers every example), no loop over examples in the kernel
    p = cuda_kernels(vmap(lambda r: (r * r).sum() * 2 + r.max())(Tensor.empty(4096, 64)))
    self.assertEqual(len(p), 1)
    self.assertIn('extern "C" __global__', p[0].src)
    # the only loops are over a row's 64 numbers (or a GROUP's share of them): the 4096 examples are blocks and threads
    self.assertLessEqual(max(int(n) for n in re.findall(r"for \(int \w+ = 0; \w+ < (\d+);", p[0].src)), 64)
    self.assertGreaterEqual(prod(p[0].global_size) * prod(p[0].local_size), 4096 // 4)   # at most 4 rows a thread (UPCAST 4)

  def test_runs_on_the_emulator_with_cuda_heuristics(self): self.assertLess(emulated_row_reduce(96)[0], 1e-3)

@skip_unless("gpu-heuristics")
class TestGPURowReduce(unittest.TestCase):
  """heuristic_gpu.gpu_row_reduce: many short rows reduced take a thread a row, 32 rows a block, 16-byte loads (timed on an H200:
  bench/RESULTS-gpu.md); fewer rows or long ones keep upstream's MATVEC/GROUPTOP"""
  def opts(self, x:Tensor, fn, in_axes=0) -> list[str]:
    (p,) = cuda_kernels(vmap(fn, in_axes=in_axes)(x))
    return [f"{o.op.name} {o.axis} {o.arg}" for o in p.applied_opts]

  def test_many_short_rows(self):
    # bench W1 at the GPU table's N: a sum and a max, each its own reduce range over the row, both read as float4
    self.assertEqual(self.opts(Tensor.empty(1 << 20, 64), lambda r: (r * r).sum() * 2 + r.max()), ["LOCAL 0 32", "UNROLL 0 4", "UNROLL 1 4"])

  def test_few_rows_keep_matvec(self):
    self.assertEqual(self.opts(Tensor.empty(4096, 64), lambda r: (r * r).sum()), ["GROUP 0 8", "LOCAL 0 4", "UPCAST 0 4"])

  def test_long_rows_keep_matvec(self):
    self.assertIn("GROUP 0 8", self.opts(Tensor.empty(1 << 17, 512), lambda r: (r * r).sum()))

  def test_strided_rows_keep_the_generic_rules(self):
    # the examples are columns: the reduce runs down one (stride 1 << 17), no vector load to gain
    self.assertNotEqual(self.opts(Tensor.empty(64, 1 << 17), lambda r: (r * r).sum(), in_axes=1), ["LOCAL 0 32", "UNROLL 0 4"])

  def test_emulated(self):
    # the rule's kernel executed (the row count it needs lowered to the emulator's scale): numpy's answer
    err, opts = emulated_row_reduce(128, "import tinygrad.codegen.opt.heuristic_gpu as h; h.ROWS_MIN = 64")
    self.assertEqual(opts, ["LOCAL 0 32", "UNROLL 0 4", "UNROLL 1 4"])   # the rule's kernel, not another path's
    self.assertLess(err, 1e-3)

if __name__ == "__main__":
  unittest.main()
