"""Which topic patches the materialized tinygrad/ has: `make fork SERIES=vmap` leaves out the CPU performance topics, and the tests of
those topics skip there, saying so (tools/fork.py records the topics it applied)."""
import sys, unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent/"tools"))
import fork  # noqa: E402

def applied(topic:str) -> bool: return topic in fork.applied_topics(fork.ROOT)

def skip_module_unless(*topics:str) -> None:
  """at the top of a test module, before it imports what the topics add: skip the whole module when one of them isn't applied"""
  if missing := [t for t in topics if not applied(t)]:
    raise unittest.SkipTest(f"tests the {', '.join(missing)} topic patch{'es' if len(missing) > 1 else ''}, which the materialized "
                            f"series ({fork.materialized_series(fork.ROOT)}) leaves out")

def skip_unless(*topics:str):
  """a test class's decorator: skip it when one of the topics isn't applied (the module's other tests run)"""
  missing = [t for t in topics if not applied(t)]
  return unittest.skipIf(bool(missing), f"tests the {', '.join(missing)} topic patch, which the materialized series "
                                        f"({fork.materialized_series(fork.ROOT)}) leaves out")
