"""The code blocks of the user docs run, top to bottom in one namespace per page, and check themselves against numpy. A block that starts
with `# line: 0.14.0 only` (what the frozen 0.12.0 line lacks, like scan) is skipped there, saying so."""
import re, unittest
from pathlib import Path
from tinygrad.fork_line import LINE_012

ROOT = Path(__file__).resolve().parent.parent

def python_blocks(page:Path) -> list[str]: return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)

class TestDocs(unittest.TestCase):
  def run_page(self, name:str):
    blocks = python_blocks(ROOT/name)
    self.assertTrue(blocks, f"{name} has no python code blocks")
    namespace: dict = {}
    for i, block in enumerate(blocks):
      with self.subTest(block=i):
        if LINE_012 and block.startswith("# line: 0.14.0 only"): self.skipTest(f"{name}, python block {i}: {block.splitlines()[0][2:]}")
        exec(compile(block, f"{name}, python block {i}", "exec"), namespace)

  def test_vmap_guide(self): self.run_page("docs/vmap.md")
  def test_readme(self): self.run_page("README.md")

if __name__ == "__main__":
  unittest.main()
