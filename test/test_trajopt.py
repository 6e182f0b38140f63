"""examples/trajopt.py against the same iLQR written in numpy float64, with the derivatives by hand: the same iterates, the same
solution; and its kernels per iteration: on 0.14 a constant, whatever T and B (the recursions are scans); on 0.12 a fixed number
per knot plus a constant, whatever B."""
import sys, unittest
from pathlib import Path
import numpy as np
from tinygrad import dtypes
from vmap_oracle import LINE_012

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import trajopt  # noqa: E402
from trajopt import WHEELBASE, GOAL, OBSTACLES, MARGIN, A_MAX, DELTA_MAX, W_U, W_OBS, W_BOUND, W_T, ALPHAS  # noqa: E402
from trajopt import MU0, MU_MIN, MU_MAX, MU_UP, MU_DOWN, HORIZON_S  # noqa: E402

# ---- the problem, by hand: dynamics, cost, and their derivatives
def relu(x): return np.maximum(x, 0)

def dynamics(x, u, dt):
  px, py, th, v, a, d = x[..., 0], x[..., 1], x[..., 2], x[..., 3], u[..., 0], u[..., 1]
  return np.stack([px + dt * v * np.cos(th), py + dt * v * np.sin(th), th + dt * v * np.tan(d) / WHEELBASE, v + dt * a], -1)

def dynamics_jacobians(x, u, dt):
  th, v, d = x[..., 2], x[..., 3], u[..., 1]
  A = np.broadcast_to(np.eye(4), x.shape[:-1] + (4, 4)).copy()
  A[..., 0, 2], A[..., 0, 3] = -dt * v * np.sin(th), dt * np.cos(th)
  A[..., 1, 2], A[..., 1, 3] = dt * v * np.cos(th), dt * np.sin(th)
  A[..., 2, 3] = dt * np.tan(d) / WHEELBASE
  B = np.zeros(x.shape[:-1] + (4, 2))
  B[..., 3, 0], B[..., 2, 1] = dt, dt * v / (WHEELBASE * np.cos(d) ** 2)
  return A, B

def running_cost(x, u, dt):
  cost = 0.5 * dt * (np.array(W_U) * u * u).sum(-1)
  for cx, cy, r in OBSTACLES: cost = cost + dt * W_OBS * relu(r + MARGIN - np.hypot(x[..., 0] - cx, x[..., 1] - cy)) ** 2
  for i, bound in ((0, A_MAX), (1, DELTA_MAX)): cost = cost + dt * W_BOUND * (relu(u[..., i] - bound) ** 2 + relu(-u[..., i] - bound) ** 2)
  return cost

def running_cost_derivatives(x, u, dt):
  """gradient (..., 6) and Hessian (..., 6, 6) in z = (state, control)"""
  g, H = np.zeros(x.shape[:-1] + (6,)), np.zeros(x.shape[:-1] + (6, 6))
  g[..., 4:] = dt * np.array(W_U) * u
  H[..., 4, 4], H[..., 5, 5] = dt * W_U[0], dt * W_U[1]
  for cx, cy, r in OBSTACLES:
    dp = np.stack([x[..., 0] - cx, x[..., 1] - cy], -1)
    dist = np.linalg.norm(dp, axis=-1)
    depth, n = relu(r + MARGIN - dist), dp / dist[..., None]           # n: d dist / dp
    dn = (np.eye(2) - n[..., :, None] * n[..., None, :]) / dist[..., None, None]
    g[..., :2] -= (2 * dt * W_OBS * depth)[..., None] * n
    H[..., :2, :2] += (2 * dt * W_OBS * (depth > 0))[..., None, None] * n[..., :, None] * n[..., None, :]
    H[..., :2, :2] -= (2 * dt * W_OBS * depth)[..., None, None] * dn
  for i, bound in ((0, A_MAX), (1, DELTA_MAX)):
    over, under = relu(u[..., i] - bound), relu(-u[..., i] - bound)
    g[..., 4 + i] += 2 * dt * W_BOUND * (over - under)
    H[..., 4 + i, 4 + i] += 2 * dt * W_BOUND * ((over > 0) + (under > 0))
  return g, H

