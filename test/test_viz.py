"""VIZ=1 on vmapped programs, looked at in a real browser: headless Chromium (Debian's `chromium`) driven by playwright, no browser download.

Each test runs a program under VIZ=1 the way a user does: at exit tinygrad saves the rewrites and execs tinygrad/viz/serve.py, here on a
free PORT, with TMPDIR pointing at a fresh folder (so the saved rewrites are this program's) and without CI in the environment
(under CI, launch_viz saves but does not serve); no BROWSER, so nothing opens a window. The page must load without JS errors, the
graph of the vmapped program must show its VMAPIN/VMAPOUT nodes with their vargs, and the rewrite step where the scopes dissolve
must be marked and show the dissolving rewrite. Screenshots go to a temporary folder; UPDATE_SCREENSHOTS=1 writes them to docs/.

The two lines differ in where a scope dissolves. On 0.12 the bracket reaches the scheduler: the schedule's input graph shows it, and
rangeify's "apply rangeify" step dissolves every scope at once. On 0.14 `Tensor.vmapout` batches the scope (tinygrad/batching.py): each
scope is a graph of its own, "vmap scope rmN=size", whose step "batch scope" starts from the bracket and rewrites its VMAPOUT to the
batched graph. 0.14 serves only from a terminal (launch_viz checks isatty), so there the viewer is started after the program exits.

`make setup-viz` installs what this needs (CI's `make test` runs it): chromium with apt-get (root only) and playwright with pip.
"""
import json, os, re, shutil, socket, subprocess, sys, tempfile, time, unittest, urllib.request
from pathlib import Path
from vmap_oracle import LINE_012

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
try: from playwright.sync_api import sync_playwright
except ImportError: sync_playwright = None
HOW = ("`make setup-viz` installs it (chromium with apt-get, playwright with pip)" if os.geteuid() == 0 else
       "not root, so `make setup-viz` can't apt-get install chromium; playwright is `pip install playwright`")

NESTED_SOFTMAX = """
import numpy as np
from tinygrad import Tensor, vmap
x = np.arange(30, dtype=np.float32).reshape(2, 3, 5) / 10
y = vmap(vmap(lambda e: e.softmax()))(Tensor(x)).numpy()   # two nested scopes; the softmax realizes buffers inside both
np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
"""

# the text of every node in the rendered graph, its label lines joined by newlines
NODE_LABELS = """() => [...document.querySelectorAll('#nodes g.node text')].map(t => [...t.querySelectorAll(':scope > tspan')].map(l => l.textContent)
  .join('\\n'))"""
# zoom the graph to scale k with the nodes whose label matches `pattern` in the middle of the graph area
FRAME_NODES = """([pattern, k]) => {
  const svg = d3.select('#graph-svg');
  svg.call(svgZoom.transform, d3.zoomIdentity);
  const nodes = [...document.querySelectorAll('#nodes g.node')].filter(n => new RegExp(pattern).test(n.textContent));
  const boxes = nodes.map(n => n.getBoundingClientRect());
  const [x0, x1] = [Math.min(...boxes.map(b => b.left)), Math.max(...boxes.map(b => b.right))];
  const [y0, y1] = [Math.min(...boxes.map(b => b.top)), Math.max(...boxes.map(b => b.bottom))];
  const [left, right] = [rect('.ctx-list-parent').right, rect('.metadata-parent').left];
  svg.call(svgZoom.transform, d3.zoomIdentity.translate((left+right)/2 - k*(x0+x1)/2, innerHeight/2 - k*(y0+y1)/2).scale(k));
}"""

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

