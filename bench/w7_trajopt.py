"""W7 of the benchmark: one iteration of examples/trajopt.py's iLQR over B problems (T knots), our tinygrad Solver under TinyJit
against the same algorithm written the way a user of JAX and of PyTorch would write it. The algorithm is test/test_trajopt.py's
`ilqr_iteration` (the spec), batched.

  PYTHONPATH=. python bench/w7_trajopt.py                # time every framework (T=200, B=256), then check each against numpy
  PYTHONPATH=. python bench/w7_trajopt.py --only jax --T 100 --B 64
  PYTHONPATH=. python bench/w7_trajopt.py --write        # each framework in a fresh process on one core (bench/run.py's THREAD_ENV), at
                                                         # T in {100, 200}, B in {1, 16, 256}: bench/results-w7.json, then RESULTS.md's
                                                         # W7 section (`make bench`)
  PYTHONPATH=. python bench/w7_trajopt.py --quick        # CI's smoke run (`make bench QUICK=1`): small, every row checked

make_tinygrad: examples/trajopt.py's Solver: vmap(jacfwd)/vmap(jacrev)/vmap(hessian) derivatives, the recursions as one traced step
            replayed per knot, the iteration under TinyJit.
make_jax:   jax.jit(jax.vmap(per-problem iteration)); derivatives by jacfwd/grad/hessian vmapped over the knots, both recursions as
            jax.lax.scan (XLA compiles the whole iteration into one program).
make_torch: torch.func.vmap of jacfwd/jacrev over problems x knots flattened into one batch, then Python loops over the knots for
            the recursions, each knot a few dozen batched torch ops (eager: one dispatch per op per knot, whatever B).
jax and torch are passed in, never imported here at module level: importing this file needs neither.
"""
import os, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# one thread per framework, the CPU device for tinygrad: bench/run.py's environment, set before numpy, jax, torch or tinygrad is imported
if __name__ == "__main__":
  from run import THREAD_ENV
  for k, v in THREAD_ENV.items(): os.environ.setdefault(k, v)
  # one core, as bench/run.py's workers: XLA's CPU client runs work on more threads than its flags cover
  if hasattr(os, "sched_setaffinity"): os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})

import argparse, statistics, time  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from trajopt import HORIZON_S, WHEELBASE, GOAL, OBSTACLES, MARGIN, A_MAX, DELTA_MAX, W_U, W_OBS, W_BOUND, W_T, ALPHAS  # noqa: E402
from trajopt import MU0, MU_MIN, MU_MAX, MU_UP, MU_DOWN, rollout_numpy, start_poses  # noqa: E402

def knot_functions(xp, relu, dt:float):
  """the problem for ONE knot, as examples/trajopt.py writes it; xp is jax.numpy or torch (the same names for these ops). The vectors
  are unpacked (one unbind in torch) rather than indexed element by element: torch.func differentiates each x[i] into a zero-filled
  scatter over the whole batch, which made vmap(hessian(running_cost)) 1.6x slower; the same math, and XLA doesn't care"""
  def step(x, u):
    (px, py, theta, v), (a, delta) = x, u
    return xp.stack([px + dt * v * xp.cos(theta), py + dt * v * xp.sin(theta), theta + dt * v * xp.tan(delta) / WHEELBASE, v + dt * a])
  def running_cost(z):
    px, py, _, _, a, delta = z
    cost = 0.5 * dt * (W_U[0] * a * a + W_U[1] * delta * delta)
    for cx, cy, r in OBSTACLES:
      dist = xp.sqrt(xp.square(px - cx) + xp.square(py - cy))
      cost = cost + dt * W_OBS * xp.square(relu(r + MARGIN - dist))
    for u, bound in ((a, A_MAX), (delta, DELTA_MAX)):
      cost = cost + dt * W_BOUND * (xp.square(relu(u - bound)) + xp.square(relu(-u - bound)))
    return cost
  def terminal_cost(x): return sum(0.5 * w * xp.square(xi - g) for xi, w, g in zip(x, W_T, GOAL))
  return step, running_cost, terminal_cost

def inv2(xp, m):
  """inverse of (..., 2, 2) by the adjugate: elementwise, so it fuses (XLA) / costs a few ops (torch) instead of a batched LU call"""
  a, b, c, d = m[..., 0, 0], m[..., 0, 1], m[..., 1, 0], m[..., 1, 1]
  return xp.stack([xp.stack([d, -b], -1), xp.stack([-c, a], -1)], -2) / (a * d - b * c)[..., None, None]

