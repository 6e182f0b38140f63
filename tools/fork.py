#!/usr/bin/env python3
"""The fork tool: tinygrad-vmap is pristine upstream tinygrad (pinned in pyproject.toml) plus an ordered series of topic patches.
pyproject.toml pins several upstream lines (versions), each with its own series in its own patches dir; a command works on the
default line, or on UPSTREAM=<version> (the environment: make passes its UPSTREAM= through). Below, patches/ is the line's dir.

  fork.py fork [--force] [--series S]  materialize pristine + the series into tinygrad/ (refuses to overwrite edits not exported)
  fork.py patches [--topic T]          export edits under tinygrad/ into the topics they belong to, then rewrite patches/
  fork.py check [--series S]           exit 1 when tinygrad/ and pristine + the series disagree, or patches/ is malformed
  fork.py topics [--series S]          print the topics of a series, in order
  fork.py export                       write patches/ from the work repo's commits (after rewriting topics there by hand)
  fork.py pristine                     print the directory holding pristine upstream (downloads and verifies it first)
  fork.py sdist                        print the directory of the extracted, verified upstream sdist (it holds upstream's test suite)
  fork.py deps EXTRA                   print the requirements of an optional extra in pyproject.toml
  fork.py env KEY [--gpu G]            print the line's KEY table (cpu_env, emulator_env, gpu_env for GPU G) as NAME=VALUE words, for env(1)
  fork.py flag KEY                     print 1 when the line's KEY is true (bench_w7), else nothing, for make's $(if)

patches/series names the topic patches in the order they apply, one a line (`#` starts a comment). A line `[S]` ends the series S:
`--series S` is every topic above that line. Each patches/T.patch is one commit in `git format-patch` form, its message the topic's
PR description. Git does the work in a work repo, .cache/work-VERSION (one per line): pristine upstream as its first commit (tag `upstream`), then each
topic applied with `git am` (tag `topic/T`). `patches` turns edits into `fixup!` commits of the topic that last touched the edited
lines (git blame), or of --topic T, squashes them with `git rebase --autosquash` and writes every topic back with `git format-patch`.
A change that moves code between topics is easier as a rebase by hand: `git -C .cache/work-VERSION rebase -i upstream`, `edit` the topics,
then `export`. Downloads go through pip and are checked against the pinned sha256;
FORK_CACHE overrides where they are kept (default .cache/upstream).
"""
import hashlib, io, json, os, re, shutil, subprocess, sys, tarfile, tempfile, tomllib, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = "tinygrad"  # the upstream package directory that is materialized
FULL = "full"     # the name of the whole series
# fixed identity and dates: the work repo's commits, and so the exported patches, depend only on their content
GIT_ENV = {"GIT_AUTHOR_NAME":"tinygrad-vmap", "GIT_AUTHOR_EMAIL":"fork@tinygrad-vmap.invalid", "GIT_AUTHOR_DATE":"2026-01-01T00:00:00+0000",
           "GIT_COMMITTER_NAME":"tinygrad-vmap", "GIT_COMMITTER_EMAIL":"fork@tinygrad-vmap.invalid", "GIT_COMMITTER_DATE":"2026-01-01T00:00:00+0000",
           "GIT_CONFIG_NOSYSTEM":"1", "GIT_CONFIG_GLOBAL":os.devnull, "GIT_SEQUENCE_EDITOR":":", "GIT_EDITOR":":", "LC_ALL":"C"}
NEW_TOPIC = "{topic}: TODO say what this topic changes and why, the way a tinygrad PR description reads\n"

class ForkError(Exception): pass

def sha256(b:bytes) -> str: return hashlib.sha256(b).hexdigest()
def fork_config(root:Path) -> dict: return tomllib.loads((root/"pyproject.toml").read_text())["tool"]["fork"]
def upstream_line(root:Path) -> str:
  """the upstream version this command works on: UPSTREAM=<version>, else pyproject.toml's default line"""
  cfg = fork_config(root)
  if (v := os.environ.get("UPSTREAM") or cfg["default"]) not in cfg["upstream"]:
    raise ForkError(f"no upstream line {v!r}: pyproject.toml pins {', '.join(cfg['upstream'])} (UPSTREAM=<one of them>)")
  return v
