"""On an upstream line, the tests of what that line lacks (0.14 has no OUTER range, the 0.12 line's idioms and implementation tests)
skip with the reason docs/internals.md gives in its table of that line ("## The VERSION line"): the table is the one list, so no test
is skipped without a line there saying why. A line without a table (0.12.0) runs every test; its own tests of what only 0.14 has skip
where they are, naming tinygrad.fork_line's LINE_012."""
import os, re, sys
from pathlib import Path
import pytest

# the program cache (codegen/program_cache.py) keys a kernel by what the codegen reads, not by a test's mock of a codegen function (the CPU
# tests force each ISA so): tests build every kernel, unless they ask for the cache (test_first_call_cpu.py's TestProgramCache does). On by
# default, it is off while pytest runs a test anyway (PYTEST_CURRENT_TEST); this covers kernels a module builds as it is collected too
os.environ.setdefault("PROGRAM_CACHE", "0")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/"tools"))
import fork  # noqa: E402

def not_yet(line:str) -> dict[str, str]:
  """{test file or node id: why} from the table under docs/internals.md's "## The {line} line" (none for a line without one)"""
  text = (ROOT/"docs"/"internals.md").read_text()
  if (m := re.search(rf"^## The {re.escape(line)} line\n(.*?)(?=^## |\Z)", text, re.M | re.S)) is None: return {}
  return {r.group(1).strip(): r.group(2).strip() for r in re.finditer(r"^\| (test/[^|]+?) \| (.+) \|$", m.group(1), re.M)}

NOT_YET = not_yet(fork.upstream_line(ROOT))

class NotYetModule(pytest.Module):
  """a test file the table names: skipped whole, before its imports (they need what is not ported)"""
  def _getobj(self): raise pytest.skip.Exception(f"not on tinygrad {fork.upstream_line(ROOT)}: {self.reason}", allow_module_level=True)

def pytest_pycollect_makemodule(module_path, parent):
  if (why := NOT_YET.get(str(Path(module_path).relative_to(ROOT)))) is not None:
    (mod := NotYetModule.from_parent(parent, path=Path(module_path))).reason = why
    return mod
  return None

def pytest_collection_modifyitems(config, items):
  for item in items:
    # a row names a test, or a class (every test in it)
    parts = [str(Path(item.path).relative_to(ROOT))] + item.nodeid.split("::")[1:]
    if (why := next((NOT_YET[k] for i in range(len(parts), 1, -1) if (k:="::".join(parts[:i])) in NOT_YET), None)) is not None:
      item.add_marker(pytest.mark.skip(reason=f"not on tinygrad {fork.upstream_line(ROOT)}: {why}"))
