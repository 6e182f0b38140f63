#!/usr/bin/env python3
"""Run upstream tinygrad's own test suite (the pinned sdist's test/*.py) and compare it with vanilla upstream of the same line.

  upstream_suite.py baseline [--runs N]   run the suite N times (default 2) on pristine upstream, record test/upstream/vanilla-VERSION.json
  upstream_suite.py check                 run the suite on the fork; fail on failures that vanilla does not have
The suite is the sdist's test/*.py, plus the files of an older line's sdist that the line's `older_tests` in pyproject.toml names.
The line is the fork tool's: pyproject.toml's default, or UPSTREAM=<version>.

Outcomes depend a little on which tests share an xdist worker, so the baseline keeps tests whose outcome varied between vanilla runs
in a flaky list: the comparison reports them but does not fail on them. Tests are spread over the workers one by one (`--dist load`,
as upstream's own CI runs them): by file, test_ops.py's ~430 tests kept one of the two workers busy while the other idled (0.14's suite
388-467 s by file, 285 s by test, the same outcomes).
"""
import json, os, shutil, subprocess, sys, tempfile, time, xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
import fork

ROOT = fork.ROOT
LINE = fork.upstream_line(ROOT)
BASELINE = ROOT/"test"/"upstream"/f"vanilla-{LINE}.json"
BAD = {"failed", "error"}
TIMEOUT = 40*60  # about 4 minutes is usual on 2 cores
# not run: they fail on this machine in vanilla too (clang 14 has no __bf16 on x86), but only after minutes of hypothesis examples
DESELECT = ["test/test_dtype_alu.py::TestDTypeALU::test_bfloat16", "test/test_dtype_alu.py::TestDTypeALU::test_bfloat16_unary"]

def run_suite(pkg_parent:Path) -> dict[str, str]:
  """run the sdist's test/*.py against the tinygrad/ in pkg_parent, return {test id: outcome}"""
  sdist = fork.sdist(ROOT)
  with tempfile.TemporaryDirectory() as tmp:
    # a run dir with upstream's tests and pytest config, and an import path with nothing but the tinygrad/ under test in it
    shutil.copytree(sdist/"test", Path(tmp)/"test")
    shutil.copy(sdist/"pyproject.toml", tmp)
    # a line whose sdist ships few tests takes test files of an older line's sdist, made to import by a shim conftest (pyproject.toml)
    if (older:=fork.pin(ROOT).get("older_tests")) is not None:
      older_sdist = fork.sdist(ROOT, older["line"])
      for f in older["files"]: shutil.copy(older_sdist/f, Path(tmp)/f)
      shutil.copy(ROOT/older["shim"], Path(tmp)/"test"/"conftest.py")
    (Path(tmp)/"path").mkdir()
    (Path(tmp)/"path"/"tinygrad").symlink_to(pkg_parent/"tinygrad")
    env = {**{k:v for k,v in os.environ.items() if k not in ("CPU", "DEV")}, "PYTHONPATH":str(Path(tmp)/"path"), **fork.pin(ROOT)["cpu_env"],
           "PYTHONDONTWRITEBYTECODE":"1"}
    # a timeout must fail the test, not kill the xdist worker (upstream's thread method does os._exit, and xdist then hangs)
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "load", "-v", "-p", "no:cacheprovider", "--junitxml", "junit.xml",
           "-o", "timeout_method=signal", *[f"--deselect={t}" for t in DESELECT],
           *sorted(str(p.relative_to(tmp)) for p in (Path(tmp)/"test").glob("test_*.py"))]
    print(f"upstream suite {LINE}: tinygrad from {pkg_parent}", flush=True)
    st = time.perf_counter()
    log = fork.cache_dir(ROOT)/f"upstream-suite-{pkg_parent.name}.log"
    try:
      with open(log, "w") as f: subprocess.run(cmd, cwd=tmp, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    except subprocess.TimeoutExpired: sys.exit(f"upstream suite: no result after {TIMEOUT} s (a hung xdist worker?), see {log}")
    print(f"upstream suite: ran in {time.perf_counter()-st:.0f} s, pytest's output is in {log}", flush=True)
    return outcomes(ET.parse(Path(tmp)/"junit.xml"))

def outcomes(tree:ET.ElementTree) -> dict[str, str]:
  ret = {}
  for tc in tree.iter("testcase"):
    tid = f"{tc.get('classname')}::{tc.get('name')}"
    kinds = {c.tag:c for c in tc}
    if "failure" in kinds: ret[tid] = "failed"
    elif "error" in kinds: ret[tid] = "error"
    elif "skipped" in kinds: ret[tid] = "xfailed" if kinds["skipped"].get("type") == "pytest.xfail" else "skipped"
    else: ret[tid] = "passed"
  return ret

def counts(res:dict[str, str]) -> str:
  # key=value, not pytest's "N passed, N failed": CI logs are read for that line, and vanilla's failures are expected here
  c = Counter(res.values())
  return " ".join(f"{k}={c[k]}" for k in ("passed", "failed", "error", "skipped", "xfailed"))

def cmd_baseline(runs:int) -> None:
  results = [run_suite(fork.pristine(ROOT)) for _ in range(runs)]
  for i, r in enumerate(results): print(f"vanilla run {i}: {counts(r)}")
  ids = sorted(set().union(*results))
  flaky = [t for t in ids if len({r.get(t, "missing") for r in results}) > 1]
  failing = [t for t in ids if t not in flaky and results[0][t] in BAD]
  BASELINE.parent.mkdir(parents=True, exist_ok=True)
  BASELINE.write_text(json.dumps({"counts":counts(results[0]), "runs":runs, "failing":failing, "flaky":flaky}, indent=1) + "\n")
  print(f"recorded {BASELINE.relative_to(ROOT)}: {len(failing)} failing, {len(flaky)} flaky")

def cmd_check() -> int:
  base = json.loads(BASELINE.read_text())
  res = run_suite(ROOT)
  bad = {t for t, o in res.items() if o in BAD}
  new, flaky = sorted(bad - set(base["failing"]) - set(base["flaky"])), sorted(bad & set(base["flaky"]))
  fixed = sorted(set(base["failing"]) - bad)
  print(f"fork:    {counts(res)}\nvanilla: {base['counts']}  ({len(base['failing'])} failing, {len(base['flaky'])} flaky in {base['runs']} runs)")
  for title, ts in (("flaky in vanilla, failed here (not counted)", flaky), ("failing in vanilla, not failing here", fixed), ("NEW failures", new)):
    if ts: print(f"{title}: {len(ts)}" + "".join(f"\n  {t}" for t in ts))
  if new: return 1
  print(f"upstream suite: no new failures versus vanilla {LINE}")
  return 0

if __name__ == "__main__":
  match sys.argv[1:]:
    case ["baseline"]: cmd_baseline(2)
    case ["baseline", "--runs", n]: cmd_baseline(int(n))
    case ["check"]: sys.exit(cmd_check())
    case _: print(__doc__); sys.exit(2)