def initial_trajectory(starts:np.ndarray, T:int, horizon_s:float=HORIZON_S) -> np.ndarray:
  """the rollout of zero controls (float64, as the tinygrad Solver and the numpy reference start)"""
  return rollout_numpy(starts, np.zeros((len(starts), T, 2)), horizon_s / T)

# ---- JAX: per problem, vmapped over problems, jitted
def jax_problem(jax, jnp, T:int, dtype, horizon_s:float=HORIZON_S):
  """-> (iteration, trajectory_cost, step) for ONE problem: iteration(X, U, mu, cost) -> (X, U, mu, cost), not yet vmapped or jitted"""
  dt, lax = horizon_s / T, jax.lax
  step, running_cost, terminal_cost = knot_functions(jnp, lambda x: jnp.maximum(x, 0), dt)
  alphas, eye2 = jnp.asarray(ALPHAS, dtype), jnp.eye(2, dtype=dtype)
  dynamics_jacobians = jax.vmap(jax.jacfwd(step, argnums=(0, 1)))                     # over knots
  cost_gradient, cost_hessian = jax.vmap(jax.grad(running_cost)), jax.vmap(jax.hessian(running_cost))
  def trajectory_cost(X, U): return jax.vmap(running_cost)(jnp.concatenate([X[:-1], U], 1)).sum() + terminal_cost(X[-1])

  def iteration(X, U, mu, cost):
    A, Bu = dynamics_jacobians(X[:-1], U)
    Z = jnp.concatenate([X[:-1], U], 1)
    g, H = cost_gradient(Z), cost_hessian(Z)
    def riccati(V, d):
      (Vx, Vxx), (A, B, g, H) = V, d
      Qx, Qu = g[:4] + A.T @ Vx, g[4:] + B.T @ Vx
      VA = Vxx @ A
      Qxx, Qux, Quu = H[:4, :4] + A.T @ VA, H[4:, :4] + B.T @ VA, H[4:, 4:] + B.T @ Vxx @ B + mu * eye2
      Quu_inv = inv2(jnp, Quu)
      K, k = -Quu_inv @ Qux, -Quu_inv @ Qu
      Vx = Qx + K.T @ (Quu @ k) + K.T @ Qu + Qux.T @ k
      Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
      return (Vx, Vxx), (K, k)
    V_T = (jax.grad(terminal_cost)(X[-1]), jax.hessian(terminal_cost)(X[-1]))
    _, (K, k) = lax.scan(riccati, V_T, (A, Bu, g, H), reverse=True)
    def rollout(xc, knot):                                                             # xc: (alphas, 4), every step size at once
      x, u, K, k = knot
      uc = u + alphas[:, None] * k + (xc - x) @ K.T
      return jax.vmap(step)(xc, uc), (xc, uc)
    x_last, (Xc, Uc) = lax.scan(rollout, jnp.broadcast_to(X[0], (len(ALPHAS), 4)), (X[:-1], U, K, k))
    Xc, Uc = jnp.concatenate([Xc, x_last[None]], 0).swapaxes(0, 1), Uc.swapaxes(0, 1)   # (alphas, T+1, 4), (alphas, T, 2)
    costs = jax.vmap(trajectory_cost)(Xc, Uc)
    costs = jnp.where(jnp.isnan(costs), jnp.inf, costs)                                # a diverged candidate is never the best
    best = jnp.argmin(costs)
    better = costs[best] < cost
    return (jnp.where(better, Xc[best], X), jnp.where(better, Uc[best], U),
            jnp.where(better, jnp.maximum(mu / MU_DOWN, MU_MIN), jnp.minimum(mu * MU_UP, MU_MAX)), jnp.where(better, costs[best], cost))
  return iteration, trajectory_cost, step

def make_jax(jax, jnp, T:int, starts:np.ndarray, dtype=None):
  """-> (state, iterate): state = (X (B,T+1,4), U (B,T,2), mu (B,), cost (B,)); iterate = jit(vmap(one iteration of one problem)).
  dtype jnp.float64 needs jax_enable_x64 on."""
  dtype = dtype or jnp.float32
  iteration, trajectory_cost, _ = jax_problem(jax, jnp, T, dtype)
  X = jnp.asarray(initial_trajectory(starts, T), dtype)
  U = jnp.zeros((len(starts), T, 2), dtype)
  state = (X, U, jnp.full((len(starts),), MU0, dtype), jax.jit(jax.vmap(trajectory_cost))(X, U))
  return state, jax.jit(jax.vmap(lambda s: iteration(*s)))

