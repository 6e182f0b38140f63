"""The batch axis on a GPU-style backend: on tinygrad's PYTHON device (a GPU emulator with global and local sizes) a one-kernel vmap gets
the batch as parallel axes of its kernel, exactly like the hand-batched expression. `make test` also runs the vmap test files on it."""
import json, os, subprocess, sys, unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/"tools"))
import fork  # noqa: E402

def emulator_env() -> dict[str, str]:
  """how this upstream line picks the PYTHON emulator (PYTHON=1 on 0.12, DEV=PYTHON on 0.14: pyproject's emulator_env)"""
  return dict(fork.pin(ROOT)["emulator_env"])

LAUNCH_DIMS = """
import json, numpy as np
from tinygrad import Tensor, vmap
from tinygrad.fork_line import LINE_012
x = Tensor(np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)).realize()
def dims(y):
  if LINE_012:   # tinygrad 0.12
    sched = y.schedule()
    p = sched[-1].lower().prg.p
    return {"kernels": len(sched), "global": list(p.global_size), "local": list(p.local_size), "loops": p.src.count("for (")}
  from tinygrad.uop.ops import Ops                 # 0.14: the compiled schedule's PROGRAMs
  from tinygrad.engine.realize import compile_linear
  progs = [u for u in compile_linear(y.schedule_linear()).toposort() if u.op is Ops.PROGRAM]
  p, src = progs[-1], next(s.arg for s in progs[-1].src if s.op is Ops.SOURCE)
  return {"kernels": len(progs), "global": list(p.arg.global_size), "local": list(p.arg.local_size or ()), "loops": src.count("for (")}
print(json.dumps({"vmap": dims(vmap(lambda e: (e*2).sum().exp())(x)), "hand": dims((x*2).sum(1).exp())}))
"""

class TestGPUStyleBackend(unittest.TestCase):
  def test_batch_axis_is_parallel(self):
    # tinygrad writes the device it picked into os.environ (CPU=1): the child must see PYTHON alone
    env = {k:v for k,v in os.environ.items() if k not in {"CPU", "CL", "METAL", "CUDA", "AMD", "NV", "LLVM", "DEBUG", "DEV"}}
    r = subprocess.run([sys.executable, "-c", LAUNCH_DIMS], capture_output=True, text=True, cwd=ROOT,
                       env={**env, **emulator_env(), "PYTHONPATH": str(ROOT)})
    self.assertEqual(r.returncode, 0, r.stderr)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    self.assertEqual(got["vmap"], got["hand"])
    self.assertEqual(got["vmap"]["kernels"], 1)
    # one workgroup per example (the 16 numbers of an example are its local threads, reduced together), and no loop in the kernel
    self.assertEqual(got["vmap"]["global"][0], 64)
    self.assertEqual(got["vmap"]["loops"], 0)

if __name__ == "__main__":
  unittest.main()