class Viewer:
  """a program run under VIZ=1 until its viewer serves. started at once, so the programs of the tests run side by side; stopped by pid"""
  def __init__(self, *argv:str):
    self.tmp = tempfile.TemporaryDirectory()
    self.port, self.log = free_port(), Path(self.tmp.name)/"viz.log"
    env = {k:v for k,v in os.environ.items() if k not in {"CI", "BROWSER", "PROFILE", "DEBUG", "DEBUG_RANGEIFY"}}
    env.update(VIZ="1", PORT=str(self.port), TMPDIR=self.tmp.name, CPU="1", PYTHONPATH=str(ROOT))
    # 0.14's launch_viz serves only from a terminal: serve what the program saved (in TMPDIR) once it exits
    cmd = [sys.executable, *argv] if LINE_012 else \
      ["sh", "-c", f'"{sys.executable}" "$@" && exec "{sys.executable}" tinygrad/viz/serve.py', "sh", *argv]
    with self.log.open("w") as log:
      self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
  def ready(self, timeout:float=50) -> "Viewer":
    deadline = time.monotonic() + timeout
    while True:
      try:
        self.ctxs = self.get("/ctxs")
        return self
      except OSError:
        if self.proc.poll() is not None or time.monotonic() > deadline:
          raise RuntimeError(f"the viewer did not start on port {self.port}:\n{self.log.read_text()[-3000:]}") from None
        time.sleep(0.2)
  def stop(self):
    self.proc.terminate()
    try: self.proc.wait(10)
    except subprocess.TimeoutExpired: self.proc.kill()
    self.tmp.cleanup()
  @property
  def url(self) -> str: return f"http://127.0.0.1:{self.port}"
  def get(self, path:str):
    with urllib.request.urlopen(self.url + path, timeout=20) as r:
      if r.headers.get("Content-Type") != "text/event-stream": return json.loads(r.read())
      return [json.loads(l[6:]) for l in r.read().decode().splitlines() if l.startswith("data: ") and l != "data: [DONE]"]
  def dissolving(self) -> list[tuple[int, int]]:
    """(graph, step) of every step marked as dissolving vmap scopes: 0.12's schedule in its apply rangeify, 0.14's vmap scope graphs"""
    if found:=[(i, j) for i,c in enumerate(self.ctxs) for j,s in enumerate(c["steps"]) if "VMAPIN/VMAPOUT dissolve]" in s["name"]]: return found
    raise AssertionError(f"no step is marked as dissolving a vmap scope: {[c['name'] for c in self.ctxs]}")
  def input_step(self, ctx:int, dissolve:int) -> int:
    """the step of graph `ctx` that shows the vmap bracket: 0.12's schedule input, 0.14's batch scope (its first graph is the bracket)"""
    return [s["name"] for s in self.ctxs[ctx]["steps"]].index("View Input Graph") if LINE_012 else dissolve