# ---- PyTorch: torch.func for the derivatives, eager batched ops in Python loops for the recursions
def make_torch(torch, T:int, starts:np.ndarray, dtype=None, horizon_s:float=HORIZON_S):
  """-> (state, iterate) as make_jax's, torch tensors; iterate(state) -> state; iterate.batched_step(x (..., 4), u (..., 2)) and
  iterate.trajectory_costs(X (..., T+1, 4), U (..., T, 2)) are its batched pieces"""
  from torch.func import vmap, jacfwd, jacrev, hessian
  dtype, dt, B, nA = dtype or torch.float32, horizon_s / T, len(starts), len(ALPHAS)
  step, running_cost, terminal_cost = knot_functions(torch, torch.relu, dt)
  alphas, eye2 = torch.tensor(ALPHAS, dtype=dtype), torch.eye(2, dtype=dtype)
  # over problems x knots, flattened into one batch: one vmap level (nesting two was no faster), a fixed number of ops whatever B and T.
  # The Hessian reverse-over-reverse: 1.8x faster than torch.func.hessian (forward-over-reverse) on this function, same values
  dynamics_jacobians = vmap(jacfwd(step, argnums=(0, 1)))
  cost_gradient, cost_hessian = vmap(jacrev(running_cost)), vmap(jacrev(jacrev(running_cost)))
  terminal_gradient, terminal_hessian = vmap(jacrev(terminal_cost)), vmap(hessian(terminal_cost))
  batched_running_cost, batched_terminal_cost = vmap(running_cost), vmap(terminal_cost)
  # the rollout's step: `step` unpacks its arguments along the first axis and is elementwise, so it runs on columns (4, N) as it is,
  # 3x faster per knot than vmap(step) (whose per-call overhead is most of a call at this size)
  def batched_step(x, u): return step(x.movedim(-1, 0), u.movedim(-1, 0)).movedim(0, -1)
  def trajectory_costs(X, U):  # (..., T+1, 4), (..., T, 2) -> (...)
    lead = X.shape[:-2]
    running = batched_running_cost(torch.cat([X[..., :-1, :], U], -1).reshape(-1, 6)).reshape(*lead, T).sum(-1)
    return running + batched_terminal_cost(X[..., -1, :].reshape(-1, 4)).reshape(lead)

  @torch.no_grad()  # torch.func transforms ignore an outer no_grad; the recursions need no graph
  def iterate(state):
    X, U, mu, cost = state
    # .to(dtype): torch's forward AD gives a 0-d tensor times a Python float a float64 tangent (pytorch/pytorch#90065, #160513)
    A, Bu = (d.to(dtype).reshape(B, T, *d.shape[1:]) for d in dynamics_jacobians(X[:, :-1].reshape(-1, 4), U.reshape(-1, 2)))
    Z = torch.cat([X[:, :-1], U], -1).reshape(-1, 6)
    g, H = cost_gradient(Z).to(dtype).reshape(B, T, 6, 1), cost_hessian(Z).to(dtype).reshape(B, T, 6, 6)
    # backward: vectors as columns (B, n, 1) so that every product is a batched matmul
    Vx, Vxx = terminal_gradient(X[:, -1]).to(dtype).unsqueeze(-1), terminal_hessian(X[:, -1]).to(dtype)
    Ks, ks = [], []
    mu_I = mu[:, None, None] * eye2
    for t in reversed(range(T)):
      At, Bt, gt, Ht = A[:, t], Bu[:, t], g[:, t], H[:, t]
      Qx, Qu = gt[:, :4] + At.mT @ Vx, gt[:, 4:] + Bt.mT @ Vx
      VA = Vxx @ At
      Qxx, Qux, Quu = Ht[:, :4, :4] + At.mT @ VA, Ht[:, 4:, :4] + Bt.mT @ VA, Ht[:, 4:, 4:] + Bt.mT @ Vxx @ Bt + mu_I
      Quu_inv = inv2(torch, Quu)
      Kt, kt = -Quu_inv @ Qux, -Quu_inv @ Qu
      Vx = Qx + Kt.mT @ (Quu @ kt) + Kt.mT @ Qu + Qux.mT @ kt
      Vxx = Qxx + Kt.mT @ Quu @ Kt + Kt.mT @ Qux + Qux.mT @ Kt
      Ks.append(Kt); ks.append(kt)
    # forward: every problem and step size at once, (B, alphas, 4)
    K, k = torch.stack(Ks[::-1], 1), torch.stack(ks[::-1], 1)[..., 0]                  # (B, T, 2, 4), (B, T, 2)
    nominal = U[:, None] + alphas[None, :, None, None] * k[:, None]                     # (B, alphas, T, 2): U + alpha k, all knots at once
    xs, us = [X[:, None, 0].expand(B, nA, 4)], []
    for t in range(T):
      us.append(nominal[:, :, t] + (xs[-1] - X[:, None, t]) @ K[:, t].mT)
      xs.append(batched_step(xs[-1], us[-1]))
    Xc, Uc = torch.stack(xs, 2), torch.stack(us, 2)                                    # (B, alphas, T+1, 4), (B, alphas, T, 2)
    costs = trajectory_costs(Xc, Uc)
    costs = torch.where(costs.isnan(), torch.inf, costs)                               # a diverged candidate is never the best
    best = costs.argmin(1)                                                             # the first on ties, as numpy's
    rows = torch.arange(B)
    best_cost = costs[rows, best]
    better = best_cost < cost
    return (torch.where(better[:, None, None], Xc[rows, best], X), torch.where(better[:, None, None], Uc[rows, best], U),
            torch.where(better, (mu / MU_DOWN).clamp(min=MU_MIN), (mu * MU_UP).clamp(max=MU_MAX)), torch.where(better, best_cost, cost))

  iterate.batched_step, iterate.trajectory_costs = batched_step, trajectory_costs
  X = torch.tensor(initial_trajectory(starts, T, horizon_s), dtype=dtype)
  U = torch.zeros(B, T, 2, dtype=dtype)
  with torch.no_grad(): cost = trajectory_costs(X, U)
  return (X, U, torch.full((B,), MU0, dtype=dtype), cost), iterate

