"""tinygrad/scan_kernel.py: a scan as ONE kernel (the carry in registers across a LOOP range) against numpy loops in float64: the
bicycle rollout and a Riccati recursion, forward and reversed, batched, the kernels per call at two lengths, and the bodies that do not
fuse (None, and DEBUG=2 says why)."""
import contextlib, io, json, os, subprocess, sys, unittest
from pathlib import Path
import numpy as np
from tinygrad.fork_line import LINE_012
if LINE_012: raise unittest.SkipTest("0.14 line only: the scan kernel is a 0.14 custom kernel (LOOP range, REG placeholders)")
from tinygrad import Tensor, dtypes
from tinygrad.helpers import GlobalCounters, Context
from tinygrad.scan_kernel import scan_kernel

DT, L = 0.1, 2.5

def bicycle(c, x):
  (s,), (u,) = c, x
  px, py, th, v = s[0], s[1], s[2], s[3]
  n = Tensor.stack(px + DT * v * th.cos(), py + DT * v * th.sin(), th + DT * v * u[1].tan() / L, v + DT * u[0])
  return [n], [n]

def bicycle_np(x, us):
  ys = []
  for u in us:
    px, py, th, v = x
    x = np.array([px + DT * v * np.cos(th), py + DT * v * np.sin(th), th + DT * v * np.tan(u[1]) / L, v + DT * u[0]])
    ys.append(x)
  return x, np.stack(ys)

def riccati(c, x):
  """a discrete Riccati step: a 4x4 carry, small matmuls and a 2x2 inverse by hand; y is the gain K"""
  (P,), (A, B) = c, x
  S = B.T @ P @ B + Tensor.eye(2, dtype=P.dtype)
  det = S[0, 0] * S[1, 1] - S[0, 1] * S[1, 0]
  Si = Tensor.stack(Tensor.stack(S[1, 1], -S[0, 1]), Tensor.stack(-S[1, 0], S[0, 0])) / det
  K = Si @ B.T @ P @ A
  return [A.T @ P @ A - A.T @ P @ B @ K + Tensor.eye(4, dtype=P.dtype)], [K]

def riccati_np(P, As, Bs):
  Ks = []
  for A, B in zip(As, Bs):
    K = np.linalg.inv(B.T @ P @ B + np.eye(2)) @ B.T @ P @ A
    P = A.T @ P @ A - A.T @ P @ B @ K + np.eye(4)
    Ks.append(K)
  return P, np.stack(Ks)

def run(step, init, xs, length, reverse=False, batch=None):
  """scan_kernel on realized leaves: its results as numpy and the kernels the call ran"""
  init, xs = [Tensor(a).realize() for a in init], [Tensor(a).realize() for a in xs]
  GlobalCounters.reset()
  out = scan_kernel(step, init, xs, length, reverse, batch=batch)
  assert out is not None
  Tensor.realize(*out[0], *out[1])
  kernels = GlobalCounters.kernel_count
  return [t.numpy() for t in out[0]], [t.numpy() for t in out[1]], kernels

def bicycle_data(T, seed=0):
  r = np.random.default_rng(seed)
  return np.array([0.0, 0.1, 0.2, 1.0]) + 0.1 * r.standard_normal(4), r.uniform(-0.5, 0.5, (T, 2))

