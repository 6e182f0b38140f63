"""Dynamics Jacobians over a trajectory: `vmap(jacfwd(step, argnums=(0, 1)))` of a kinematic bicycle model.

  CPU=1 PYTHONPATH=. python examples/bicycle_jacobian.py

Trajectory optimization linearizes the dynamics at every point of a trajectory: A = d step / d state (4x4) and B = d step / d control
(4x2), together the 4x6 Jacobian [A | B]. `step` is written for ONE point; jacfwd builds its Jacobian as a vmap of forward-mode
products over the basis directions, and the outer vmap maps the trajectory. Checked against the analytic Jacobian; the kernel count
does not grow with the trajectory length N.
"""
import sys, time
import numpy as np
from tinygrad import Tensor, TinyJit, GlobalCounters, Device, dtypes, vmap, jacfwd

DT, L = 0.1, 2.5   # time step, wheelbase

def step(state:Tensor, control:Tensor) -> Tensor:
  """one Euler step of the kinematic bicycle: state (px, py, theta, v), control (a, delta)"""
  px, py, theta, v = state[0], state[1], state[2], state[3]
  a, delta = control[0], control[1]
  return Tensor.stack(px + DT * v * theta.cos(), py + DT * v * theta.sin(), theta + DT * v * delta.tan() / L, v + DT * a)

def analytic(states:np.ndarray, controls:np.ndarray) -> np.ndarray:
  """the (N, 4, 6) Jacobians [d/dstate | d/dcontrol], by hand"""
  theta, v, delta = states[:, 2], states[:, 3], controls[:, 1]
  J = np.zeros((len(states), 4, 6))
  J[:, 0, 0] = J[:, 1, 1] = J[:, 2, 2] = J[:, 3, 3] = 1
  J[:, 0, 2], J[:, 0, 3] = -DT * v * np.sin(theta), DT * np.cos(theta)
  J[:, 1, 2], J[:, 1, 3] = DT * v * np.cos(theta), DT * np.sin(theta)
  J[:, 2, 3], J[:, 2, 5] = DT * np.tan(delta) / L, DT * v / (L * np.cos(delta) ** 2)
  J[:, 3, 4] = DT
  return J

jacobians = vmap(jacfwd(step, argnums=(0, 1)))   # (N, 4, 4) and (N, 4, 2)

def trajectory(n:int, seed=0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return rng.standard_normal((n, 4)), rng.uniform(-0.5, 0.5, (n, 2))

def run(states:Tensor, controls:Tensor) -> Tensor:
  A, B = jacobians(states, controls)
  return A.cat(B, dim=2).realize()

ok = True
for n in (10, 1000):
  states, controls = trajectory(n)
  S, C = Tensor(states, dtype=dtypes.float64).realize(), Tensor(controls, dtype=dtypes.float64).realize()
  before = GlobalCounters.kernel_count
  J = run(S, C)
  kernels = GlobalCounters.kernel_count - before
  err = np.abs(J.numpy() - analytic(states, controls)).max()
  ok &= J.shape == (n, 4, 6) and err < 1e-12
  print(f"N={n:5d}: {J.shape} Jacobians, max error vs analytic {err:.1e}, {kernels} kernels")

N = 50000
states, controls = trajectory(N, seed=1)
S, C = Tensor(states, dtype=dtypes.float64).realize(), Tensor(controls, dtype=dtypes.float64).realize()
jit_run = TinyJit(run)
for name, fn in (("eager", run), ("TinyJit", jit_run)):
  for _ in range(3): fn(S, C)
  Device[Device.DEFAULT].synchronize()
  st = time.perf_counter()
  for _ in range(5): J = fn(S, C)
  Device[Device.DEFAULT].synchronize()   # kernels run asynchronously: time until they are done
  print(f"N={N}: {(time.perf_counter() - st) / 5 * 1e3:.1f} ms per call ({name})")
ok &= np.abs(J.numpy() - analytic(states, controls)).max() < 1e-12
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