# ---- tinygrad: examples/trajopt.py's Solver, the same state and iterate
def make_tinygrad(T:int, starts:np.ndarray, dtype=None):
  """-> (state, iterate) over a Solver: state = (X, U, mu, cost) Tensors (the Solver's buffers, updated in place by each call)"""
  from tinygrad import dtypes
  from trajopt import Solver
  solver = Solver(starts, T, dtype or dtypes.float32)
  def iterate(_state):
    solver.iterate()
    return solver.X, solver.U, solver.mu, solver.cost
  iterate.solver = solver
  return (solver.X, solver.U, solver.mu, solver.cost), iterate

# ---- the check against test/test_trajopt.py's numpy iLQR, and the timing
def to_numpy(state) -> list[np.ndarray]:
  """jax arrays, CPU torch tensors and tinygrad Tensors"""
  return [np.asarray(s.numpy() if hasattr(s, "realize") else s, dtype=np.float64) for s in state]

def run_iters(state, iterate, iters:int):
  costs = []
  for _ in range(iters):
    state = iterate(state)
    costs.append(to_numpy([state[3]])[0])
  return to_numpy(state), np.stack(costs, 1)

def compare(name:str, got, got_costs, refs, cost_rtol:float, xu_atol:float, history_rtol:float|None) -> bool:
  """final cost, X and U per problem against the numpy reference, and the cost after every iteration unless history_rtol is None;
  prints the worst errors. The final state alone proves little: every damping schedule tried ends at the same solution. The final mu
  isn't compared: once converged, whether a step is "strictly lower" is a rounding coin flip, so mu wanders between its bounds even in
  float64. float32 gets no history check: an ill-conditioned step (an indefinite Quu: seed 1's problem 1, iteration 1) can send it
  down another path to the same solution"""
  (X, U, _, cost), ok = got, True
  for b, (rX, rU, rcosts) in enumerate(refs):
    cost_err = abs(cost[b] - rcosts[-1]) / abs(rcosts[-1])
    hist_err = np.max(np.abs(got_costs[b] - rcosts) / np.abs(rcosts))
    x_err, u_err = np.abs(X[b] - rX).max(), np.abs(U[b] - rU).max()
    good = cost_err <= cost_rtol and x_err <= xu_atol and u_err <= xu_atol and (history_rtol is None or hist_err <= history_rtol)
    ok &= good
    left = np.flatnonzero(np.abs(got_costs[b] - rcosts) > 1e-3 * np.abs(rcosts))
    path = f" (left numpy's path at iteration {left[0]}, {got_costs[b, left[0]]:.6f} vs {rcosts[left[0]]:.6f})" if len(left) else ""
    print(f"  {name} problem {b}: final cost {cost[b]:.6f} (numpy {rcosts[-1]:.6f}), rel err {cost_err:.2e} (<= {cost_rtol:g}); "
          f"X err {x_err:.2e}, U err {u_err:.2e} (<= {xu_atol:g}); cost history rel err max {hist_err:.2e}"
          f"{'' if history_rtol is None else f' (<= {history_rtol:g})'}{path}{'' if good else '  MISMATCH'}")
  return ok

