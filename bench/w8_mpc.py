"""W8 of the benchmark: examples/mpc.py's closed loop (model-predictive control), the solve of one control period in tinygrad, JAX and
torch side by side: the last plan shifted by one knot and rolled out from the car's state, then ITERS iLQR iterations (W7's), the
first control applied to the numpy car. The same course, horizon, iterations and periods in all three.

  PYTHONPATH=. python bench/w8_mpc.py                # time every framework (T=50, B=1), then check each against numpy
  PYTHONPATH=. python bench/w8_mpc.py --only jax --B 16
  PYTHONPATH=. python bench/w8_mpc.py --write        # each framework in a fresh process on one core (bench/run.py's THREAD_ENV), at
                                                     # B=1 and B=16: bench/results-w8.json, then RESULTS.md's W8 section (`make bench`)
  PYTHONPATH=. python bench/w8_mpc.py --quick        # CI's smoke run (`make bench QUICK=1`): small, every framework checked

tinygrad: examples/mpc.py's Controller: trajopt's Solver, its warm start and ITERS iterations under one TinyJit (51 kernels a period
          whatever T and B), the state in and the control out through the host's view of the CPU device's buffers.
jax:      jax.jit(jax.vmap(one car's period)): the shift, the rollout (lax.scan) and W7's iteration (`jax_problem`) ITERS times.
torch:    W7's make_torch: the rollout a Python loop over the knots, then its iterate ITERS times (eager, the recursions in Python).
"""
import os, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
if __name__ == "__main__":   # bench/run.py's one-thread environment and one core, before numpy, jax, torch or tinygrad is imported
  from run import THREAD_ENV
  os.environ.update({k: v for k, v in THREAD_ENV.items() if k not in os.environ})
  if hasattr(os, "sched_setaffinity"): os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})

import argparse, json  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from trajopt import MU0, start_poses  # noqa: E402
from w7_trajopt import jax_problem, make_torch, process_rows, write_results  # noqa: E402

T, ITERS, PERIODS, FLEET = 50, 2, 120, 16   # the timing: knots, iterations per period, periods (8.4 s: no car has arrived yet), fleet
IMPLS = {"tinygrad": "tinygrad TinyJit (trajopt's Solver: warm start + iterations)", "jax": "jax.jit(jax.vmap(period)) + lax.scan",
         "torch": "torch.func + Python loops over the knots"}

class JaxController:
  """examples/mpc.py's Controller in JAX: `controller(states)` -> the controls to apply now (B, 2); the plan stays on the device"""
  def __init__(self, jax, jnp, starts, T:int, iters:int):
    from mpc import HORIZON_S
    iteration, trajectory_cost, step = jax_problem(jax, jnp, T, jnp.float32, HORIZON_S)
    def period(x0, U_prev):                             # one car
      U = jnp.concatenate([U_prev[1:], U_prev[-1:]])
      X = jnp.concatenate([x0[None], jax.lax.scan(lambda x, u: (step(x, u),) * 2, x0, U)[1]])
      state = (X, U, jnp.asarray(MU0, jnp.float32), trajectory_cost(X, U))
      for _ in range(iters): state = iteration(*state)
      return state[1], state[1][0]
    self.solve, self.jnp, self.dt = jax.jit(jax.vmap(period)), jnp, HORIZON_S / T
    self.U = jnp.zeros((len(starts), T, 2), jnp.float32)
  def __call__(self, states:np.ndarray) -> np.ndarray:
    self.U, u = self.solve(self.jnp.asarray(states, self.jnp.float32), self.U)
    return np.asarray(u, np.float64)

class TorchController:
  """examples/mpc.py's Controller in torch"""
  def __init__(self, torch, starts, T:int, iters:int):
    from mpc import HORIZON_S
    state, self.iterate = make_torch(torch, T, starts, torch.float32, HORIZON_S)
    self.torch, self.U, self.iters, self.dt = torch, state[1], iters, HORIZON_S / T
  def __call__(self, states:np.ndarray) -> np.ndarray:
    torch, step = self.torch, self.iterate.batched_step
    with torch.no_grad():
      U = torch.cat([self.U[:, 1:], self.U[:, -1:]], 1)
      xs = [torch.tensor(states, dtype=torch.float32)]
      for t in range(U.shape[1]): xs.append(step(xs[-1], U[:, t]))
      X = torch.stack(xs, 1)
      state = (X, U, torch.full((len(X),), MU0, dtype=torch.float32), self.iterate.trajectory_costs(X, U))
      for _ in range(self.iters): state = self.iterate(state)
    self.U = state[1]
    return self.U[:, 0].numpy().astype(np.float64)

