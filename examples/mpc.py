"""Model-predictive control: examples/trajopt.py's iLQR in a closed loop, one car (or a fleet, vmapped) driving to a goal past obstacles.

  DEV=CPU python examples/mpc.py [--T 50] [--fleet B] [--iters 2] [--periods 400] [--plot]     (tinygrad 0.14; after `make demo`'s set-up)

The car and its cost are trajopt.py's (a kinematic bicycle, GOAL 12 m ahead, two OBSTACLES with a gap between them), but the
controller sees only HORIZON_S = 3.5 s ahead, and the terminal cost wants the car stopped at the goal by the horizon's end: a plan
that starts from rest and ends at rest within A_MAX covers at most A_MAX (HORIZON_S / 2)^2 = 6.1 m, half the way to the goal, so
the plan is redone as the car moves (a car takes two to three horizons to arrive). The applied control saturates at the bounds
(A_MAX, DELTA_MAX): to the solver they are penalties, and a short horizon's plan leans on them.

Every control period (one knot, HORIZON_S / T seconds):
  1. warm start: the last period's controls shifted by one knot (the last repeated), rolled out from the car's measured state
     (trajopt's `Solver.warm_start`, one scan kernel), the damping reset;
  2. `--iters` iLQR iterations (trajopt's `Solver._iterate`: 21 kernels each, whatever T and B);
  3. the first control is applied and the true car (numpy, trajopt's `rollout_numpy`) moves one step.
Steps 1 and 2 are one TinyJit, replayed every period: a constant number of kernels whatever T and B. The state goes in and the
control comes out through the host's view of the device buffers (the CPU device's memory), so a period launches no copy.
With `--fleet B` the same solver runs B cars from different start poses at once (the Solver's problems, vmapped).
"""
import argparse, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))   # the fork's tinygrad/ when run from a clone without PYTHONPATH
sys.path.insert(1, str(Path(__file__).resolve().parent))
from tinygrad import Tensor, TinyJit, Device, dtypes
from tinygrad.dtype import DType, _to_np_dtype
from tinygrad.fork_line import LINE_012
from trajopt import Solver, jit_kernels, rollout_numpy, start_poses, violations, GOAL, OBSTACLES, A_MAX, DELTA_MAX
from trajopt import GOAL_TOL, PENETRATION_TOL

HORIZON_S = 3.5          # seconds the controller looks ahead
LIMITS = np.array([A_MAX, DELTA_MAX])
STOP_SPEED = 0.05
PLAN_EVERY = 12          # periods between the plans --plot draws        # m/s: a car within GOAL_TOL of the goal and slower than this has arrived

def host_view(t:Tensor) -> np.ndarray|None:
  """a numpy array over a realized Tensor's own memory where the device lets the host see it (the CPU device), else None"""
  buf = t._buffer()
  if not hasattr(buf.allocator, "_as_buffer"): return None
  return np.frombuffer(buf.as_memoryview(force_zero_copy=True), dtype=_to_np_dtype(t.dtype)).reshape(t.shape)

class Controller:
  """the MPC solve of one control period for B cars: `controller(states)` -> the controls to apply now (B, 2)"""
  def __init__(self, starts:np.ndarray, T:int=50, iters:int=2, dtype:DType=dtypes.float32):
    self.solver, self.iters = Solver(starts, T, dtype, horizon_s=HORIZON_S), iters
    self.dt = self.solver.dt
    self.x0 = Tensor.zeros(len(starts), 4, dtype=dtype).contiguous().realize()   # the measured states, the jit's input buffer
    self.x0_host, self.U_host = host_view(self.x0), host_view(self.solver.U)
    self.solve = TinyJit(self._solve)

  def _solve(self, x0:Tensor):
    self.solver.warm_start(x0)
    for _ in range(self.iters): self.solver._iterate()

  def __call__(self, states:np.ndarray) -> np.ndarray:
    if self.x0_host is None: self.x0.assign(Tensor(states, dtype=self.x0.dtype)).realize()
    else: self.x0_host[:] = states
    self.solve(self.x0)
    if self.U_host is None: return self.solver.U.numpy()[:, 0].astype(np.float64)
    Device[self.x0.device].synchronize()
    return self.U_host[:, 0].astype(np.float64)

  def plan(self) -> tuple[np.ndarray, np.ndarray]:
    """the current plan: states (B, T+1, 4) and controls (B, T, 2)"""
    return self.solver.X.numpy(), self.solver.U.numpy()

  def kernels_per_period(self) -> int: return jit_kernels(self.solve)

def closed_loop(controller:Controller, starts:np.ndarray, periods:int, plans:list|None=None) -> tuple[np.ndarray, ...]:
  """-> the path (B, P+1, 4), the applied controls (B, P, 2), the solve time of each period (P,) in s, and the period each car
  arrived (B,: -1 if not); P <= periods: the loop stops once every car has arrived. `plans` gets the planned states (B, T+1, 4)
  of every PLAN_EVERY-th period (read outside the timing)"""
  x, path, controls, times = np.asarray(starts, np.float64), [np.asarray(starts, np.float64)], [], []
  arrived = np.full(len(starts), -1)
  for p in range(periods):
    st = time.perf_counter()
    u = controller(x)
    times.append(time.perf_counter() - st)
    u = u.clip(-LIMITS, LIMITS)               # the actuators saturate: the bounds are the cost's penalties, the plan may exceed them
    if plans is not None and p % PLAN_EVERY == 0: plans.append(controller.plan()[0])
    x = rollout_numpy(x, u[:, None], controller.dt)[:, 1]
    path.append(x); controls.append(u)
    done = (np.linalg.norm(x[:, :2] - np.array(GOAL[:2]), axis=1) < GOAL_TOL) & (np.abs(x[:, 3]) < STOP_SPEED)
    arrived[(arrived < 0) & done] = p + 1
    if (arrived >= 0).all(): break
  return np.stack(path, 1), np.stack(controls, 1), np.array(times), arrived

