"""Which topic patches the materialized tinygrad/ has: `make fork SERIES=vmap` leaves out the CPU performance topics, and the tests of
those topics skip there, saying so (tools/fork.py records the topics it applied)."""
import sys, unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent/"tools"))
import fork  # noqa: E402

def applied(topic:str) -> bool:
  """`a|b`: either is applied (a topic one line keeps whole and the other splits, or names otherwise)"""
  return any(t in fork.applied_topics(fork.ROOT) for t in topic.split("|"))

def missing_topics(*topics:str) -> str|None:
  """why tests of the topics can't run here (one of them isn't applied), or None"""
  if not (missing := [t for t in topics if not applied(t)]): return None
  return (f"tests the {', '.join(t.replace('|', ' or ') for t in missing)} topic patch{'es' if len(missing) > 1 else ''}, which the materialized series "
          f"({fork.materialized_series(fork.ROOT)}) leaves out")

def skip_module_unless(*topics:str) -> None:
  """at the top of a test module, before it imports what the topics add: skip the whole module when one of them isn't applied"""
  if (why := missing_topics(*topics)) is not None: raise unittest.SkipTest(why)

def skip_unless(*topics:str):
  """a test class's decorator: skip it when one of the topics isn't applied (the module's other tests run)"""
  return unittest.skipIf((why := missing_topics(*topics)) is not None, why or "")