class NumpyController:
  """the spec: test/test_trajopt.py's numpy iLQR (float64), one car at a time"""
  def __init__(self, starts, T:int, iters:int):
    from mpc import HORIZON_S
    self.U, self.iters, self.dt = np.zeros((len(starts), T, 2)), iters, HORIZON_S / T
  def __call__(self, states:np.ndarray) -> np.ndarray:
    sys.path.insert(0, str(ROOT / "test"))
    from test_trajopt import mpc_period_numpy
    self.U = np.stack([mpc_period_numpy(x, U, self.iters, self.dt)[1] for x, U in zip(states, self.U)])
    return self.U[:, 0]

def make_controller(impl:str, starts:np.ndarray, T:int, iters:int):
  if impl == "tinygrad":
    from mpc import Controller
    return Controller(starts, T, iters)
  if impl == "jax":
    import jax, jax.numpy as jnp
    return JaxController(jax, jnp, starts, T, iters)
  if impl == "numpy": return NumpyController(starts, T, iters)
  import torch
  torch.set_num_threads(1)
  return TorchController(torch, starts, T, iters)

def measure(impl:str, T:int, B:int, periods:int) -> dict:
  """one framework's row: the closed loop's solve per period, median and worst after the warm-up, and the first period's"""
  from mpc import WARMUP, closed_loop
  controller = make_controller(impl, start_poses(B), T, ITERS)
  times = closed_loop(controller, start_poses(B), periods)[2] * 1e3
  row = {"impl": impl, "label": IMPLS[impl], "T": T, "B": B, "iters": ITERS, "periods": len(times), "ms": float(np.median(times[WARMUP:])),
         "worst_ms": float(times[WARMUP:].max()), "first_ms": float(times[0])}
  if impl == "tinygrad": row["kernels"] = controller.kernels_per_period()
  return row

def check(impls:list[str], T:int=20, B:int=3, periods:int=25, atol:float=5e-3) -> bool:
  """each framework's closed loop (float32) against numpy's (float64): the applied controls and the path, every period"""
  from mpc import closed_loop
  starts = start_poses(B, seed=1)
  want_path, want_u = closed_loop(make_controller("numpy", starts, T, ITERS), starts, periods)[:2]
  print(f"check: the closed loop, T={T}, B={B}, {periods} periods, {ITERS} iterations a period, float32 against numpy float64")
  ok = True
  for impl in impls:
    path, u = closed_loop(make_controller(impl, starts, T, ITERS), starts, periods)[:2]
    u_err, x_err = np.abs(u - want_u).max(), np.abs(path - want_path).max()
    ok &= (good:=u_err <= atol and x_err <= atol)
    print(f"  {impl}: applied controls err max {u_err:.2e}, path err max {x_err:.2e} (<= {atol:g}){'' if good else '  MISMATCH'}")
  return ok

def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", choices=tuple(IMPLS), help="one framework (default: tinygrad and whichever of jax, torch are installed)")
  parser.add_argument("--T", type=int, default=T, help="knots in the horizon")
  parser.add_argument("--B", type=int, default=1, help="cars")
  parser.add_argument("--quick", action="store_true", help="CI's smoke run: T=20, B=2, 8 periods timed, then the check")
  parser.add_argument("--write", action="store_true", help=f"a fresh process per framework at B=1 and B={FLEET}, bench/results-w8.json, RESULTS.md")
  parser.add_argument("--no-check", action="store_true", help="the timing only")
  parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  from run import have
  impls = [args.only] if args.only else [i for i in IMPLS if i == "tinygrad" or have(i)]
  if missing := [i for i in IMPLS if i not in impls and not args.only]: print(f"skipping {', '.join(missing)}: not installed")
  if args.write: write_results("w8", [row for B in (1, FLEET) for row in process_rows(__file__, "W8", impls, args.T, B, "period")])
  else:
    Tt, B, periods = (20, 2, 8) if args.quick else (args.T, args.B, PERIODS)
    print(f"time: the solve of one control period, T={Tt} knots, B={B} cars, {ITERS} iterations a period, float32, one thread")
    for impl in impls:
      row = measure(impl, Tt, B, periods)
      if args.row: print("@@ROW " + json.dumps(row))
      print(f"  {row['label']:60s} median {row['ms']:7.3f} ms, worst {row['worst_ms']:7.3f} ms per period ({row['periods']} periods), "
            f"first call {row['first_ms']:6.0f} ms" + (f", {row['kernels']} kernels" if "kernels" in row else ""))
  ok = True if args.no_check else check(impls)
  print("PASS" if ok else "FAIL")
  return 0 if ok else 1

if __name__ == "__main__": sys.exit(main())
