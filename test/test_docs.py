"""The code blocks of the user docs run, top to bottom in one namespace per page, and check themselves against numpy."""
import re, unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def python_blocks(page:Path) -> list[str]: return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)

class TestDocs(unittest.TestCase):
  def run_page(self, name:str):
    blocks = python_blocks(ROOT/name)
    self.assertTrue(blocks, f"{name} has no python code blocks")
    namespace: dict = {}
    for i, block in enumerate(blocks):
      with self.subTest(block=i): exec(compile(block, f"{name}, python block {i}", "exec"), namespace)

  def test_vmap_guide(self): self.run_page("docs/vmap.md")
  def test_readme(self): self.run_page("README.md")

if __name__ == "__main__":
  unittest.main()