WARMUP = 3   # periods before the timing: TinyJit runs the first call, captures the second, replays from the third

def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--T", type=int, default=50, help="knots in the horizon")
  parser.add_argument("--fleet", type=int, default=1, metavar="B", help="cars driven at once (default: one)")
  parser.add_argument("--iters", type=int, default=2, help="iLQR iterations per control period")
  parser.add_argument("--periods", type=int, default=400, help="control periods at most")
  parser.add_argument("--plot", action="store_true", help="write docs/mpc.png")
  args = parser.parse_args()
  if LINE_012:
    print("mpc.py needs tinygrad 0.14's scan (the frozen 0.12 line has none): make fork")
    return 0
  starts = start_poses(args.fleet)
  controller = Controller(starts, args.T, args.iters)
  path, controls, times, arrived = closed_loop(controller, starts, args.periods, plans:=[] if args.plot else None)
  steady = times[WARMUP:] * 1e3
  print(f"T={args.T} knots ({controller.dt * 1e3:.0f} ms each, horizon {HORIZON_S} s), {args.fleet} car{'s' * (args.fleet > 1)}, "
        f"{args.iters} iLQR iterations per control period: {controller.kernels_per_period()} kernels per period")
  print(f"solve per control period (TinyJit, {len(steady)} periods after {WARMUP}): median {np.median(steady):.3f} ms, "
        f"worst {steady.max():.3f} ms; first three {', '.join(f'{t * 1e3:.0f}' for t in times[:WARMUP])} ms")
  goal, depth, _ = violations(path, controls)
  clearance = (np.linalg.norm(path[:, :, None, :2] - np.array(OBSTACLES)[:, :2], axis=-1) - np.array(OBSTACLES)[:, 2]).min()
  ok = (arrived >= 0).all() and depth.max() <= PENETRATION_TOL
  saturated = (np.abs(controls) >= LIMITS).any(axis=2)
  print(f"arrived (within {GOAL_TOL} m of the goal, slower than {STOP_SPEED} m/s): {(arrived >= 0).sum()} of {args.fleet} cars, "
        f"the last after {arrived.max() * controller.dt:.2f} s ({arrived.max()} periods); goal error max {goal.max():.4f} m")
  print(f"closest approach to an obstacle {clearance:.3f} m (penetration max {depth.max():.4f} m, <= {PENETRATION_TOL}), "
        f"a control saturated at its bound in {saturated.sum()} of {saturated.size} car-periods")
  if args.plot: plot(path, controls, plans, controller.dt, "docs/mpc.png")
  print("PASS" if ok else "FAIL")
  return 0 if ok else 1

def plot(path:np.ndarray, controls:np.ndarray, plans:list[np.ndarray], dt:float, out:str):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax, cx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.6, 1]})
  for ox, oy, r in OBSTACLES: ax.add_patch(plt.Circle((ox, oy), r, color="0.6"))
  for i, plan in enumerate(plans):                 # the first car's plans: each reaches HORIZON_S ahead, ending short of the goal
    ax.plot(plan[0, :, 0], plan[0, :, 1], "k--", lw=0.6, alpha=0.6, label=None if i else f"car 0's plan every {PLAN_EVERY} periods (x: its end)")
    ax.plot(*plan[0, -1, :2], "kx", ms=5)
  for x in path: ax.plot(x[:, 0], x[:, 1], lw=1)
  ax.plot(path[:, 0, 0], path[:, 0, 1], "k.", ms=4, label="start")
  ax.plot(*GOAL[:2], "r*", ms=12, label="goal")
  ax.set_aspect("equal"); ax.set_xlabel("px [m]"); ax.set_ylabel("py [m]"); ax.legend(loc="lower right")
  ax.set_title(f"closed loop: {len(path)} car{'s' * (len(path) > 1)}, re-planned every {dt * 1e3:.0f} ms over {HORIZON_S} s")
  t = np.arange(controls.shape[1]) * dt
  for i, (name, bound) in enumerate((("a [m/s²]", A_MAX), ("δ [rad]", DELTA_MAX))):
    cx.plot(t, controls[:, :, i].T, lw=0.8, color=f"C{i}", label=[name] + [None] * (len(controls) - 1))
    cx.axhline(bound, color=f"C{i}", ls=":", lw=0.8); cx.axhline(-bound, color=f"C{i}", ls=":", lw=0.8)
  cx.set_xlabel("time [s]"); cx.set_title("applied controls (dotted: bounds)"); cx.legend(loc="upper right")
  fig.tight_layout(); fig.savefig(out, dpi=110)
  print(f"wrote {out}")

if __name__ == "__main__": sys.exit(main())