RUNS = 3   # fresh processes per framework in --write
IMPLS = {"tinygrad": "tinygrad TinyJit (vmap, jacfwd, hessian; a kernel graph per iteration)",
         "jax": "jax.jit(jax.vmap) + lax.scan", "torch": "torch.func + Python loops over the knots"}

def framework(impl:str, dtype_name:str="float32"):
  """-> (make(T, starts) -> (state, iterate), sync(state) -> state) for one framework in one dtype"""
  if impl == "tinygrad":
    from tinygrad import Device, dtypes
    def sync_tinygrad(state):
      Device[Device.DEFAULT].synchronize()
      return state
    return (lambda T, starts: make_tinygrad(T, starts, getattr(dtypes, dtype_name))), sync_tinygrad
  if impl == "jax":
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", dtype_name == "float64")
    return (lambda T, starts: make_jax(jax, jnp, T, starts, getattr(jnp, dtype_name))), jax.block_until_ready
  import torch
  torch.set_num_threads(1)
  return (lambda T, starts: make_torch(torch, T, starts, getattr(torch, dtype_name))), (lambda state: state)   # CPU eager: synchronous

def check(impls:list[str], T:int=30, B:int=3, iters:int=25) -> bool:
  sys.path.insert(0, str(ROOT / "test"))
  from test_trajopt import ilqr_numpy
  starts = start_poses(B, seed=1)
  refs = [ilqr_numpy(starts[b], T, iters) for b in range(B)]
  ok = True
  # float64: the proof (a nearly singular step moves an iterate by ~1e-6 relative, so the history gets test_trajopt.py's 1e-4)
  for dtype_name, cost_rtol, xu_atol, history_rtol in (("float64", 1e-6, 1e-6, 1e-4), ("float32", 1e-3, 2e-3, None)):
    print(f"check: T={T}, B={B}, {iters} iterations, {dtype_name} against numpy float64")
    for impl in impls:
      make, _ = framework(impl, dtype_name)
      try: ok &= compare(f"{impl} {dtype_name}", *run_iters(*make(T, starts), iters), refs, cost_rtol, xu_atol, history_rtol)
      finally:
        if impl == "jax": framework("jax", "float32")   # float64 only inside the check
  return ok

def time_iteration(state, iterate, sync, warmup:int=3, reps:int=9) -> tuple[float, float]:
  """-> (first call, median of `reps` calls after `warmup`) in ms; each call continues from the last one's state"""
  times = []
  for _ in range(warmup + reps):
    st = time.perf_counter()
    state = sync(iterate(state))
    times.append((time.perf_counter() - st) * 1e3)
  return times[0], statistics.median(times[warmup:])

def measure(impl:str, T:int, B:int, warmup:int=3, reps:int=9) -> dict:
  """one framework's row: the first call (trace, schedule, compile, run) and the steady iteration; tinygrad's kernels per iteration"""
  make, sync = framework(impl)
  state, iterate = make(T, start_poses(B))
  first, ms = time_iteration(sync(state), iterate, sync, warmup, reps)
  row = {"impl": impl, "label": IMPLS[impl], "T": T, "B": B, "ms": ms, "first_ms": first}
  if impl == "tinygrad": row["kernels"] = iterate.solver.kernels_per_iteration()
  return row

