"""The examples run and check themselves against numpy (each exits non-zero on a mismatch)."""
import os, re, subprocess, sys, unittest
from pathlib import Path
from vmap_oracle import LINE_012

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
    # one loop over the batch, inside the kernel: its iterations times the examples each takes are the 1000 examples
    loops = re.findall(r"(\d+) iterations of (\d+) examples", out.split("loops over the batch:")[1].splitlines()[0])
    self.assertEqual([int(n) * int(e) for n, e in loops], [1000])

  def test_nearest_neighbors(self):
    out = self.run_example("nearest_neighbors.py")
    self.assertIn("PASS", out)
    self.assertRegex(out, r"kernels per call: (\d+) for 10 queries, \1 for 2000")

  def test_bicycle_jacobian(self):
    out = self.run_example("bicycle_jacobian.py")
    self.assertTrue(out.rstrip().endswith("PASS"), out)
    # the kernel count doesn't grow with the trajectory
    self.assertEqual(len(set(re.findall(r"(\d+) kernels", out))), 1, out)

  def test_mpc(self):
    out = self.run_example("mpc.py", DEV="CPU")
    if LINE_012: return self.assertIn("needs tinygrad 0.14", out)
    self.assertTrue(out.rstrip().endswith("PASS"), out)
    self.assertRegex(out, r"2 iLQR iterations per control period: 51 kernels per period")
    self.assertRegex(out, r"solve per control period \(TinyJit, \d+ periods after 3\): median [\d.]+ ms, worst [\d.]+ ms")

  def test_debug_rangeify(self):
    out = self.run_example("debug_rangeify.py", DEBUG_RANGEIFY="1")
    self.assertIn("Ops.VMAPOUT", out)
    self.assertTrue(out.rstrip().endswith("PASS"), out[-300:])
    if not LINE_012: return self.check_batched_scopes(re.sub(r"\x1b\[[0-9;]*m", "", out))
    # every realized node of a graph with a scope says why it is realized and which scope RANGEs its buffer gets
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    indexed_again, read_twice = [b for b in out.split("*"*26) if "Ops.VMAPOUT" in b]
    for block in (indexed_again, read_twice):
      self.assertEqual(len(re.findall(r"^\*\*\*.*\n +why: ", block, flags=re.M)), len(re.findall(r"^\*\*\*", block, flags=re.M)), block)
    # a stack of reduces indexed again: the stacked pair is realized; its buffer gets the scope's RANGE: 3 examples x 2, not 2
    self.assertRegex(indexed_again, r"Ops\.ADD .*\n +why: reduce indexed again \(expanded along r\d+ downstream\); "
                                    r"inside scope rm1 -> buffer \[rm1\]\[r\d+\] \(3x2\)")
    self.assertRegex(indexed_again, r"Ops\.VMAPOUT .*\n +why: VMAPOUT of scope rm1; outside any scope -> buffer \[rm1\]\[r0\] \(3x2\)")
    # a flattened stack read twice: flat is read at two indices: multi-consumer, and its buffer holds all 10 examples
    self.assertRegex(read_twice, r"why: multi-consumer: 2 consumers index it differently \(axis 0: 0 vs 1\); "
                                 r"inside scope rm1 -> buffer \[rm1\]\[r\d+\] \(10x9\)")
    self.assertRegex(read_twice, r"Ops\.COPY .*\n +why: always \(COPY\); outside any scope -> buffer \[r\d+\] \(3\)")

  def check_batched_scopes(self, out:str):
    # 0.14: each VMAPOUT prints its scope as batched, a line a node: shape for one example, the scope RANGEs it depends on, batched shape
    indexed_again, read_twice = [b for b in out.split("*"*26) if " vmap scope " in b]
    self.assertRegex(indexed_again, r"^ vmap scope \(rm\d+=3, 0\): 10 nodes batched")
    # the stacked pair of reduces is one example's (2,), (3, 2) over the batch, and the VMAPOUT puts the batch axis at 0
    self.assertRegex(indexed_again, r"Ops\.REDUCE +\(\) +\[rm\d+\] +-> \(3,\)")
    self.assertRegex(indexed_again, r"Ops\.STACK +\(2,\) +\[rm\d+\] +-> \(3, 2\)")
    self.assertRegex(indexed_again, r"Ops\.VMAPOUT +\(2,\) +\(rm\d+=3, 0\) +-> \(3, 2\)")
    # the flattened stack: (9,) for one example, (10, 9) over the batch
    self.assertRegex(read_twice, r"Ops\.RESHAPE +\(9,\) +\[rm\d+\] +-> \(10, 9\)")
    self.assertRegex(read_twice, r"Ops\.VMAPOUT +\(2,\) +\(rm\d+=10, 0\) +-> \(10, 2\)")

if __name__ == "__main__":
  unittest.main()