def terminal_cost(x): return 0.5 * (np.array(W_T) * (x - GOAL) ** 2).sum(-1)
def total_cost(X, U, dt): return running_cost(X[..., :-1, :], U, dt).sum(-1) + terminal_cost(X[..., -1, :])

# ---- iLQR, one problem at a time, loops over knots
def ilqr_iteration(X, U, mu, dt):
  T = len(U)
  A, B = dynamics_jacobians(X[:-1], U, dt)
  g, H = running_cost_derivatives(X[:-1], U, dt)
  Vx, Vxx = np.array(W_T) * (X[-1] - GOAL), np.diag(W_T)
  K, k = np.zeros((T, 2, 4)), np.zeros((T, 2))
  for t in reversed(range(T)):
    Qx, Qu = g[t, :4] + A[t].T @ Vx, g[t, 4:] + B[t].T @ Vx
    Qxx, Qux = H[t, :4, :4] + A[t].T @ Vxx @ A[t], H[t, 4:, :4] + B[t].T @ Vxx @ A[t]
    Quu = H[t, 4:, 4:] + B[t].T @ Vxx @ B[t] + mu * np.eye(2)
    Quu_inv = np.linalg.inv(Quu)
    K[t], k[t] = -Quu_inv @ Qux, -Quu_inv @ Qu
    Vx = Qx + K[t].T @ Quu @ k[t] + K[t].T @ Qu + Qux.T @ k[t]
    Vxx = Qxx + K[t].T @ Quu @ K[t] + K[t].T @ Qux + Qux.T @ K[t]
  alphas = np.array(ALPHAS)
  Xc, Uc = np.zeros((len(alphas), T + 1, 4)), np.zeros((len(alphas), T, 2))
  Xc[:, 0] = X[0]
  for t in range(T):
    Uc[:, t] = U[t] + alphas[:, None] * k[t] + (Xc[:, t] - X[t]) @ K[t].T
    Xc[:, t + 1] = dynamics(Xc[:, t], Uc[:, t], dt)
  costs = total_cost(Xc, Uc, dt)
  best = int(np.argmin(np.where(np.isnan(costs), np.inf, costs)))
  if costs[best] < total_cost(X, U, dt): return Xc[best], Uc[best], max(mu / MU_DOWN, MU_MIN)
  return X, U, min(mu * MU_UP, MU_MAX)

def ilqr_numpy(start, T, iters):
  dt = HORIZON_S / T
  U = np.zeros((T, 2))
  X = [np.asarray(start, dtype=np.float64)]
  for t in range(T): X.append(dynamics(X[-1], U[t], dt))
  X, mu, costs = np.stack(X), MU0, []
  for _ in range(iters):
    X, U, mu = ilqr_iteration(X, U, mu, dt)
    costs.append(total_cost(X, U, dt))
  return X, U, np.array(costs)

def iteration_kernels(T:int, B:int) -> int:
  solver = trajopt.Solver(trajopt.start_poses(B), T)
  for _ in range(3): solver.iterate()
  return solver.kernels_per_iteration()

