"""The first-call topic on the 0.14 line: what a process's first CPU kernels no longer pay for. The CPU device builds its worker's own
programs (their codegen and clang, ~0.25-0.45 s a process) when a worker or a command buffer first needs them, never for kernels launched
from Python, and imports its NIR renderer only when it is asked for; and a compile of several kernels with PARALLEL=1 (NUM_CPU_THREADS=1, or as many xdist workers as cores) runs in this
process instead of in a pool of one worker process, which imports tinygrad before it compiles anything. Results against numpy. The 0.12
line's first-call tests: test_first_call.py, test_cpu_codegen.py."""
from fork_topics import skip_module_unless
skip_module_unless('first-call')
import os, subprocess, sys, unittest, unittest.mock
from pathlib import Path
import numpy as np
from tinygrad import Tensor, Device
from tinygrad.helpers import Context
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("the 0.14 line's first-call: 0.12's CPU device has no programs of its own and its compile no pool")

ROOT = Path(__file__).resolve().parent.parent

def run_fresh(code:str, last:int=1) -> str:
  """the last words of code's output, run in a new process on the CPU device (this one's may have built its programs for an earlier test)"""
  env = {**os.environ, "DEV": "CPU", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT/'test'}"}
  return " ".join(subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()[-last:])

AGAINST_NUMPY = """
import numpy as np
from tinygrad import Tensor, TinyJit, Device
from tinygrad.helpers import Context
x, w = np.random.default_rng(3).standard_normal((2, 33)).astype(np.float32)
"""

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU device's worker programs")
class TestCPUWorkerProgramsLazy(unittest.TestCase):
  def test_kernels_from_python_build_none(self):
    code = AGAINST_NUMPY + """
np.testing.assert_allclose(((Tensor(x) * Tensor(w)).relu() + 1).numpy(), np.maximum(x * w, 0) + 1, rtol=1e-6)
print("prgs" in Device["CPU"].__dict__)"""
    self.assertEqual(run_fresh(code), "False")

  def test_kernels_from_python_import_no_nir_renderer(self):
    # the CPU device's LVP renderer (mesa's NIR) is imported when DEV=CPU:LVP asks for it: its import cost ~70 ms of every first call
    code = AGAINST_NUMPY + """
import sys
np.testing.assert_allclose((Tensor(x) - Tensor(w)).exp().numpy(), np.exp(x - w), rtol=1e-6)
print("tinygrad.renderer.nir" in sys.modules, "LVP" in [Device["CPU"]._renderer_name(r) for r in Device["CPU"].renderers])"""
    self.assertEqual(run_fresh(code, last=2), "False True")

  def test_a_command_buffer_builds_them(self):
    # a TinyJit capture of JIT_CPU_GRAPH kernels or more replays as one command buffer, which the CPU worker runs
    code = AGAINST_NUMPY + """
@TinyJit
def chain(a, b):
  for i in range(70): a = (a * b + i / 70).contiguous()
  return a
with Context(JIT_CPU_GRAPH=64):
  for _ in range(3): out = chain(Tensor(x), Tensor(w)).numpy()
want = x.astype(np.float64)
for i in range(70): want = want * w + i / 70
np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
print("prgs" in Device["CPU"].__dict__)"""
    self.assertEqual(run_fresh(code), "True")

def two_new_kernels(rng:np.random.Generator) -> tuple[Tensor, np.ndarray]:
  """a schedule of two kernels no earlier test compiled (constants of their own), and what numpy gets"""
  x, c = rng.standard_normal((16, 8)).astype(np.float32), float(rng.uniform(1, 2))
  return ((Tensor(x) * c).contiguous().sum(0) + c), (x * c).sum(0) + c

class TestCompilePool(unittest.TestCase):
  def test_one_worker_compiles_here(self):
    t, want = two_new_kernels(np.random.default_rng(11))
    with Context(PARALLEL=1), unittest.mock.patch("tinygrad.engine.realize.get_worker_pool", side_effect=AssertionError("a pool")):
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-5)

  def test_two_workers_ask_for_the_pool(self):
    # the pool, mocked as absent (compile here): the same schedule with PARALLEL=2 does ask for it, so the test above compiles two at once
    t, want = two_new_kernels(np.random.default_rng(12))
    with Context(PARALLEL=2), unittest.mock.patch("tinygrad.engine.realize.get_worker_pool", return_value=None) as pool:
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-5)
    pool.assert_called_once()

if __name__ == "__main__":
  unittest.main()
