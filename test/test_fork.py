"""The fork machinery (tools/fork.py, the build backend) on temporary copies of the repo: upstream's files are never edited here."""
import importlib.metadata, os, shutil, subprocess, sys, tempfile, unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/"tools"))
import fork  # noqa: E402

OPS = "tinygrad/uop/ops.py"

class ForkCopy:
  """a throwaway repo with just the fork tool, the pin and a patches/ dir, sharing the real download cache"""
  def __init__(self, tmp:Path):
    self.root = tmp/"repo"
    (self.root/"tools").mkdir(parents=True)
    shutil.copy(ROOT/"tools"/"fork.py", self.root/"tools")
    shutil.copy(ROOT/"pyproject.toml", self.root)
    self.pdir = self.root/fork.pin(ROOT)["patches"]   # the line's patches dir (UPSTREAM= picks the line, as for make)
    self.pdir.mkdir()
    self.env = {**os.environ, "FORK_CACHE":str(fork.cache_dir(ROOT))}
  def run(self, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(self.root/"tools"/"fork.py"), *args], env=self.env, capture_output=True, text=True)
  def edit(self, path=OPS, line="# an edit\n"): (f := self.root/path).write_text(f.read_text() + line)
  def patch(self, topic="alpha") -> Path: return self.pdir/f"{topic}.patch"
  def series(self) -> list[str]: return (self.pdir/"series").read_text().split()
  def describe(self, topic="alpha", msg="alpha: a test topic\n\nwhy it exists"):
    """give a new topic's patch a message in place of its TODO"""
    txt = self.patch(topic).read_text()
    i, j = txt.index("Subject: "), txt.index("\ndiff --git ")
    self.patch(topic).write_text(txt[:i] + "Subject: " + msg.split("\n", 1)[0] + "\n" + msg.partition("\n")[2] + "\n" + txt[j:])