def is_default_line(root:Path) -> bool: return upstream_line(root) == fork_config(root)["default"]
def pin(root:Path, line:str|None=None) -> dict: return fork_config(root)["upstream"][line or upstream_line(root)]
def patches_dir(root:Path) -> Path: return root/pin(root)["patches"]
def rel(root:Path, p:Path) -> str: return str(p.relative_to(root))
def cache_dir(root:Path) -> Path: return Path(os.environ.get("FORK_CACHE", root/".cache"/"upstream")).resolve()

def fetch(root:Path, kind:str, line:str|None=None) -> Path:
  """Return the cached, sha256-verified upstream wheel or sdist (of this line, or of another pinned one), downloading it with pip when missing."""
  p, cache = pin(root, line), cache_dir(root)
  f = cache/p[kind]["file"]
  if not f.exists():
    cache.mkdir(parents=True, exist_ok=True)
    # pip must see the user's environment, not a PEP 517 build environment (which hides site-packages)
    env = {k:v for k,v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PIP_BUILD_TRACKER")}
    fmt = ["--only-binary", ":all:"] if kind == "wheel" else ["--no-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *fmt, "-d", str(cache), f"{p['name']}=={p['version']}"]
    if (r := subprocess.run(cmd, env=env, capture_output=True, text=True)).returncode != 0 or not f.exists():
      raise ForkError(f"could not download {f.name} with pip:\n{r.stdout}{r.stderr}")
  if (got := sha256(f.read_bytes())) != p[kind]["sha256"]:
    raise ForkError(f"sha256 mismatch for {f}: pinned {p[kind]['sha256']}, got {got}. Delete the file to download it again; "
                    "if upstream really changed, the pin in pyproject.toml is what must be reviewed.")
  return f

def pristine(root:Path) -> Path:
  """Directory holding pristine upstream `tinygrad/`, extracted from the verified wheel."""
  whl = fetch(root, "wheel")
  out = cache_dir(root)/f"pristine-{pin(root)['wheel']['sha256'][:16]}"
  if not (out/".complete").exists():
    shutil.rmtree(out, ignore_errors=True)
    with zipfile.ZipFile(whl) as z:
      for n in z.namelist():
        if n.startswith(PKG+"/") and not n.endswith("/"): (out/n).parent.mkdir(parents=True, exist_ok=True); (out/n).write_bytes(z.read(n))
    (out/".complete").touch()
  return out

def sdist(root:Path, line:str|None=None) -> Path:
  """Directory of the extracted, verified upstream sdist (of this line, or of another pinned one)."""
  tgz, p = fetch(root, "sdist", line), pin(root, line)
  out = cache_dir(root)/f"sdist-{p['sdist']['sha256'][:16]}"
  if not (out/".complete").exists():
    shutil.rmtree(out, ignore_errors=True)
    with tarfile.open(tgz) as t: t.extractall(out, filter="data")
    (out/".complete").touch()
  return out/f"{p['name']}-{p['version']}"

def upstream_files(pdir:Path) -> list[str]: return sorted(str(f.relative_to(pdir)) for f in (pdir/PKG).rglob("*") if f.is_file())

# *** the series file

def read_series(root:Path) -> tuple[list[str], dict[str, int]]:
  """the topics of patches/series in order, and for each named subset `[S]` how many topics it takes"""
  topics, subsets = [], {}
  if not (f := patches_dir(root)/"series").exists(): return topics, subsets
  for n, line in enumerate(f.read_text().splitlines(), 1):
    if not (line := line.split("#", 1)[0].strip()): continue
    if m := re.fullmatch(r"\[([\w.-]+)\]", line): subsets[m.group(1)] = len(topics)
    elif re.fullmatch(r"[\w.-]+", line) and line not in topics: topics.append(line)
    else: raise ForkError(f"{rel(root, f)} line {n}: {line!r} is not a topic name (letters, digits, . _ -) used once, nor a [subset]")
  return topics, subsets

def series_topics(root:Path, series:str=FULL) -> list[str]:
  topics, subsets = read_series(root)
  if series == FULL: return topics
  if series not in subsets: raise ForkError(f"no series {series!r}: {rel(root, patches_dir(root))}/series defines {', '.join([FULL, *subsets])}")
  return topics[:subsets[series]]

def patch_path(root:Path, topic:str) -> Path: return patches_dir(root)/f"{topic}.patch"
def patch_files(root:Path) -> list[Path]: return sorted(patches_dir(root).glob("*.patch"))
def message_of(patch:Path) -> str:
  """the commit message of a format-patch file: the subject and the body before the diff"""
  txt = patch.read_text()
  head, _, body = txt.partition("\n\n")
  subject = re.search(r"^Subject: (.*(?:\n .*)*)", head, re.M)
  return ((subject.group(1).replace("\n ", " ") + "\n\n") if subject else "") + body.split("\n---\n", 1)[0].split("\ndiff --git ", 1)[0]

# *** the work repo

def git(cwd:Path, *args, input:str|None=None, check=True) -> str:
  r = subprocess.run(["git", "-c", "core.quotepath=off", "-c", "init.defaultBranch=series", *args], cwd=cwd, input=input,
                     capture_output=True, text=True, env={**os.environ, **GIT_ENV})
  if check and r.returncode != 0: raise ForkError(f"git {' '.join(args)} failed in {cwd}:\n{r.stdout}{r.stderr}")
  return r.stdout

def work_dir(root:Path) -> Path: return root/".cache"/f"work-{upstream_line(root)}"
def series_key(root:Path) -> str:
  topics, _ = read_series(root)
  parts = [pin(root)["wheel"]["sha256"], *(t + ":" + (sha256(patch_path(root, t).read_bytes()) if patch_path(root, t).exists() else "-") for t in topics)]
  return sha256("\n".join(parts).encode())

def build_work(root:Path) -> Path:
  """the work repo with pristine upstream and every topic of patches/series applied in order (rebuilt when either changed)"""
  work, key = work_dir(root), series_key(root)
  if (work/".git"/"fork-key").exists() and (work/".git"/"fork-key").read_text() == key and not git(work, "status", "--porcelain"): return work
  topics, _ = read_series(root)
  if missing := [t for t in topics if not patch_path(root, t).exists()]:
    raise ForkError(f"{rel(root, patches_dir(root))}/series names {missing[0]}, but {rel(root, patch_path(root, missing[0]))} is missing")
  shutil.rmtree(work, ignore_errors=True)
  work.mkdir(parents=True)
  git(work, "init", "-q")
  shutil.copytree(pristine(root)/PKG, work/PKG)
  git(work, "add", "-A")
  git(work, "commit", "-q", "-m", f"upstream tinygrad {pin(root)['version']}")
  git(work, "tag", "upstream")
  prev = "pristine upstream"
  for t in topics:
    r = subprocess.run(["git", "am", "-q", "-k", "--keep-cr", "--empty=keep", "--whitespace=nowarn", str(patch_path(root, t))], cwd=work,
                       capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    if r.returncode != 0:
      git(work, "am", "--abort", check=False)
      shutil.rmtree(work, ignore_errors=True)
      raise ForkError(f"{rel(root, patch_path(root, t))} does not apply on {prev} (its series order):\n{r.stdout}{r.stderr}")
    git(work, "tag", f"topic/{t}")
    prev = f"topic {t}"
  (work/".git"/"fork-key").write_text(key)
  return work

def tip(topics:list[str]) -> str: return f"topic/{topics[-1]}" if topics else "upstream"

def tree_files(work:Path, ref:str) -> dict[str, bytes]:
  """{path: content} of the package in the work repo's commit `ref`"""
  data = subprocess.run(["git", "archive", "--format=tar", ref, PKG], cwd=work, capture_output=True, check=True).stdout
  with tarfile.open(fileobj=io.BytesIO(data)) as t: return {m.name:t.extractfile(m).read() for m in t.getmembers() if m.isfile()}

def expected(root:Path, series:str=FULL) -> dict[str, bytes]:
  """pristine upstream with the series applied, as {path: content}"""
  topics = series_topics(root, series)
  return tree_files(build_work(root), tip(topics))

# *** materializing

def gitignore(files:list[str]) -> str:
  return "# generated by tools/fork.py: upstream files, materialized by `make fork`, never committed\n" + \
         "".join(f"/{f.removeprefix(PKG+'/')}\n" for f in sorted(files))

def state_file(root:Path) -> Path: return root/".cache"/"fork-state.json"
def load_state(root:Path) -> dict:
  st = json.loads(state_file(root).read_text()) if state_file(root).exists() else {}
  return st if "files" in st else {"series":FULL, "files":st}
def materialized_series(root:Path) -> str: return load_state(root)["series"]
def applied_topics(root:Path) -> list[str]:
  """the topics tinygrad/ was materialized with (all of patches/series when it wasn't materialized by this tool)"""
  return load_state(root).get("topics", read_series(root)[0])

def line_mismatch(root:Path) -> str|None:
  """one line naming it when tinygrad/ holds another upstream line than this command's (then every file would differ), else None"""
  if (line := load_state(root).get("line")) is None or line == upstream_line(root): return None
  want = "" if is_default_line(root) else f" UPSTREAM={upstream_line(root)}"
  return (f"{PKG}/ holds the {line} line, not {upstream_line(root)}: run `make fork{want}` (or say UPSTREAM={line} to work on "
          f"the {line} line)")

def dirty(root:Path, exp:dict[str, bytes]) -> list[str]:
  """files that differ from pristine + the series"""
  return [f for f, b in exp.items() if not (root/f).exists() or (root/f).read_bytes() != b]

def cmd_fork(root:Path, force=False, series:str|None=None) -> None:
  series = series or FULL
  exp, state = expected(root, series), load_state(root)
  written = state["files"]
  # an edit is a file that is neither what we should write nor what we wrote last time (a pull may change patches/ under us)
  edited = [f for f in sorted(set(dirty(root, exp)) | (set(written) - set(exp)))
            if (root/f).exists() and sha256((root/f).read_bytes()) != written.get(f)]
  if edited and not force:
    raise ForkError("refusing to overwrite edits to upstream files that are not in patches/:\n  " + "\n  ".join(edited) +
                    "\nrun `make patches` to export them, or `make fork FORCE=1` to discard them")
  for f in set(written) - set(exp): (root/f).unlink(missing_ok=True)  # a file only an earlier series had
  for f, b in exp.items():
    if not (root/f).exists() or (root/f).read_bytes() != b: (root/f).parent.mkdir(parents=True, exist_ok=True); (root/f).write_bytes(b)
  if not (gi := root/PKG/".gitignore").exists() or gi.read_text() != gitignore(list(exp)): gi.write_text(gitignore(list(exp)))
  state_file(root).parent.mkdir(parents=True, exist_ok=True)
  state_file(root).write_text(json.dumps({"line":upstream_line(root), "series":series, "topics":series_topics(root, series),
                                          "files":{f:sha256(b) for f, b in exp.items()}}, indent=0, sort_keys=True))

# *** exporting edits

def hunks_of(old:bytes, new:bytes, path:str) -> list[tuple[int, int, str]]:
  """the -U0 hunks turning old into new: (first old line, old line count, hunk text)"""
  with tempfile.TemporaryDirectory() as tmp:
    for side, b in (("a", old), ("b", new)): (Path(tmp)/side/path).parent.mkdir(parents=True, exist_ok=True); (Path(tmp)/side/path).write_bytes(b)
    out = git(Path(tmp), "diff", "--no-index", "--no-prefix", "--no-color", "--no-ext-diff", "-U0", f"a/{path}", f"b/{path}", check=False)
  hunks = []
  for h in re.split(r"^(?=@@ )", out, flags=re.M)[1:]:
    m = re.match(r"@@ -(\d+)(?:,(\d+))? ", h)
    hunks.append((int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1), h))
  return hunks

def blamed_topics(work:Path, ref:str, path:str, start:int, count:int, nlines:int) -> set[str]:
  """the topics that last changed the lines a hunk replaces, or for an insertion the lines around it"""
  lo, hi = (start, start+count-1) if count else (max(start, 1), min(start+1, nlines))
  if nlines == 0 or lo > hi: return set()
  shas = {l.split()[0] for l in git(work, "blame", "-l", "-s", "-L", f"{lo},{hi}", ref, "--", path).splitlines()}
  tags = {}
  for line in git(work, "tag", "-l", "topic/*", "--format=%(objectname) %(refname:short)").splitlines():
    sha, name = line.split(); tags[sha] = name.removeprefix("topic/")
  return {tags[s] for s in shas if s in tags}

def cmd_patches(root:Path, topic:str|None=None) -> list[str]:
  """export edits into their topics; returns the topics that changed"""
  if (why := line_mismatch(root)) is not None: raise ForkError(why)
  series = materialized_series(root)
  work, topics, full = build_work(root), series_topics(root, series), read_series(root)[0]
  ref = tip(topics)
  exp = tree_files(work, ref)
  changed = dirty(root, exp)
  if missing := [f for f in changed if not (root/f).exists()]: raise ForkError(f"not materialized (missing {missing[0]}): run `make fork` first")
  by_topic: dict[str, list[tuple[str, str]]] = {}
  unclaimed = []
  for f in changed:
    for start, count, h in hunks_of(exp[f], (root/f).read_bytes(), f):
      owners = {topic} if topic else blamed_topics(work, ref, f, start, count, exp[f].count(b"\n"))
      if len(owners) == 1: by_topic.setdefault(owners.pop(), []).append((f, h))
      else: unclaimed.append(f"{f}:{start} " + (f"touches lines of {', '.join(sorted(owners))}" if owners else "touches only upstream lines"))
  if unclaimed:
    raise ForkError("cannot tell which topic these edits belong to:\n  " + "\n  ".join(unclaimed) +
                    "\nsay it: `make patches TOPIC=<name>` (a name not in patches/series starts a new topic)")
  if not by_topic: return []
  try: order = squash_edits(root, work, by_topic, topics, full)
  except ForkError:
    shutil.rmtree(work, ignore_errors=True)  # half way through a rebase: the next command rebuilds it from patches/
    raise
  write_patches(root, work, order)
  if dropped := [t for t in full if t not in order]:  # reverted whole: no patch, no line in patches/series
    for t in dropped: patch_path(root, t).unlink()
    (sf := patches_dir(root)/"series").write_text("".join(l for l in sf.read_text().splitlines(keepends=True) if l.split("#", 1)[0].strip() not in dropped))
  if new := [t for t in order if t not in full]:  # a new topic goes after the materialized series' last topic, in every subset it is in
    lines = (patches_dir(root)/"series").read_text().splitlines(keepends=True) if (patches_dir(root)/"series").exists() else []
    out, seen = [], 0
    for line in lines:
      if seen == len(topics) and new: out += [t + "\n" for t in new]; new = []
      out.append(line)
      if (name := line.split("#", 1)[0].strip()) and not name.startswith("["): seen += 1
    patches_dir(root).mkdir(exist_ok=True)
    (patches_dir(root)/"series").write_text("".join(out + [t + "\n" for t in new]))
  cmd_fork(root, series=series)  # rebuild the work repo from patches/ and re-materialize, so the recorded state matches them
  return sorted(by_topic)

def write_patches(root:Path, work:Path, order:list[str]) -> None:
  """patches/T.patch for each commit of the work repo after `upstream`, one per topic of `order`"""
  commits = git(work, "rev-list", "--reverse", "upstream..HEAD").split()
  patches_dir(root).mkdir(exist_ok=True)   # a line's first topic
  if len(commits) != len(order): raise ForkError(f"the work repo has {len(commits)} commits after upstream, but the series {len(order)} topics")
  for t, c in zip(order, commits):
    patch_path(root, t).write_text(git(work, "format-patch", "-1", "-k", "--no-stat", "--no-signature", "--zero-commit", "--stdout", c))

def cmd_export(root:Path) -> None:
  """patches/ from the work repo as it is (its topics rewritten by hand: `git -C .cache/work-VERSION rebase -i upstream`), then materialize"""
  work = work_dir(root)
  if not (work/".git").exists(): raise ForkError("no work repo: run `make fork` first")
  if git(work, "status", "--porcelain", "--untracked-files=no"): raise ForkError(f"{work} has uncommitted changes (a rebase in progress?)")
  write_patches(root, work, read_series(root)[0])
  cmd_fork(root, series=materialized_series(root), force=True)

def squash_edits(root:Path, work:Path, by_topic:dict[str, list[tuple[str, str]]], topics:list[str], full:list[str]) -> list[str]:
  """commit each topic's edits as a fixup (a new topic as a commit) on the series' tip, replay the later topics, squash with
  `git rebase --autosquash`; returns the topics in the order of the rewritten commits"""
  ref, new = tip(topics), [t for t in by_topic if t not in full]
  git(work, "checkout", "-q", "--detach", ref)
  for t in [t for t in topics if t in by_topic] + new:
    diff = "".join(f"diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n{h}" for f, h in by_topic[t])
    git(work, "apply", "--index", "--unidiff-zero", "--whitespace=nowarn", "-", input=diff)
    git(work, "commit", "-q", "-m", NEW_TOPIC.format(topic=t) if t in new else f"fixup! {git(work, 'log', '-1', '--format=%s', f'topic/{t}').strip()}")
  if ref != tip(full):
    if (r := subprocess.run(["git", "cherry-pick", "--allow-empty", "--keep-redundant-commits", f"{ref}..{tip(full)}"], cwd=work,
                            capture_output=True, text=True, env={**os.environ, **GIT_ENV})).returncode != 0:
      git(work, "cherry-pick", "--abort", check=False)
      raise ForkError(f"the topics after {ref.removeprefix('topic/')} no longer apply on your edits:\n{r.stdout}{r.stderr}")
  subjects = {git(work, "log", "-1", "--format=%s", f"topic/{t}").strip():t for t in full}
  order, cmd = full[:len(topics)] + new + full[len(topics):], ["rebase", "-q", "-i", "--autosquash", "--empty=keep", "upstream"]
  while (r := subprocess.run(["git", *cmd], cwd=work, capture_output=True, text=True, env={**os.environ, **GIT_ENV})).returncode != 0:
    if "would make\nit empty" in r.stdout + r.stderr:  # the edits revert a topic: it leaves the series
      order.remove(subjects[git(work, "log", "-1", "--format=%s", "HEAD").strip()])
      git(work, "reset", "-q", "--hard", "HEAD^")
      cmd = ["rebase", "--continue"]
      continue
    git(work, "rebase", "--abort", check=False)
    raise ForkError(f"squashing the edits into their topics failed (a later topic's lines conflict with them):\n{r.stdout}{r.stderr}")
  return order

# *** checking

def cmd_check(root:Path, series:str|None=None) -> list[str]:
  if (why := line_mismatch(root)) is not None: return [why]
  series = series or materialized_series(root)
  topics = read_series(root)[0]
  pd = rel(root, patches_dir(root))
  problems = [f"{pd}/{p.name}: not in {pd}/series" for p in patch_files(root) if p.stem not in topics]
  problems += [f"{pd}/series names {t}, but {pd}/{t}.patch is missing" for t in topics if not patch_path(root, t).exists()]
  if problems: return problems
  exp = expected(root, series)
  problems += [f"{f}: differs from pristine {upstream_line(root)} + {pd}/ ({series} series; run `make patches`, or `make fork` if it is not "
               "materialized)" for f in dirty(root, exp)]
  problems += [f"{pd}/{t}.patch: its message still says TODO" for t in topics if "TODO" in message_of(patch_path(root, t))]
  if (gi := root/PKG/".gitignore").exists() and gi.read_text() != gitignore(list(exp)): problems.append(f"{PKG}/.gitignore: stale (run `make fork`)")
  return problems

def main(argv:list[str]) -> int:
  import argparse
  ap = argparse.ArgumentParser(prog="fork.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  (f := sub.add_parser("fork")).add_argument("--force", action="store_true"); f.add_argument("--series")
  sub.add_parser("patches").add_argument("--topic")
  sub.add_parser("check").add_argument("--series")
  sub.add_parser("topics").add_argument("--series")
  sub.add_parser("export")
  for c in ("pristine", "sdist"): sub.add_parser(c)
  sub.add_parser("deps").add_argument("extra")
  (e := sub.add_parser("env")).add_argument("key"); e.add_argument("--gpu", default="CUDA")
  sub.add_parser("flag").add_argument("key")
  a, root = ap.parse_args(argv), ROOT
  try:
    if a.cmd == "fork":
      cmd_fork(root, force=a.force, series=a.series or None)
      print(f"materialized {PKG}/ from pristine {upstream_line(root)} + {len(series_topics(root, a.series or FULL))} topic patches "
            f"({a.series or FULL} series of {rel(root, patches_dir(root))}/)")
    elif a.cmd == "patches": print(f"exported edits into {len(changed := cmd_patches(root, a.topic or None))} topics" + "".join(f"\n  {t}" for t in changed))
    elif a.cmd == "check":
      if problems := cmd_check(root, a.series or None): print("check-patches: FAILED\n  " + "\n  ".join(problems)); return 1
      print(f"check-patches: OK ({len(series_topics(root, a.series or materialized_series(root)))} topic patches)")
    elif a.cmd == "export": cmd_export(root); print(f"exported the work repo's {len(read_series(root)[0])} topics into {rel(root, patches_dir(root))}/")
    elif a.cmd == "topics": print("\n".join(series_topics(root, a.series or FULL)))
    elif a.cmd == "pristine": print(pristine(root))
    elif a.cmd == "sdist": print(sdist(root))
    elif a.cmd == "env": print(" ".join(f"{k}={v}".replace("{GPU}", a.gpu) for k, v in pin(root)[a.key].items()))
    elif a.cmd == "flag": print("1" if pin(root).get(a.key) else "")
    elif a.cmd == "deps": print(" ".join(tomllib.loads((root/"pyproject.toml").read_text())["project"]["optional-dependencies"][a.extra]))
  except ForkError as e:
    print(f"fork: {e}", file=sys.stderr); return 1
  return 0

if __name__ == "__main__": sys.exit(main(sys.argv[1:]))