def process_rows(script:str, name:str, impls:list[str], T:int, B:int, unit:str) -> list[dict]:
  """`script --only IMPL --T T --B B --no-check --row` for each framework in a fresh process on one core with bench/run.py's
  environment, RUNS rounds; per framework the median process's row, with every process's ms (and first call) beside it"""
  import json, subprocess
  from run import THREAD_ENV
  rows = []
  env = {**os.environ, **THREAD_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")])}
  runs: dict[str, list[dict]] = {impl: [] for impl in impls}
  for _ in range(RUNS):   # rounds of every framework: a fresh process's steady iteration swings up to 1.7x from one process to the next
    for impl in impls:
      p = subprocess.run([sys.executable, script, "--only", impl, "--T", str(T), "--B", str(B), "--no-check", "--row"], env=env,
                         capture_output=True, text=True, cwd=ROOT)
      row = next((json.loads(l[6:]) for l in p.stdout.splitlines() if l.startswith("@@ROW ")), None)
      if row is None: raise RuntimeError(f"{name} {impl} failed:\n{p.stdout}\n{p.stderr[-3000:]}")
      runs[impl].append(row)
  for impl in impls:
    row = sorted(runs[impl], key=lambda r: r["ms"])[len(runs[impl]) // 2]   # the median process
    rows.append({**row, "runs_ms": [r["ms"] for r in runs[impl]], "first_runs_ms": [r["first_ms"] for r in runs[impl]]})
    print(f"  {name} {row['label']:60s} B={B:<4d} {row['ms']:8.3f} ms per {unit} (runs {', '.join(f'{r:.3f}' for r in rows[-1]['runs_ms'])}), "
          f"first call {row['first_ms']:8.0f} ms", flush=True)
  return rows

def write_results(name:str, rows:list[dict]):
  """bench/results-NAME.json, then RESULTS.md (bench/run.py --render)"""
  import json, subprocess
  (ROOT / "bench" / f"results-{name}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1) + "\n")
  subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--render"], check=True, cwd=ROOT)

GRID = tuple((T, B) for T in (100, 200) for B in (1, 16, 256))   # the sizes RESULTS.md's W7 table has, from one run

def write(grid:tuple[tuple[int, int], ...]=GRID) -> list[dict]:
  """each framework in a fresh process on one core with bench/run.py's environment, at each (T, B) of grid; bench/results-w7.json,
  then RESULTS.md"""
  from run import have
  impls = [i for i in IMPLS if i == "tinygrad" or have(i)]
  rows = [r for T, B in grid for r in process_rows(__file__, f"W7 T={T}", impls, T, B, "iteration")]
  write_results("w7", rows)
  return rows

def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", choices=tuple(IMPLS), help="one framework (default: tinygrad and whichever of jax, torch are installed)")
  parser.add_argument("--T", type=int, default=200, help="knots for the timing")
  parser.add_argument("--B", type=int, default=256, help="problems for the timing")
  parser.add_argument("--quick", action="store_true", help="CI's smoke run: T=20, B=4, three warm-up (TinyJit captures on the 2nd) and two timed calls, then the check")
  parser.add_argument("--write", action="store_true", help="a fresh process per framework at T in {100, 200} and B in {1, 16, 256} "
                      "(--sizes: --T and --B only), bench/results-w7.json and RESULTS.md")
  parser.add_argument("--sizes", action="store_true", help="with --write, time --T and --B only")
  parser.add_argument("--no-check", action="store_true", help="the timing only")
  parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  from run import have
  impls = [args.only] if args.only else [i for i in IMPLS if i == "tinygrad" or have(i)]
  if missing := [i for i in IMPLS if i not in impls and not args.only]: print(f"skipping {', '.join(missing)}: not installed")
  if args.write: write(((args.T, args.B),) if args.sizes else GRID)
  else:
    T, B, warmup, reps = (20, 4, 3, 2) if args.quick else (args.T, args.B, 3, 9)
    print(f"time: one iteration, T={T} knots, B={B} problems, float32, one thread (median of {reps} after {warmup} warm-up calls)")
    for impl in impls:   # first: their first calls are a fresh process's (the check would warm them up)
      row = measure(impl, T, B, warmup, reps)
      if args.row: print("@@ROW " + __import__("json").dumps(row))
      print(f"  {row['label']:60s} {row['ms']:8.2f} ms per iteration, first call {row['first_ms']:8.0f} ms" +
            (f", {row['kernels']} kernels" if "kernels" in row else ""))
  ok = True if args.no_check else check(impls)
  print("PASS" if ok else "FAIL")
  return 0 if ok else 1

if __name__ == "__main__": sys.exit(main())