class TestForkTool(unittest.TestCase):
  def setUp(self):
    self.tmp = tempfile.TemporaryDirectory()
    self.repo = ForkCopy(Path(self.tmp.name))
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.pristine = fork.pristine(ROOT)
  def tearDown(self): self.tmp.cleanup()
  def new_topic(self, topic="alpha", path=OPS, line="# an edit\n") -> subprocess.CompletedProcess:
    self.repo.edit(path, line)
    return self.repo.run("patches", "--topic", topic)

  def test_fork_lays_pristine_upstream(self):
    files = fork.upstream_files(self.pristine)
    self.assertGreater(len(files), 100)
    for f in files: self.assertEqual((self.repo.root/f).read_bytes(), (self.pristine/f).read_bytes(), f)

  def test_fork_writes_gitignore_of_upstream_files(self):
    ignored = (self.repo.root/"tinygrad"/".gitignore").read_text().splitlines()
    self.assertIn("/uop/ops.py", ignored)
    self.assertEqual(len([l for l in ignored if l.startswith("/")]), len(fork.upstream_files(self.pristine)))

  def test_check_names_edited_file(self):
    self.repo.edit()
    r = self.repo.run("check")
    self.assertEqual(r.returncode, 1)
    self.assertIn(OPS, r.stdout)

  def test_fork_refuses_to_overwrite_edit(self):
    self.repo.edit()
    r = self.repo.run("fork")
    self.assertEqual(r.returncode, 1)
    self.assertIn(OPS, r.stderr)
    self.assertIn("make patches", r.stderr)
    self.assertTrue((self.repo.root/OPS).read_text().endswith("# an edit\n"))

  def test_fork_force_discards_edit(self):
    self.repo.edit()
    self.assertEqual(self.repo.run("fork", "--force").returncode, 0)
    self.assertEqual((self.repo.root/OPS).read_bytes(), (self.pristine/OPS).read_bytes())

  def test_edit_of_upstream_lines_needs_a_topic(self):
    self.repo.edit()
    r = self.repo.run("patches")
    self.assertEqual(r.returncode, 1)
    self.assertIn(OPS, r.stderr)
    self.assertIn("TOPIC=", r.stderr)

  def test_new_topic_is_a_format_patch_in_the_series(self):
    self.assertEqual(self.new_topic().returncode, 0)
    txt = self.repo.patch().read_text()
    self.assertTrue(txt.startswith("From "))
    self.assertIn("Subject: alpha: TODO", txt)
    self.assertIn(f"diff --git a/{OPS} b/{OPS}", txt)
    self.assertIn("+# an edit", txt)
    self.assertEqual(self.repo.series(), ["alpha"])

  def test_topic_message_is_required_and_kept(self):
    self.new_topic()
    self.assertIn("alpha.patch: its message still says TODO", self.repo.run("check").stdout)
    self.repo.describe()
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.assertEqual(self.repo.run("check").returncode, 0, self.repo.run("check").stdout)
    (f := self.repo.root/OPS).write_text(f.read_text().replace("# an edit\n", "# an edit, changed\n"))
    self.assertEqual(self.repo.run("patches").returncode, 0)
    self.assertIn("Subject: alpha: a test topic\n\nwhy it exists", self.repo.patch().read_text())
    self.assertIn("+# an edit, changed", self.repo.patch().read_text())
    self.assertEqual(self.repo.run("check").returncode, 0)

  def test_edit_goes_to_the_topic_whose_lines_it_changes(self):
    self.new_topic("alpha", OPS, "# alpha's line\n")
    self.new_topic("beta", "tinygrad/helpers.py", "# beta's line\n")
    (f := self.repo.root/OPS).write_text(f.read_text().replace("# alpha's line\n", "# alpha's line, fixed\n"))
    self.assertEqual(self.repo.run("patches").returncode, 0)
    self.assertIn("+# alpha's line, fixed", self.repo.patch("alpha").read_text())
    self.assertNotIn(OPS, self.repo.patch("beta").read_text())
    self.assertEqual(self.repo.series(), ["alpha", "beta"])

  def test_patches_is_deterministic(self):
    self.new_topic()
    first = self.repo.patch().read_bytes()
    self.assertEqual(self.repo.run("patches").returncode, 0)
    self.assertEqual(self.repo.patch().read_bytes(), first)
    fresh = ForkCopy(Path(self.tmp.name)/"fresh")   # the same edit in another checkout exports the same bytes
    fresh.run("fork")
    fresh.edit()
    fresh.run("patches", "--topic", "alpha")
    self.assertEqual(fresh.patch().read_bytes(), first)

  def test_series_applies_on_fresh_copy(self):
    self.new_topic()
    fresh = ForkCopy(Path(self.tmp.name)/"fresh")
    shutil.copy(self.repo.patch(), fresh.patch())
    shutil.copy(self.repo.pdir/"series", fresh.pdir/"series")
    self.assertEqual(fresh.run("fork").returncode, 0)
    self.assertEqual((fresh.root/OPS).read_bytes(), (self.repo.root/OPS).read_bytes())

  def test_reverted_topic_leaves_the_series(self):
    self.new_topic()
    (self.repo.root/OPS).write_bytes((self.pristine/OPS).read_bytes())
    self.assertEqual(self.repo.run("patches").returncode, 0)
    self.assertFalse(self.repo.patch().exists())
    self.assertEqual(self.repo.series(), [])
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.assertEqual((self.repo.root/OPS).read_bytes(), (self.pristine/OPS).read_bytes())

  def test_subset_series_stops_at_its_marker(self):
    self.new_topic("alpha", OPS, "# alpha's line\n")
    self.new_topic("beta", "tinygrad/helpers.py", "# beta's line\n")
    (self.repo.pdir/"series").write_text("# a comment\nalpha\n[small]\nbeta\n")
    self.assertEqual(self.repo.run("fork", "--series", "small").returncode, 0)
    self.assertTrue((self.repo.root/OPS).read_text().endswith("# alpha's line\n"))
    self.assertEqual((self.repo.root/"tinygrad/helpers.py").read_bytes(), (self.pristine/"tinygrad/helpers.py").read_bytes())
    self.assertEqual(fork.applied_topics(self.repo.root), ["alpha"])
    self.assertEqual(self.repo.run("topics", "--series", "small").stdout.split(), ["alpha"])
    # an edit on the subset goes into its topic, and the topics after it still apply on it
    (f := self.repo.root/OPS).write_text(f.read_text() + "# more\n")
    self.assertEqual(self.repo.run("patches").returncode, 0, self.repo.run("patches").stderr)
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.assertTrue((self.repo.root/OPS).read_text().endswith("# alpha's line\n# more\n"))
    self.assertTrue((self.repo.root/"tinygrad/helpers.py").read_text().endswith("# beta's line\n"))
    self.assertIn("no series 'large'", self.repo.run("fork", "--series", "large").stderr)

  def test_series_order_is_the_order_applied(self):
    # beta changes alpha's line: in the other order it doesn't apply, and the error names it
    self.new_topic("alpha", OPS, "# alpha's line\n")
    (f := self.repo.root/OPS).write_text(f.read_text().replace("# alpha's line\n", "# beta's version\n"))
    self.assertEqual(self.repo.run("patches", "--topic", "beta").returncode, 0)
    self.assertEqual(self.repo.series(), ["alpha", "beta"])
    (self.repo.pdir/"series").write_text("beta\nalpha\n")
    r = self.repo.run("fork", "--force")
    self.assertEqual(r.returncode, 1)
    self.assertIn(f"{self.repo.pdir.name}/beta.patch does not apply on pristine upstream", r.stderr)

  def test_new_patch_from_pull_is_not_an_edit(self):
    # patches/ changing under a materialized tree (git pull) must re-materialize, not be mistaken for a local edit
    self.new_topic()
    patch, series = self.repo.patch().read_text(), (self.repo.pdir/"series").read_text()
    self.repo.patch().unlink()
    (self.repo.pdir/"series").write_text("")
    self.assertEqual(self.repo.run("fork", "--force").returncode, 0)
    self.repo.patch().write_text(patch)
    (self.repo.pdir/"series").write_text(series)
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.assertTrue((self.repo.root/OPS).read_text().endswith("# an edit\n"))

  def test_series_and_patches_must_agree(self):
    self.new_topic()
    (self.repo.pdir/"orphan.patch").write_text("x")
    self.assertIn(f"{(d := self.repo.pdir.name)}/orphan.patch: not in {d}/series", self.repo.run("check").stdout)
    (self.repo.pdir/"orphan.patch").unlink()
    (self.repo.pdir/"series").write_text("alpha\nmissing\n")
    self.assertIn("missing.patch is missing", self.repo.run("check").stdout)

  def test_sha256_mismatch_is_a_hard_error(self):
    cache = Path(self.tmp.name)/"cache"
    cache.mkdir()
    whl = fork.fetch(ROOT, "wheel")
    (cache/whl.name).write_bytes(whl.read_bytes() + b"tampered")
    self.repo.env["FORK_CACHE"] = str(cache)
    r = self.repo.run("pristine")
    self.assertEqual(r.returncode, 1)
    self.assertIn("sha256 mismatch", r.stderr)

