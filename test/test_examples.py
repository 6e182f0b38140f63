"""The examples run and check themselves against numpy (each exits non-zero on a mismatch)."""
import os, re, subprocess, sys, unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

class TestExamples(unittest.TestCase):
  def run_example(self, name:str, **env) -> str:
    r = subprocess.run([sys.executable, str(ROOT/"examples"/name)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH":str(ROOT), "CPU":"1", **env})
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    return r.stdout

  def test_quickstart(self):
    out = self.run_example("quickstart.py")
    self.assertIn("PASS", out)
    self.assertRegex(out, r"for \(int \w+ = 0; \w+ < 1000; \w+\+\+\)")

  def test_nearest_neighbors(self):
    out = self.run_example("nearest_neighbors.py")
    self.assertIn("PASS", out)
    self.assertRegex(out, r"kernels per call: (\d+) for 10 queries, \1 for 2000")

  def test_bicycle_jacobian(self):
    out = self.run_example("bicycle_jacobian.py")
    self.assertTrue(out.rstrip().endswith("PASS"), out)
    # the kernel count doesn't grow with the trajectory
    self.assertEqual(len(set(re.findall(r"(\d+) kernels", out))), 1, out)

  def test_debug_rangeify(self):
    out = self.run_example("debug_rangeify.py", DEBUG_RANGEIFY="1")
    self.assertIn("Ops.VMAPOUT", out)
    self.assertTrue(out.rstrip().endswith("PASS"), out[-300:])

if __name__ == "__main__":
  unittest.main()
