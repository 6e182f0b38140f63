"""The benchmark harness runs: `make bench QUICK=1`'s smoke run (bench/run.py --quick) exits 0, lists every workload, and every output
matched numpy. Performance is never asserted here: bench/RESULTS.md holds the measurements."""
import os, subprocess, sys, unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/"bench"))
from workloads import WORKLOADS  # noqa: E402
from vmap_oracle import LINE_012  # noqa: E402

def quick(*args:str) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  env.pop("DEBUG", None)
  return subprocess.run([sys.executable, str(ROOT/"bench"/"run.py"), "--quick", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=240)

class TestBenchQuick(unittest.TestCase):
  def test_quick_run(self):
    # what `make bench QUICK=1` runs: every row of every workload, small N, outputs checked against numpy
    p = quick()
    self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
    self.assertIn("PASS: every row ran", p.stdout)
    for w in WORKLOADS:
      self.assertRegex(p.stdout, rf"\| {w} \| tinygrad vmap \(eager\) \|.*\| ok \|", f"{w} missing from the table")
      self.assertRegex(p.stdout, rf"\| {w} \| tinygrad vmap \(TinyJit\) \|.*\| ok \|")
    self.assertIn("workloads: " + ", ".join(WORKLOADS), p.stdout)

  def smoke(self, script:str) -> str:
    """a bench script's --quick run (what `make bench QUICK=1` runs): exits 0 and ends in PASS; its stdout"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DEBUG", None)
    p = subprocess.run([sys.executable, str(ROOT/"bench"/script), "--quick"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
    self.assertTrue(p.stdout.rstrip().endswith("PASS"), p.stdout[-2000:])
    return p.stdout

  def test_w7_quick_run(self):
    # W7's smoke run: the trajectory optimizer's iteration in tinygrad (and JAX, torch where installed) timed small, each checked
    # against the numpy iLQR of test/test_trajopt.py
    out = self.smoke("w7_trajopt.py")
    self.assertRegex(out, r"tinygrad TinyJit .* ms per iteration, first call .* ms, \d+ kernels")
    self.assertRegex(out, r"tinygrad float64 problem 2: final cost")

  def test_w8_quick_run(self):
    # W8's smoke run: examples/mpc.py's closed loop per control period in tinygrad (and JAX, torch where installed) timed small, each
    # framework's closed loop checked against numpy's
    if LINE_012: self.skipTest("W8 runs examples/mpc.py, which needs scan (tinygrad 0.14)")
    out = self.smoke("w8_mpc.py")
    self.assertRegex(out, r"tinygrad TinyJit .* median .* ms, worst .* ms per period \(8 periods\), first call .* ms, 51 kernels")
    self.assertRegex(out, r"tinygrad: applied controls err max")

  def test_gpu_table_tried_on_the_cpu(self):
    # the GPU table's code path (--device: every row on one device, batches 10x, BEAM=2's own row), tried out on the CPU device
    p = quick("--device", "CPU", "--only", "W3", "--impls", "vmap_jit,hand_jit,jax", "--without", "jax,torch")
    self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
    n = WORKLOADS["W3"].size(True) * 10
    self.assertRegex(p.stdout, rf"\| W3 \| tinygrad vmap \(TinyJit\) \| {n} \|.*\| ok \|")
    self.assertRegex(p.stdout, rf"\| W3 \| jax.jit\(jax.vmap\(f\)\) \| {n} \|.*skipped: jax is not installed")

  def test_skips_frameworks_that_are_missing(self):
    # CI's `make test` installs neither jax nor torch: their rows are skipped with the reason, and the run still passes
    p = quick("--only", "W1", "--impls", "hand,numpy,jax,torch", "--no-scaling", "--without", "jax,torch")
    self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
    self.assertIn("skipping the jax rows: jax is not installed", p.stdout)
    self.assertRegex(p.stdout, r"\| W1 \| torch\.func\.vmap\(f\) \|.*\| skipped: torch is not installed \|")

class TestBenchSource(unittest.TestCase):
  def test_source_without_pythonpath(self):
    # `python bench/run.py --source W3` from a fresh clone, as its help says: the kernel source of vmap and hand-batched tinygrad
    env = {k:v for k,v in os.environ.items() if k not in ("PYTHONPATH", "DEBUG")}
    p = subprocess.run([sys.executable, str(ROOT/"bench"/"run.py"), "--source", "W3", "--n", "100"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=240)
    self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
    self.assertIn("W3 vmap: 1 kernel(s)", p.stdout)
    self.assertIn("W3 hand: 1 kernel(s)", p.stdout)

if __name__ == "__main__":
  unittest.main()