@unittest.skipIf(CHROMIUM is None, f"chromium is not installed: {HOW}")
@unittest.skipIf(sync_playwright is None, f"playwright is not installed: {HOW}")
class TestVizVmap(unittest.TestCase):
  @classmethod
  def setUpClass(cls):
    cls.quickstart, cls.nested = Viewer("examples/quickstart.py"), Viewer("-c", NESTED_SOFTMAX)
    cls.addClassCleanup(cls.quickstart.stop)
    cls.addClassCleanup(cls.nested.stop)
    cls.pw = sync_playwright().start()
    cls.addClassCleanup(cls.pw.stop)
    cls.browser = cls.pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                         "--disable-background-networking", "--disable-dev-shm-usage", "--no-first-run"])
    cls.addClassCleanup(cls.browser.close)
    cls.shots = Path(tempfile.mkdtemp()) if not os.getenv("UPDATE_SCREENSHOTS") else ROOT/"docs"

  def open(self, viewer:Viewer):
    page = self.browser.new_page(viewport={"width":1600, "height":900})
    page.set_default_timeout(60000)   # the graph layout runs in a web worker: on 2 shared cores under xdist it can take 20 s
    self.errors: list[str] = []
    page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
    page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    self.addCleanup(page.close)
    page.goto(viewer.url)
    page.wait_for_selector(f"#ctx-{len(viewer.ctxs)} > p")   # the list of graphs is there (ctx-0 is the profiler)
    return page

  def show_step(self, page, ctx:int, step:int, expect:str) -> list[str]:
    """click the graph `ctx` in the list (unless its steps are open already), then its step `step`; wait for a node label with `expect`"""
    if "expanded" not in (page.get_attribute(f"#ctx-{ctx+1}", "class") or "").split(): page.click(f"#ctx-{ctx+1} > p")
    # a step nested in another (apply rangeify is in run_rangeify) shows once its parents are open
    for parent in page.evaluate(f"() => {{ const ids = []; for (let e = document.getElementById('step-{ctx+1}-{step}').parentElement; "
                                "e.id.startsWith('step'); e = e.parentElement) ids.unshift(e.id); return ids; }"):
      if "expanded" not in (page.get_attribute(f"#{parent}", "class") or "").split(): page.click(f"#{parent} > p")
    page.click(f"#step-{ctx+1}-{step} > p")
    page.wait_for_selector(f"#step-{ctx+1}-{step}.active")
    page.wait_for_function(f"() => ({NODE_LABELS})().some(l => l.includes({json.dumps(expect)}))")
    return page.evaluate(NODE_LABELS)

  def screenshot(self, page, name:str, pattern:str, k:float=0.8):
    page.evaluate(FRAME_NODES, [pattern, k])
    page.wait_for_timeout(200)
    page.screenshot(path=self.shots/name)
    self.assertGreater((self.shots/name).stat().st_size, 20000, "the screenshot is (nearly) empty")

  def test_quickstart(self):
    page = self.open(viewer:=self.quickstart.ready())
    ctx, dissolve = viewer.dissolving()[0]
    labels = self.show_step(page, ctx, viewer.input_step(ctx, dissolve), "=1000, 0)")
    # one scope over the 1000 examples: the vargs name its RANGE (rmN, of size 1000) on axis 0 and keep axis 0 of the example
    rng = re.search(r"^VMAPIN\n\((rm\d+)=1000, 0\)\ndtypes.float", "\n\n".join(labels), flags=re.M)
    self.assertIsNotNone(rng, labels)
    self.assertIn(f"VMAPOUT\n({rng[1]}=1000)\ndtypes.float", "\n\n".join(labels))
    self.assertTrue(any(l.startswith(f"RANGE\n(-{rng[1][2:]}, AxisType.LOOP)") for l in labels), labels)
    self.assertEqual(self.errors, [])

  def test_nested_softmax(self):
    page = self.open(viewer:=self.nested.ready())
    # 0.12: the schedule dissolves both scopes in one step. 0.14: the inner scope (over 3) is batched first, as the outer one is traced
    (ctx, dissolve), *outer = viewer.dissolving()
    self.assertEqual(len(outer), 0 if LINE_012 else 1, viewer.ctxs)
    steps = [s["name"] for s in viewer.ctxs[ctx]["steps"]]
    labels = self.show_step(page, ctx, viewer.input_step(ctx, dissolve), "=3, 0)")
    vmap_labels = sorted(re.sub(r"rm\d+=", "rm=", l.split("\ndtypes")[0]) for l in labels if l.startswith("VMAP"))
    self.assertEqual(vmap_labels, ["VMAPIN\n(rm=2, 0, 0)", "VMAPIN\n(rm=3, 0)", "VMAPOUT\n(rm=2, 0, 0)", "VMAPOUT\n(rm=3, 0)"] if
                     LINE_012 else ["VMAPIN\n(rm=2, 0, 0)", "VMAPIN\n(rm=3, 0)", "VMAPOUT\n(rm=3, 0)"])
    # inside both scopes a node is in both RANGEs, printed in the label's own color (LOOP ranges used to be white on a light node)
    self.assertRegex("\n".join(labels), r"\(m\d+,m\d+\)")
    fills = page.evaluate("() => [...document.querySelectorAll('#nodes tspan.token')].filter(t => /^\\(m\\d+,m\\d+\\)$/.test(t.textContent))"
                          ".map(t => t.getAttribute('fill'))")
    self.assertTrue(fills and all(f == "#000000" for f in fills), fills)
    self.screenshot(page, "viz_vmap.png", "VMAPIN|RANGE")

    # the step where the scopes dissolve says so, and its rewrites remove the VMAPIN/VMAPOUT nodes
    self.assertTrue(steps[dissolve].startswith("apply rangeify" if LINE_012 else "batch scope"), steps[dissolve])
    self.assertIn("[4 VMAPIN/VMAPOUT dissolve]" if LINE_012 else "[1 VMAPIN/VMAPOUT dissolve]",
                  page.inner_text(f"#step-{ctx+1}-{dissolve} > p"))
    rewrites = viewer.get(viewer.ctxs[ctx]["steps"][dissolve]["query"])
    first = next(i for i,r in enumerate(rewrites) if any(l.startswith("-") and "VMAPOUT" in l for l in r["diff"] or []))
    self.show_step(page, ctx, dissolve, "=3, 0)")
    page.click(f"#rewrite-{first}:not(.disabled)")
    page.wait_for_selector(f"#rewrite-{first}.active")
    page.wait_for_selector("#nodes g.overlay")   # the graph of this rewrite, with the nodes it changed in a box
    diff = page.inner_text(".metadata pre code.wrap")
    self.assertTrue(any(l.startswith("-") and "Ops.VMAPOUT" in l for l in diff.splitlines()), diff)
    self.screenshot(page, "viz_vmap_dissolve.png", "VMAPOUT|BUFFERIZE" if LINE_012 else "VMAPIN|PERMUTE", k=0.75)
    self.assertEqual(self.errors, [])

if __name__ == "__main__":
  unittest.main()