class TestRepo(unittest.TestCase):
  def test_no_upstream_file_is_tracked(self):
    if not (ROOT/".git").exists(): self.skipTest("not a git checkout")
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    self.assertEqual(tracked & set(fork.upstream_files(fork.pristine(ROOT))), set())

  def test_materialized_tree_matches_patches(self):
    self.assertEqual(fork.cmd_check(ROOT), [])

  def test_every_topic_has_a_message(self):
    for t in fork.read_series(ROOT)[0]:
      msg = fork.message_of(fork.patch_path(ROOT, t))
      self.assertGreater(len(msg.split("\n\n", 1)[-1].strip()), 100, f"{t}: say what it changes and why")

  def test_vmap_series_leaves_out_only_the_performance_topics(self):
    full, vmap = fork.series_topics(ROOT), fork.series_topics(ROOT, "vmap")
    self.assertEqual(full[:len(vmap)], vmap)
    # each line's performance topics, in this order (0.14 has its own cpu-graph; 0.12's TinyJit has upstream 0.12's CPU graph)
    perf = {"0.12.0": ["cpu-vector-alus", "cpu-heuristics", "cpu-cold-branch", "cpu-payne-hanek-shifts", "lazy-pattern-matcher", "clang-first-call",
                       "eager-cost", "gpu-heuristics"],
            "0.14.0": ["eager-shortcuts", "jit-replay", "callify-cache", "gradient-cache", "gpu-heuristics", "cpu-graph", "cpu-codegen",
                       "first-call", "cpu-avx512-tile", "program-cache", "upat-compile-after", "cpu-vector-lanes", "realize-shared-lookup",
                       "first-build-tier", "first-call-fixed-cost", "codegen-quick-passes", "clang-together", "devec-elements",
                       "kept-schedule", "jit-call-cost", "codegen-cost", "eager-cost-2", "codegen-cost-2", "codegen-cost-3",
                       "cpu-vector-alus", "first-numpy", "first-numpy-graph", "jit-first-call-numpy"]}
    self.assertEqual(full[len(vmap):], perf[fork.upstream_line(ROOT)])

class TestWheel(unittest.TestCase):
  def test_pip_install_into_venv(self):
    with tempfile.TemporaryDirectory() as tmp:
      # build from a copy so the test leaves no build/ or egg-info behind in the repo
      src = Path(tmp)/"src"
      shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".cache", "build", "*.egg-info", "__pycache__"))
      if fork.state_file(ROOT).exists():   # what make fork wrote there (any series): the wheel's build lays the full series over it
        (src/".cache").mkdir()
        shutil.copy(fork.state_file(ROOT), src/".cache")
      subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(Path(tmp)/"venv")], check=True)
      py = Path(tmp)/"venv"/"bin"/"python"
      env = {**os.environ, "FORK_CACHE":str(fork.cache_dir(ROOT))}
      r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(src)],
                         env=env, capture_output=True, text=True)
      self.assertEqual(r.returncode, 0, r.stderr)
      code = "import tinygrad, importlib.metadata as m; print(tinygrad.__file__); print(m.version('tinygrad'))"
      out = subprocess.run([str(py), "-c", code], cwd=tmp, capture_output=True, text=True, env={"PATH":os.environ["PATH"]}, check=True).stdout.split()
      self.assertTrue(out[0].startswith(str(Path(tmp)/"venv")), out)
      self.assertTrue(out[1].startswith(fork.fork_config(ROOT)["default"] + "+vmap"), out)   # the default line's version
      installed = Path(out[0]).parent
      for f, b in fork.expected(ROOT).items():  # the installed files are pristine + the full series, and all of them are there
        self.assertEqual((installed.parent/f).read_bytes(), b, f)
      for f in subprocess.run(["git", "ls-files", "tinygrad/*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split():  # and ours
        self.assertEqual((installed.parent/f).read_bytes(), (ROOT/f).read_bytes(), f)

if __name__ == "__main__":
  unittest.main()