class TestScanKernel(unittest.TestCase):
  def test_bicycle(self):
    for T in (7, 200):
      x0, us = bicycle_data(T)
      (c,), (ys,), kernels = run(bicycle, [x0], [us], T)
      ec, eys = bicycle_np(x0, us)
      np.testing.assert_allclose(c, ec, rtol=1e-12, atol=1e-12)
      np.testing.assert_allclose(ys, eys, rtol=1e-12, atol=1e-12)
      self.assertEqual(kernels, 1, f"T={T}")

  def test_bicycle_reverse(self):
    x0, us = bicycle_data(9, seed=1)
    (c,), (ys,), kernels = run(bicycle, [x0], [us], 9, reverse=True)
    ec, eys = bicycle_np(x0, us[::-1])
    np.testing.assert_allclose(c, ec, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ys, eys[::-1], rtol=1e-12, atol=1e-12)   # ys[t] belongs to xs[t]
    self.assertEqual(kernels, 1)

  def test_riccati(self):
    r = np.random.default_rng(2)
    for T in (5, 60):
      As, Bs = np.eye(4) + 0.1 * r.standard_normal((T, 4, 4)), 0.3 * r.standard_normal((T, 4, 2))
      for reverse in (False, True):
        (P,), (Ks,), kernels = run(riccati, [np.eye(4)], [As, Bs], T, reverse=reverse)
        eP, eKs = riccati_np(np.eye(4), As[::-1] if reverse else As, Bs[::-1] if reverse else Bs)
        np.testing.assert_allclose(P, eP, rtol=1e-10)
        np.testing.assert_allclose(Ks, eKs[::-1] if reverse else eKs, rtol=1e-9, atol=1e-12)
        self.assertEqual(kernels, 1, f"T={T} reverse={reverse}")

  def test_several_leaves_scalar_carry_and_reduce(self):
    # carry (a vector, a scalar count), xs two leaves, ys two leaves: a permuting update (no element reads itself)
    def step(c, x):
      (v, n), (w, k) = c, x
      return [Tensor.stack(v[2], v[0] * w.sum(), v[1] + k), n + 1], [v.max(), (v * w[:3]).sum() + k]
    r, T = np.random.default_rng(3), 11
    v0, ws, ks = r.standard_normal(3), r.uniform(0.5, 1.0, (T, 5)), r.standard_normal(T)
    (v, n), (y0, y1), kernels = run(step, [v0, np.array(0.0)], [ws, ks], T)
    ev, e0, e1 = v0.copy(), [], []
    for w, k in zip(ws, ks):
      e0.append(ev.max()); e1.append((ev * w[:3]).sum() + k)
      ev = np.array([ev[2], ev[0] * w.sum(), ev[1] + k])
    np.testing.assert_allclose(v, ev, rtol=1e-12)
    np.testing.assert_allclose(n, T)
    np.testing.assert_allclose(y0, e0, rtol=1e-12)
    np.testing.assert_allclose(y1, e1, rtol=1e-12)
    self.assertEqual(kernels, 1)

  def test_float32(self):
    x0, us = bicycle_data(20)
    (c,), (ys,), _ = run(bicycle, [x0.astype(np.float32)], [us.astype(np.float32)], 20)
    self.assertEqual(c.dtype, np.float32)
    np.testing.assert_allclose(ys, bicycle_np(x0, us)[1], rtol=1e-4, atol=1e-5)

  def test_batch(self):
    B, T = 5, 30
    r = np.random.default_rng(4)
    x0s, uss = np.array([0.0, 0.1, 0.2, 1.0]) + 0.1 * r.standard_normal((B, 4)), r.uniform(-0.5, 0.5, (B, T, 2))
    (c,), (ys,), kernels = run(bicycle, [x0s], [uss], T, batch=B)
    for b in range(B):
      ec, eys = bicycle_np(x0s[b], uss[b])
      np.testing.assert_allclose(c[b], ec, rtol=1e-12, atol=1e-12)
      np.testing.assert_allclose(ys[b], eys, rtol=1e-12, atol=1e-12)
    self.assertEqual(kernels, 1)

def cuda_programs(*outs:Tensor) -> list:
  """the schedule's kernels as the CUDA renderer (sm_80) builds them, without a GPU or nvrtc (as test_gpu_emulated.py does)"""
  from tinygrad.helpers import Target
  from tinygrad.uop.ops import Ops
  from tinygrad.renderer import Compiler
  from tinygrad.renderer.cstyle import CUDARenderer
  from tinygrad.codegen import do_to_program
  class SourceOnly(Compiler):
    def compile(self, src:str) -> bytes: return src.encode()
  class CUDASourceRenderer(CUDARenderer):
    def __init__(self):
      super(CUDARenderer, self).__init__(Target("CUDA", "CUDA", "sm_80"))
      self.compiler, self.tensor_cores = SourceOnly(), []
  linear, _ = Tensor.linear_with_vars(*outs)
  ps = [do_to_program(c.src[0], CUDASourceRenderer()) for c in linear.src if c.src[0].op is Ops.SINK]
  return [(tuple(p.arg.global_size), next(u.arg for u in p.src if u.op is Ops.SOURCE)) for p in ps]