class TestTrajopt(unittest.TestCase):
  def test_same_iterates_as_numpy(self):
    T, B, iters = 30, 3, 25
    starts = trajopt.start_poses(B, seed=1)
    solver = trajopt.Solver(starts, T, dtypes.float64)
    initial = solver.cost.numpy()
    costs = np.stack([solver.iterate().numpy() for _ in range(iters)], 1)
    for b in range(B):
      X, U, want_costs = ilqr_numpy(starts[b], T, iters)
      # a nearly singular step can move an iterate by 1e-6 relative (float64 rounding, amplified); both end at the same solution
      np.testing.assert_allclose(costs[b], want_costs, rtol=1e-4)
      np.testing.assert_allclose(costs[b, -1], want_costs[-1], rtol=1e-9)
      np.testing.assert_allclose(solver.X.numpy()[b], X, atol=1e-6)
      np.testing.assert_allclose(solver.U.numpy()[b], U, atol=1e-6)
    self.assertTrue((costs[:, -1] < 0.01 * initial).all())   # and it got somewhere

  def test_converges(self):
    T, B = 50, 8
    solver = trajopt.Solver(trajopt.start_poses(B, seed=2), T)
    # the hardest problem (the 8th) reaches the goal after 55-75 iterations in float32, as its rounding falls (scalar or vector sin/cos)
    costs = np.stack([solver.iterate().numpy() for _ in range(90)], 1)
    self.assertTrue((np.diff(costs, axis=1) <= 0).all())
    goal, depth, bounds = trajopt.violations(solver.X.numpy(), solver.U.numpy())
    self.assertLess(goal.max(), trajopt.GOAL_TOL)
    self.assertLessEqual(depth.max(), trajopt.PENETRATION_TOL)
    self.assertLess(bounds.max(), trajopt.BOUND_TOL)

  def test_kernels_per_iteration(self):
    if LINE_012:
      # 0.12 has no scan: the recursions over time are kernels per knot (a Riccati step 4, its outputs; a rollout step 2: it reads row
      # k of the buffer it writes row k + 1 of, so its result is computed into a temporary first), the derivatives and the line search
      # a fixed number; nothing grows with the number of problems
      base = iteration_kernels(8, 2)
      self.assertEqual(iteration_kernels(8, 5), base)
      self.assertEqual(iteration_kernels(12, 2), base + 6 * 4)
    else:
      # 0.14: the Riccati pass and the rollouts are one scan kernel each (all knots, all problems, all step sizes), so an iteration is
      # a fixed number of kernels, whatever T and B
      for T, B in ((8, 2), (8, 5), (40, 2)): self.assertEqual(iteration_kernels(T, B), 21, f"T={T} B={B}")

def mpc_period_numpy(x, U_prev, iters, dt):
  """one control period of examples/mpc.py, by hand: the last plan's controls shifted by one knot, rolled out from the state x, the
  damping reset, then `iters` iLQR iterations"""
  U = np.concatenate([U_prev[1:], U_prev[-1:]])
  X = [np.asarray(x, np.float64)]
  for t in range(len(U)): X.append(dynamics(X[-1], U[t], dt))
  X, mu = np.stack(X), MU0
  for _ in range(iters): X, U, mu = ilqr_iteration(X, U, mu, dt)
  return X, U

@unittest.skipIf(LINE_012, "examples/mpc.py needs scan (tinygrad 0.14)")
class TestMPC(unittest.TestCase):
  def test_periods_match_numpy(self):
    # a short closed loop: each period's solve in float32 against numpy's iLQR in float64 from the same warm start (the plan the
    # solver held before the period, the car's state), to float32's tolerance (the largest error seen: 1.2e-4)
    import mpc
    T, B, iters = 20, 3, 2
    x = trajopt.start_poses(B, seed=1)
    controller = mpc.Controller(x, T, iters)
    for _ in range(6):
      U_prev = controller.solver.U.numpy().astype(np.float64)
      u = controller(x)
      X_got, U_got = controller.plan()
      np.testing.assert_array_equal(u, U_got[:, 0])
      for b in range(B):
        X, U = mpc_period_numpy(x[b], U_prev[b], iters, controller.dt)
        np.testing.assert_allclose(U_got[b], U, atol=1e-3)
        np.testing.assert_allclose(X_got[b], X, atol=1e-3)
      x = dynamics(x, u.clip(-mpc.LIMITS, mpc.LIMITS), controller.dt)
    # a period's kernels: the warm start's (the rollout one scan kernel) and 21 an iteration, whatever T and B (test_examples' test_mpc:
    # the same at T=50, B=1)
    self.assertEqual(controller.kernels_per_period(), 9 + iters * 21)

if __name__ == "__main__":
  unittest.main()
