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
    (self.root/"patches").mkdir()
    self.env = {**os.environ, "FORK_CACHE":str(fork.cache_dir(ROOT))}
  def run(self, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(self.root/"tools"/"fork.py"), *args], env=self.env, capture_output=True, text=True)
  def edit(self, path=OPS, line="# an edit\n"): (f := self.root/path).write_text(f.read_text() + line)
  def patch(self, path=OPS) -> Path: return self.root/"patches"/(path+".patch")

class TestForkTool(unittest.TestCase):
  def setUp(self):
    self.tmp = tempfile.TemporaryDirectory()
    self.repo = ForkCopy(Path(self.tmp.name))
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.pristine = fork.pristine(ROOT)
  def tearDown(self): self.tmp.cleanup()

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

  def test_patches_exports_a_git_diff(self):
    self.repo.edit()
    self.assertEqual(self.repo.run("patches").returncode, 0)
    txt = self.repo.patch().read_text()
    self.assertIn(f"diff --git a/{OPS} b/{OPS}", txt)
    self.assertIn("+# an edit", txt)

  def test_patch_header_is_required_and_kept(self):
    self.repo.edit()
    self.repo.run("patches")
    self.assertIn("header still says TODO", self.repo.run("check").stdout)
    self.repo.patch().write_text("uop/ops.py: a test edit\n\n" + self.repo.patch().read_text().split("\n\n", 1)[1])
    self.repo.edit(line="# a second edit\n")
    self.repo.run("patches")
    self.assertTrue(self.repo.patch().read_text().startswith("uop/ops.py: a test edit\n\ndiff --git"))
    self.assertEqual(self.repo.run("check").returncode, 0)

  def test_patches_is_deterministic(self):
    self.repo.edit()
    self.repo.run("patches")
    first = self.repo.patch().read_bytes()
    self.repo.run("patches")
    self.assertEqual(self.repo.patch().read_bytes(), first)

  def test_patch_applies_on_fresh_copy(self):
    self.repo.edit()
    self.repo.run("patches")
    fresh = ForkCopy(Path(self.tmp.name)/"fresh")
    shutil.copy(self.repo.patch(), (fresh.root/"patches"/"x.patch"))
    self.assertEqual(fresh.run("fork").returncode, 0)
    self.assertEqual((fresh.root/OPS).read_bytes(), (self.repo.root/OPS).read_bytes())

  def test_reverted_edit_drops_patch(self):
    self.repo.edit()
    self.repo.run("patches")
    (self.repo.root/OPS).write_bytes((self.pristine/OPS).read_bytes())
    self.repo.run("patches")
    self.assertFalse(self.repo.patch().exists())

  def test_new_patch_from_pull_is_not_an_edit(self):
    # patches/ changing under a materialized tree (git pull) must re-materialize, not be mistaken for a local edit
    self.repo.edit()
    self.repo.run("patches")
    patch = self.repo.patch().read_text()
    self.repo.patch().unlink()
    self.assertEqual(self.repo.run("fork", "--force").returncode, 0)
    self.repo.patch().parent.mkdir(parents=True, exist_ok=True)
    self.repo.patch().write_text(patch)
    self.assertEqual(self.repo.run("fork").returncode, 0)
    self.assertTrue((self.repo.root/OPS).read_text().endswith("# an edit\n"))

  def test_patch_that_does_not_apply_is_named(self):
    self.repo.patch().parent.mkdir(parents=True)
    self.repo.patch().write_text(f"bad\n\ndiff --git a/{OPS} b/{OPS}\n--- a/{OPS}\n+++ b/{OPS}\n@@ -1,1 +1,1 @@\n-no such line\n+x\n")
    r = self.repo.run("fork")
    self.assertEqual(r.returncode, 1)
    self.assertIn("does not apply", r.stderr)

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

  def test_every_patch_has_a_header(self):
    for p in fork.patch_files(ROOT): self.assertTrue(fork.header_of(p).strip(), p)

class TestWheel(unittest.TestCase):
  def test_pip_install_into_venv(self):
    with tempfile.TemporaryDirectory() as tmp:
      # build from a copy so the test leaves no build/ or egg-info behind in the repo
      src = Path(tmp)/"src"
      shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".cache", "build", "*.egg-info", "__pycache__"))
      subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(Path(tmp)/"venv")], check=True)
      py = Path(tmp)/"venv"/"bin"/"python"
      env = {**os.environ, "FORK_CACHE":str(fork.cache_dir(ROOT))}
      r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(src)],
                         env=env, capture_output=True, text=True)
      self.assertEqual(r.returncode, 0, r.stderr)
      code = "import tinygrad, importlib.metadata as m; print(tinygrad.__file__); print(m.version('tinygrad'))"
      out = subprocess.run([str(py), "-c", code], cwd=tmp, capture_output=True, text=True, env={"PATH":os.environ["PATH"]}, check=True).stdout.split()
      self.assertTrue(out[0].startswith(str(Path(tmp)/"venv")), out)
      self.assertTrue(out[1].startswith("0.12.0+vmap"), out)
      installed = Path(out[0]).parent
      for f in fork.upstream_files(fork.pristine(ROOT)):  # the installed files are pristine + patches/, and all of them are there
        self.assertEqual((installed.parent/f).read_bytes(), (ROOT/f).read_bytes(), f)

if __name__ == "__main__":
  unittest.main()