EMULATED = """
import json, sys, numpy as np
from tinygrad import Tensor, Device
from tinygrad.helpers import GlobalCounters
from tinygrad.scan_kernel import scan_kernel
from test_scan_kernel import bicycle, bicycle_np
B, T, r = 3, 5, np.random.default_rng(5)
x0s, uss = np.array([0.0, 0.1, 0.2, 1.0]) + 0.1 * r.standard_normal((B, 4)), r.uniform(-0.5, 0.5, (B, T, 2))
init, xs = Tensor(x0s.astype(np.float32)).realize(), Tensor(uss.astype(np.float32)).realize()
GlobalCounters.reset()
(c,), (ys,) = scan_kernel(bicycle, [init], [xs], T, batch=B)
Tensor.realize(c, ys)
err = max(float(np.abs(ys.numpy()[b] - bicycle_np(x0s[b], uss[b])[1]).max()) for b in range(B))
print(json.dumps([Device.DEFAULT, GlobalCounters.kernel_count, err]))
"""

class TestScanKernelGPU(unittest.TestCase):
  def test_batch_is_the_grid_and_steps_a_loop(self):
    B, T = 1000, 50
    (c,), (ys,) = scan_kernel(bicycle, [Tensor(np.zeros((B, 4))).realize()], [Tensor(np.zeros((B, T, 2))).realize()], T, batch=B)
    (gsz, src), = cuda_programs(c, ys)
    self.assertEqual(gsz, (B, 1, 1))                     # one thread per batch index
    self.assertIn(f"< {T}; ", src)                       # the steps: a loop inside the thread
    self.assertIn("double buf0[4];", src)                # the carry: 4 registers

  def test_vmap_of_scan_is_the_same_kernel(self):
    # scan inside a vmap scope runs the batched kernel: the batch on the grid, through vmap (tinygrad/scan.py)
    from tinygrad import scan, vmap
    B, T = 1000, 50
    S0, U = Tensor(np.zeros((B, 4))).realize(), Tensor(np.zeros((B, T, 2))).realize()
    c, ys = vmap(lambda s, u: scan(lambda c, x: tuple(v[0] for v in bicycle([c], [x])), s, u))(S0, U)
    (gsz, src), = cuda_programs(c, ys)
    self.assertEqual(gsz, (B, 1, 1))
    self.assertIn(f"< {T}; ", src)
    self.assertIn("double buf0[4];", src)

  def test_batch_on_the_emulator(self):
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k not in {"CPU", "DEV", "DEBUG"}}
    r = subprocess.run([sys.executable, "-c", EMULATED], capture_output=True, text=True, cwd=root,
                       env={**env, "DEV": "PYTHON::sm_80", "PYTHONPATH": f"{root}{os.pathsep}{root / 'test'}"})
    self.assertEqual(r.returncode, 0, r.stderr)
    dev, kernels, err = json.loads(r.stdout.strip().splitlines()[-1])
    self.assertEqual((dev, kernels), ("PYTHON", 1))
    self.assertLess(err, 1e-5)

class TestNoFuse(unittest.TestCase):
  def none_and_reason(self, step, init, xs, T) -> str:
    init, xs = [Tensor(a).realize() for a in init], [Tensor(a).realize() for a in xs]
    with contextlib.redirect_stdout(io.StringIO()) as out, Context(DEBUG=2): self.assertIsNone(scan_kernel(step, init, xs, T, False))
    return out.getvalue()

  def test_realize_inside(self):
    def step(c, x): return [(c[0] * 2 + x[0]).realize()], []
    self.assertIn("realizes", self.none_and_reason(step, [np.zeros(3)], [np.ones((4, 3))], 4))

  def test_large_reduce(self):
    def step(c, x): return [c[0] + x[0].sum()], []
    self.assertIn("SCAN_KERNEL_MAX", self.none_and_reason(step, [np.zeros(())], [np.ones((3, 100_000))], 3))

  def test_closes_over_a_large_value(self):
    w = Tensor(np.arange(30_000.0)).realize()
    def step(c, x): return [c[0] + (x[0].reshape(3, 1) * w.reshape(3, 10_000)).sum(1)], []
    self.assertIn("closes over a value of 30000 elements", self.none_and_reason(step, [np.zeros(3)], [np.ones((4, 3))], 4))

  def test_carry_changes_shape(self):
    def step(c, x): return [c[0].sum()], []
    self.assertIn("carry", self.none_and_reason(step, [np.zeros(3)], [np.ones((4, 3))], 4))

if __name__ == "__main__":
  unittest.main()
