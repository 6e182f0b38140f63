#!/usr/bin/env python3
"""Runs files of upstream tinygrad's newer test suite (test/null, test/unit, test/backend of the GitHub repo, which no sdist ships) on
vanilla 0.14.0 and on this fork, and compares outcomes per test id (subtests too). Upstream's files are not in this repo: put them
under SCRATCH/test/{null,unit,backend}/ yourself. This tool lays out the rest of SCRATCH: vanilla 0.14.0 unzipped from the pinned wheel,
a conftest.py with the one shim both trees get (the newer suite writes UOp.const(dtype, value), 0.14.0 UOp.const(value, dtype)), a
test/helpers.py of our own (upstream's stored one is older than 0.14) and empty examples/ and extra/ stubs.
  python3 tools/upstream_newer_suite.py [-n N] SCRATCH [FILE ...]    (FILE relative to SCRATCH; default: every test/*/test_*.py there;
  -n N: pytest-xdist workers per file, 2 at most on a shared machine)
A test that passes on vanilla and fails on the fork is printed as REGRESSION; `make fork` (0.14.0) first."""
import sys, os, glob, zipfile, subprocess, collections, xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFTEST = '''from tinygrad.uop.ops import UOp
from tinygrad.dtype import DType
_orig_const = UOp.const
def _const(b, dtype=None, *args, **kwargs):
  if isinstance(b, DType) and not isinstance(dtype, DType): b, dtype = dtype, b
  return _orig_const(b, dtype, *args, **kwargs)
UOp.const = staticmethod(_const)
'''
HELPERS = '''# not upstream's test/helpers.py: the names the newer suite imports, for 0.14.0
import unittest
import numpy as np
from tinygrad import dtypes
from tinygrad.dtype import DType
def slow(fn): return fn
def needs_second_gpu(fn): return unittest.skip("needs second gpu")(fn)
def not_support_multi_device(): return True
def assert_jit_cache_len(fxn, expected_len):
  if (cap:=getattr(fxn, "captured", None)) is None: assert expected_len == 0, "nothing captured"; return
  cache = cap.jit_cache if hasattr(cap, "jit_cache") else cap.linear.src
  assert len(cache) == expected_len, f"{len(cache)} != {expected_len}"
def call_is_graph(si):
  from tinygrad.uop.ops import Ops
  return si.src[0].op is Ops.CUSTOM_FUNCTION and si.src[0].arg == "graph"
def rand_for_dtype(dt:DType, size:int):
  if dtypes.is_unsigned(dt): return np.random.randint(0, 100, size=size, dtype=dt.np)
  if dtypes.is_int(dt): return np.random.randint(-100, 100, size=size, dtype=dt.np)
  if dt == dtypes.bool: return np.random.choice([True, False], size=size)
  return np.random.uniform(-10, 10, size=size).astype(dt.np)
def full_rewrite(sink, ren=None):
  from tinygrad.codegen import full_rewrite_to_sink
  from tinygrad.renderer import Renderer
  return full_rewrite_to_sink(sink, ren if ren is not None else Renderer(), optimize=False)
'''

def layout(scratch:Path):
  if not (van:=scratch/"vanilla").exists():
    wheel = Path(os.environ.get("FORK_CACHE", ROOT/".cache/upstream"))/"tinygrad-0.14.0-py3-none-any.whl"
    zipfile.ZipFile(wheel).extractall(van)
  for d in ("test", "test/null", "test/unit", "test/backend", "examples", "extra", "extra/models"): (scratch/d).mkdir(parents=True, exist_ok=True)
  for d in ("test", "test/null", "test/unit", "test/backend", "examples", "extra", "extra/models"): (scratch/d/"__init__.py").touch()
  (scratch/"conftest.py").write_text(CONFTEST)
  if not (scratch/"test/helpers.py").exists(): (scratch/"test/helpers.py").write_text(HELPERS)
  for f, name in (("examples/gpt2.py", "Transformer"), ("extra/models/unet.py", "ResBlock")):
    if not (scratch/f).exists(): (scratch/f).write_text(f"{name} = None  # stub\n")

def run(scratch:Path, tree:str, f:str, workers:int=0) -> Path:
  out = scratch/"res"/tree/f.replace("/", "_").removesuffix(".py")
  out.parent.mkdir(parents=True, exist_ok=True)
  env = {**os.environ, "DEV": "CPU", "PYTHONPATH": f"{scratch/'vanilla' if tree == 'vanilla' else ROOT}{os.pathsep}{scratch}"}
  with open(f"{out}.log", "w") as log:
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "timeout", "--timeout", "120", "-q", "-rA", f,
                    "-o", "junit_family=xunit1", f"--junitxml={out}.xml", *(["-n", str(workers)] if workers else [])], cwd=scratch, env=env, stdout=log, stderr=subprocess.STDOUT)
  return out

def outcomes(out:Path) -> dict[str, str]:
  res: dict[str, str] = {}
  if os.path.exists(f"{out}.xml"):
    for tc in ET.parse(f"{out}.xml").getroot().iter("testcase"):
      tags = {c.tag for c in tc}
      res[f"{tc.get('classname')}::{tc.get('name')}"] = "fail" if tags & {"failure", "error"} else "skip" if "skipped" in tags else "pass"
  # junit keeps no record of subtests: the -rA log does
  for k, n in collections.Counter(l.split(" ", 1)[1].strip() for l in open(f"{out}.log") if l.startswith("SUBFAILED")).items():
    res[f"SUBFAILED {k}"] = f"fail x{n}"
  return res

if __name__ == "__main__":
  args, workers = sys.argv[1:], 0
  if args[:1] == ["-n"]: workers, args = int(args[1]), args[2:]
  scratch = Path(args[0]).resolve()
  layout(scratch)
  files = args[1:] or sorted(str(p.relative_to(scratch)) for p in scratch.glob("test/*/test_*.py"))
  tot, regs = {t: collections.Counter() for t in ("vanilla", "fork")}, []
  for f in files:
    van, fork = outcomes(run(scratch, "vanilla", f, workers)), outcomes(run(scratch, "fork", f, workers))
    for t, r in (("vanilla", van), ("fork", fork)): tot[t].update(v.split()[0] for v in r.values())
    nsub = lambda r, k: int(r.get(k, "fail x0").split("x")[1])
    regs += [f"{f} {k}: vanilla pass, fork {fork.get(k, 'missing')}" for k, v in van.items() if v == "pass" and fork.get(k) != "pass"]
    regs += [f"{f} {k}: fork x{nsub(fork, k)}, vanilla x{nsub(van, k)}" for k in fork
             if k.startswith("SUBFAILED") and nsub(fork, k) > nsub(van, k)]
    count = lambda r: dict(collections.Counter(v.split()[0] for v in r.values()))
    print(f"{f}: vanilla {count(van)} fork {count(fork)}")
  print("TOTAL", {t: dict(c) for t, c in tot.items()})
  for r in regs: print("REGRESSION", r)
  sys.exit(1 if regs else 0)
