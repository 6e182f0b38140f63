"""Trajectory optimization with batched Jacobians: iLQR for a kinematic bicycle around circular obstacles, B problems at once.

  python examples/trajopt.py [--T 100] [--B 16] [--iters 100] [--float64] [--plot]     (after `make demo`'s set-up)

The car (state px, py, theta, v; controls a = acceleration, delta = steering; Euler steps, `step`) drives from a start pose to
GOAL in HORIZON_S seconds between circular OBSTACLES, with |a| <= A_MAX and |delta| <= DELTA_MAX. Obstacles and bounds are
quadratic penalties on their violation (`running_cost`), the goal a quadratic terminal cost (`terminal_cost`). Every function of
the problem is written for ONE knot; the solver batches them.

Why iLQR: it keeps the dynamics exactly satisfied (each iterate is a rollout), so the only violations left are the penalties', and
its linear algebra is 4x4 and 2x2 per knot: a Riccati recursion backward in time, then a rollout forward. A Gauss-Newton step on
all knots at once would need a banded solve of 6T unknowns per problem, which is the same recursion written as a factorization.

One iteration (`Solver.iterate`, under TinyJit after its first two calls):
  1. linearize: per problem, `vmap(jacfwd(step, argnums=(0, 1)))` over the knots gives the 4x4 and 4x2 dynamics Jacobians, and
     `vmap(jacrev(running_cost))` and `vmap(hessian(running_cost))` the cost's gradient and Hessian in (state, control); the
     per-problem function is vmapped over the B problems. All knots of all problems: a fixed number of kernels.
  2. backward pass: the Riccati recursion, from the last knot to the first (`riccati_step`, written for one problem and one knot):
     on tinygrad 0.14 a reversed `scan_kernel(..., batch=B)`, the value function (and the damping) its carry, the knot's
     derivatives its xs, the knot's gains its ys: ONE kernel for all knots and problems.
  3. forward pass: the rollouts for every step size in ALPHAS at once, one more scan kernel whose batch is problems x step sizes.
  4. evaluate: the cost of every candidate (vmap over problems, step sizes and knots), then per problem the best step size is kept
     if it lowers the cost, and the Levenberg-Marquardt damping `mu` of its Quu goes down, else up. Nothing leaves the device.
On 0.14 an iteration is 21 kernels whatever T and B, no time loop in Python; TinyJit replays them as one graph. The frozen 0.12 line
has no scan: there a recursion over time is kernels per knot (`KnotStep`: one step traced, scheduled and compiled once, and replayed at
every knot), 6 T + a constant kernels an iteration, whatever B.
"""
import argparse, itertools, math, sys, time
from pathlib import Path
from typing import Callable
import numpy as np
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))   # the fork's tinygrad/ when run from a clone without PYTHONPATH
from tinygrad import Tensor, TinyJit, Device, dtypes, vmap, jacfwd, jacrev, hessian
from tinygrad.dtype import DType
from tinygrad.uop.ops import UOp
from tinygrad.fork_line import LINE_012
from tinygrad.engine import realize
from tinygrad.helpers import Context
if not LINE_012: from tinygrad.scan_kernel import scan_kernel

# the problem: one start pose per problem, the rest shared
HORIZON_S, WHEELBASE = 8.0, 2.5
GOAL = (12.0, 0.0, 0.0, 0.0)                                       # px, py, theta, v
OBSTACLES = ((5.0, 2.5, 1.4), (5.0, -2.5, 1.4))                     # cx, cy, radius: a gap to drive through
MARGIN = 0.2                                                         # penalized distance kept from an obstacle
A_MAX, DELTA_MAX = 2.0, 0.5
W_U, W_OBS, W_BOUND, W_T = (0.2, 2.0), 1000.0, 3000.0, (100.0, 100.0, 20.0, 20.0)
# the solver
ALPHAS = (1.0, 0.5, 0.25, 0.1, 0.03)                                 # step sizes tried in parallel by the forward pass
MU0, MU_MIN, MU_MAX, MU_UP, MU_DOWN = 1e-2, 1e-6, 1e6, 10.0, 3.0    # damping added to Quu, per problem

def step(x:Tensor, u:Tensor, dt:float) -> Tensor:
  """one Euler step of the kinematic bicycle, for one knot: state (4,), control (2,) -> next state (4,)"""
  px, py, theta, v, a, delta = x[0], x[1], x[2], x[3], u[0], u[1]
  return Tensor.stack(px + dt * v * theta.cos(), py + dt * v * theta.sin(), theta + dt * v * delta.tan() / WHEELBASE, v + dt * a)

def running_cost(z:Tensor, dt:float) -> Tensor:
  """the cost of one knot, z = (state, control) (6,): control effort, then the obstacle and bound penalties"""
  cost = 0.5 * dt * (W_U[0] * z[4] * z[4] + W_U[1] * z[5] * z[5])
  for cx, cy, r in OBSTACLES:
    dist = ((z[0] - cx).square() + (z[1] - cy).square()).sqrt()
    cost = cost + dt * W_OBS * (r + MARGIN - dist).relu().square()
  for i, bound in ((4, A_MAX), (5, DELTA_MAX)):
    cost = cost + dt * W_BOUND * ((z[i] - bound).relu().square() + (-z[i] - bound).relu().square())
  return cost

def terminal_cost(x:Tensor) -> Tensor:
  return sum(0.5 * w * (x[i] - g).square() for i, (w, g) in enumerate(zip(W_T, GOAL)))

# ---- small dense linear algebra for one knot, on the entries themselves: a matrix is a nested list of 0-d Tensors. Written with
# vectors instead, a knot's step reads a vector (K, Vxx @ A) at several indices, and rangeify realizes each such vector into a buffer
# of its own: a kernel launch per knot each (the Riccati step had 5 of those)
def entries(t:Tensor) -> list: return [entries(t[i]) for i in range(t.shape[0])] if t.ndim else t
def tensor(m:list) -> Tensor: return Tensor.stack(*[tensor(r) for r in m]) if isinstance(m, list) else m
def add(*ms): return [add(*xs) for xs in zip(*ms)] if isinstance(ms[0], list) else sum(ms[1:], ms[0])
def neg(m): return [neg(x) for x in m] if isinstance(m, list) else -m
def tr(m:list) -> list: return [list(r) for r in zip(*m)]
def mm(a:list, b:list) -> list: return [[sum((r[k] * b[k][j] for k in range(1, len(b))), r[0] * b[0][j]) for j in range(len(b[0]))] for r in a]
def mv(a:list, x:list) -> list: return [sum((r[k] * x[k] for k in range(1, len(x))), r[0] * x[0]) for r in a]
def inv2(m:list) -> list:
  (a, b), (c, d) = m
  det = a * d - b * c
  return [[d / det, -b / det], [-c / det, a / det]]

def riccati_step(Vx:Tensor, Vxx:Tensor, A:Tensor, B:Tensor, g:Tensor, H:Tensor, mu:Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """one knot of the backward pass, for one problem: from the value function after the knot (Vx, Vxx), the dynamics Jacobians
  (A, B) and the cost's gradient and Hessian (g, H), the value function before it and the knot's feedback gain K and step k.
  `mu` damps Quu (Levenberg-Marquardt). Four outputs: one packed output would compute every piece in every lane"""
  Vx, Vxx, A, B, g, H = (entries(t) for t in (Vx, Vxx, A, B, g, H))
  Qx, Qu = add(g[:4], mv(tr(A), Vx)), add(g[4:], mv(tr(B), Vx))
  VA, VB = mm(Vxx, A), mm(Vxx, B)
  Qxx, Qux = add([r[:4] for r in H[:4]], mm(tr(A), VA)), add([r[:4] for r in H[4:]], mm(tr(B), VA))
  Quu = add([r[4:] for r in H[4:]], mm(tr(B), VB), [[mu, 0], [0, mu]])
  Quu_inv = inv2(Quu)
  K, k = neg(mm(Quu_inv, Qux)), neg(mv(Quu_inv, Qu))
  Vx = add(Qx, mv(tr(K), mv(Quu, k)), mv(tr(K), Qu), mv(tr(Qux), k))
  Vxx = add(Qxx, mm(tr(K), mm(Quu, K)), mm(tr(K), Qux), mm(tr(Qux), K))
  return tensor(Vx), tensor(Vxx), tensor(K), tensor(k)

def feedback_control(xc:Tensor, x:Tensor, u:Tensor, K:Tensor, k:Tensor, alpha:Tensor) -> Tensor:
  """the control of a candidate at one knot: the nominal u, plus alpha times the step k, plus K times the state's deviation"""
  dx = [xc[i] - x[i] for i in range(4)]
  return tensor(add(entries(u), [alpha * k[r] for r in range(2)], mv(entries(K), dx)))

class KnotStep:
  """one step of a recursion over the knots, replayed at every knot: `build(k)` makes the Tensors the step realizes (assigns into
  row k of persistent buffers) with k a bound Variable, once; its schedule (and its kernels, compiled once) then runs at each knot
  with the Variable's value. Building and scheduling the step at every knot would cost T times the Python, and the same kernel
  compiled T times with k a constant. Under TinyJit each knot's kernels are captured with the value of k they ran with."""
  def __init__(self, T:int, build:Callable[[UOp], list[Tensor]]):
    self.knot, self.build, self.schedule = UOp.variable("knot", 0, T - 1), build, None
  def __call__(self, k:int):
    var_vals = {self.knot.expr: k}
    if LINE_012:                                # tinygrad 0.12: a list of ExecItems, which TinyJit captures as they run
      if self.schedule is None: self.schedule = Tensor.schedule_with_vars(*self.build(self.knot.bind(k)))[0]
      realize.run_schedule(list(self.schedule), var_vals)
    else:                                       # tinygrad 0.14: a LINEAR of CALLs, handed to TinyJit while it captures
      if self.schedule is None:
        with Context(CAPTURING=0): self.schedule = Tensor.linear_with_vars(*self.build(self.knot.bind(k)))[0]   # even while capturing
      if realize.capturing: realize.capturing[0].add_linear(self.schedule, var_vals)
      else: realize.run_linear(self.schedule, var_vals)

class PackedBuffer:
  """arrays of the given per-row shapes side by side on the last axis of one buffer (the leading axes are the buffer's own)"""
  def __init__(self, buf:Tensor, shapes:tuple[tuple[int, ...], ...]):
    self.buf, self.shapes = buf, shapes
    self.offsets = list(itertools.accumulate((math.prod(s) for s in shapes), initial=0))
  def _slots(self, *index): return [self.buf[(*index, Ellipsis, slice(o, e))] for o, e in zip(self.offsets, self.offsets[1:])]
  def views(self, *index) -> list[Tensor]:
    """each array at the leading index (`:` for the problems first, then `index`), in its own shape"""
    return [v.reshape(*v.shape[:-1], *s) for v, s in zip(self._slots(slice(None), *index), self.shapes)]
  def assign(self, *values:Tensor) -> list[Tensor]:
    return [slot.assign(v.reshape(slot.shape)) for slot, v in zip(self._slots(), values)]

class Solver:
  """iLQR over a batch of problems that differ in their start pose; `iterate` is one iteration, replayed by TinyJit"""
  def __init__(self, starts:np.ndarray, T:int, dtype:DType=dtypes.float32, horizon_s:float=HORIZON_S):
    self.B, self.T, self.dt, self.dtype = len(starts), T, horizon_s / T, dtype
    dt = self.dt
    self.alphas = Tensor(ALPHAS, dtype=dtype).realize()
    # per knot, written once: batched over the knots of one problem by vmap, then over the problems
    dynamics_jacobians = vmap(jacfwd(lambda x, u: step(x, u, dt), argnums=(0, 1)))
    cost_gradient, cost_hessian = vmap(jacrev(lambda z: running_cost(z, dt))), vmap(hessian(lambda z: running_cost(z, dt)))
    def linearize(X:Tensor, U:Tensor) -> tuple[Tensor, ...]:
      Z = X[:-1].cat(U, dim=1)
      return *dynamics_jacobians(X[:-1], U), cost_gradient(Z), cost_hessian(Z)
    def trajectory_cost(X:Tensor, U:Tensor) -> Tensor:
      return vmap(lambda z: running_cost(z, dt))(X[:-1].cat(U, dim=1)).sum() + terminal_cost(X[-1])
    self.linearize, self.trajectory_cost, self.candidate_costs = vmap(linearize), vmap(trajectory_cost), vmap(vmap(trajectory_cost))
    self.terminal_value = vmap(lambda x: (jacrev(terminal_cost)(x), hessian(terminal_cost)(x)))
    # the state of the solver: the nominal trajectories, the damping and the cost
    def buffer(*shape): return Tensor.zeros(*shape, dtype=dtype).contiguous().realize()
    self.U = buffer(self.B, T, 2)
    self.X = Tensor(rollout_numpy(starts, np.zeros((self.B, T, 2)), self.dt), dtype=dtype).realize()
    self.mu = Tensor.full((self.B,), MU0, dtype=dtype).contiguous().realize()
    self.cost = self.trajectory_cost(self.X, self.U).contiguous().realize()
    if LINE_012: self._knot_steps(T)
    else:
      # the recursions over time as scans, each ONE kernel for all knots (a LOOP range, the carry in registers), whatever T and B:
      # the step of one problem (and one step size) at one knot, expanded element by element into the kernel's body
      def riccati_body(c:list[Tensor], x:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        (Vx, Vxx, mu), (A, B, g, H) = c, x            # mu rides in the carry unchanged: a per-problem constant, read at every knot
        Vx, Vxx, K, k = riccati_step(Vx, Vxx, A, B, g, H, mu[0])
        # Vxx is symmetric; its rounding's antisymmetric part, carried back through every knot, slowed float32 convergence (test_trajopt's
        # test_converges: goal error 0.15 after 60 iterations without, 0.013 with); float64 moves by rounding only
        return [Vx, (Vxx + Vxx.T) * 0.5, mu], [K, k]
      def rollout_body(c:list[Tensor], x:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        (xa,), (z,) = c, x                              # the candidate's state and its step size; the nominal knot (x, u) and its gains
        uc = feedback_control(xa[:4], z[:4], z[4:6], z[6:14].reshape(2, 4), z[14:], xa[4])
        xn = step(xa[:4], uc, dt)
        return [xn.cat(xa[4:])], [xn, uc]
      self.riccati_body, self.rollout_body = riccati_body, rollout_body
    self.iterate = TinyJit(self._iterate)

  def _knot_steps(self, T:int):
    """tinygrad 0.12 has no scan: the recursions run knot by knot (KnotStep), into row k of persistent buffers"""
    dt, dtype = self.dt, self.dtype
    def buffer(*shape): return Tensor.zeros(*shape, dtype=dtype).contiguous().realize()
    riccati_steps = vmap(riccati_step)                                                       # over problems
    rollout_steps = vmap(vmap(lambda xc, x, u, K, k, alpha: step(xc, feedback_control(xc, x, u, K, k, alpha), dt),
                              in_axes=(0, None, None, None, None, 0)), in_axes=(0, 0, 0, 0, 0, None))   # over problems, then step sizes
    self.candidate_controls = vmap(vmap(vmap(feedback_control, in_axes=(0, 0, 0, 0, 0, None)), in_axes=(0, None, None, None, None, 0)),
                                   in_axes=(0, 0, 0, 0, 0, None))                         # over problems, step sizes, knots
    # per knot: the derivatives (A, B, g, H), the value function and policy (Vx, Vxx, K, k), the candidates' states
    # A, B, g and H side by side in one buffer, and Vx and Vxx in one: a Riccati step then reads three buffers (with mu)
    self.derivs = PackedBuffer(buffer(self.B, T, 66), ((4, 4), (4, 2), (6,), (6, 6)))
    self.K, self.k = buffer(self.B, T, 2, 4), buffer(self.B, T, 2)
    # the value function (Vx, Vxx) of the knot after and the knot before, two buffers taking turns: a step that wrote into the buffer it
    # reads would make tinygrad compute into a copy first (it can't tell row k from row k + 1 apart), a second kernel per output
    self.V = [PackedBuffer(buffer(self.B, 20), ((4,), (4, 4))) for _ in range(2)]
    self.candidates = buffer(self.B, len(ALPHAS), T + 1, 4)
    self.candidates[:, :, 0].assign(self.X[:, None, 0].expand(self.B, len(ALPHAS), 4)).realize()
    # the recursions over time: one knot's step, written in place into row k of the buffers, replayed at every knot
    def backward(k:UOp, read:int) -> list[Tensor]:
      Vx, Vxx, K, k_ = riccati_steps(*self.V[read].views(), *self.derivs.views(k), self.mu)
      return [*self.V[1 - read].assign(Vx, Vxx), self.K[:, k].assign(K), self.k[:, k].assign(k_)]
    def forward(k:UOp) -> list[Tensor]:
      Xc = self.candidates
      return [Xc[:, :, k + 1].assign(rollout_steps(Xc[:, :, k], self.X[:, k], self.U[:, k], self.K[:, k], self.k[:, k], self.alphas))]
    self.backward_steps = [KnotStep(T, lambda k, read=read: backward(k, read)) for read in range(2)]   # knot k reads V[(T - 1 - k) % 2]
    self.forward_step = KnotStep(T, forward)

  def _recursions_knotwise(self) -> tuple[Tensor, Tensor]:
    X, U, T, Xc = self.X, self.U, self.T, self.candidates
    Tensor.realize(*self.derivs.assign(*self.linearize(X, U)))
    Tensor.realize(*self.V[0].assign(*self.terminal_value(X[:, T])))
    for k in reversed(range(T)): self.backward_steps[(T - 1 - k) % 2](k)
    for k in range(T): self.forward_step(k)
    return Xc, self.candidate_controls(Xc[:, :, :T], X[:, :T], U, self.K, self.k, self.alphas)

  def _recursions_scan(self) -> tuple[Tensor, Tensor]:
    X, U, T, B, n = self.X, self.U, self.T, self.B, len(ALPHAS)
    A, Bu, g, H = self.linearize(X, U)
    Vx, Vxx = self.terminal_value(X[:, T])
    # the backward pass: all problems, from the last knot to the first
    if (ret:=scan_kernel(self.riccati_body, [Vx, Vxx, self.mu.reshape(B, 1)], [A, Bu, g, H], T, reverse=True, batch=B)) is None:
      raise RuntimeError("the Riccati step did not fuse into one kernel (DEBUG=2 says why)")
    _, (K, k) = ret
    # the forward pass: the rollouts of every problem and step size, the step sizes folded into the batch (B * n). Each leaf packs what
    # a step reads side by side (the carry: state and step size; xs: x, u, K and k): one kernel each to expand them over the step sizes
    def per_candidate(t:Tensor) -> Tensor: return t[:, None].expand(B, n, *t.shape[1:]).reshape(B * n, *t.shape[1:])
    init = X[:, None, 0].expand(B, n, 4).cat(self.alphas.reshape(1, n, 1).expand(B, n, 1), dim=2).reshape(B * n, 5)
    xs = per_candidate(X[:, :T].cat(U, K.reshape(B, T, 8), k, dim=2))
    if (ret:=scan_kernel(self.rollout_body, [init], [xs], T, batch=B * n)) is None:
      raise RuntimeError("the rollout step did not fuse into one kernel (DEBUG=2 says why)")
    _, (Xn, Uc) = ret
    return X[:, None, :1].expand(B, n, 1, 4).cat(Xn.reshape(B, n, T, 4), dim=2), Uc.reshape(B, n, T, 2)

  def kernels_per_iteration(self) -> int:
    """the kernels (and copies) TinyJit replays per iteration, once it has captured one (its third call)"""
    return jit_kernels(self.iterate)

  def warm_start(self, x0:Tensor):
    """model-predictive control's warm start (examples/mpc.py), 0.14 only: the nominal controls shifted by one knot (the last one
    repeated), rolled out from the new start states x0 (B, 4) by one more scan kernel, the damping back to MU0. Realizes into the
    solver's buffers, so a TinyJit around it and `_iterate` replays both"""
    B, dt = self.B, self.dt
    U = self.U[:, 1:].cat(self.U[:, -1:], dim=1)
    def body(c:list[Tensor], u:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
      xn = step(c[0], u[0], dt)
      return [xn], [xn]
    if (ret:=scan_kernel(body, [x0.cast(self.dtype)], [U], self.T, batch=B)) is None:
      raise RuntimeError("the rollout did not fuse into one kernel (DEBUG=2 says why)")
    X = x0.cast(self.dtype).reshape(B, 1, 4).cat(ret[1][0], dim=1)
    new_state = [t.contiguous() for t in (X, U, Tensor.full((B,), MU0, dtype=self.dtype), self.trajectory_cost(X, U))]
    Tensor.realize(*new_state)
    Tensor.realize(*(old.assign(new) for old, new in zip((self.X, self.U, self.mu, self.cost), new_state)))

  def _iterate(self) -> Tensor:
    X, U = self.X, self.U
    Xc, Uc = self._recursions_knotwise() if LINE_012 else self._recursions_scan()
    costs = self.candidate_costs(Xc, Uc)
    costs = (costs != costs).where(float("inf"), costs)                    # a candidate that diverged (NaN) is never the best
    best = costs.argmin(axis=1)
    chosen = Tensor.arange(len(ALPHAS))[None] == best[:, None]              # (B, alphas): a where, not a product: 0 * nan is nan
    best_X = chosen[:, :, None, None].where(Xc, 0).sum(1)
    best_U = chosen[:, :, None, None].where(Uc, 0).sum(1)
    best_cost = costs.min(axis=1)
    better = best_cost < self.cost
    new_X, new_U = better[:, None, None].where(best_X, X), better[:, None, None].where(best_U, U)
    new_mu = better.where((self.mu / MU_DOWN).maximum(MU_MIN), (self.mu * MU_UP).minimum(MU_MAX))
    new_cost = better.where(best_cost, self.cost)
    # computed before any is written: each reads X and U
    new_state = [t.contiguous() for t in (new_X, new_U, new_mu, new_cost)]
    Tensor.realize(*new_state)
    Tensor.realize(*(old.assign(new) for old, new in zip((X, U, self.mu, self.cost), new_state)))
    return self.cost

def jit_kernels(jit:TinyJit) -> int:
  """the kernels (and copies) a TinyJit replays per call, once it has captured one (its third call)"""
  if LINE_012: return len(jit.captured.jit_cache)                           # tinygrad 0.12: a list of ExecItems
  # 0.14: CALLs, graphs of CALLs, or one command buffer of them all (hcq: TinyJit's CPU graph)
  return sum(len(c.src[0].src[0].src) if c.src[0].arg == "graph" else len(c.arg.aux.kernels) if c.src[0].arg == "hcq" else 1
             for c in jit.captured.linear.src)

def rollout_numpy(starts:np.ndarray, U:np.ndarray, dt:float) -> np.ndarray:
  """the states a start pose and controls give: the initial trajectory (controls zero)"""
  X = [np.asarray(starts, dtype=np.float64)]
  for k in range(U.shape[1]):
    px, py, th, v = X[-1].T
    a, delta = U[:, k].T
    X.append(np.stack([px + dt * v * np.cos(th), py + dt * v * np.sin(th), th + dt * v * np.tan(delta) / WHEELBASE, v + dt * a], -1))
  return np.stack(X, 1)

def start_poses(B:int, seed:int=0) -> np.ndarray:
  """B start poses left of the obstacles: px 0, py in [-2, 2], heading towards the goal within 0.05 rad, speed in [0, 1]"""
  rng = np.random.default_rng(seed)
  py = rng.uniform(-2, 2, B)
  return np.stack([np.zeros(B), py, np.arctan2(GOAL[1] - py, GOAL[0]) + rng.uniform(-0.05, 0.05, B), rng.uniform(0, 1, B)], 1)

def violations(X:np.ndarray, U:np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """per problem: distance of the final position from the goal's, deepest obstacle penetration, largest bound excess"""
  goal = np.linalg.norm(X[:, -1, :2] - np.array(GOAL[:2]), axis=1)
  obs = np.array(OBSTACLES)
  depth = (obs[:, 2] - np.linalg.norm(X[:, :, None, :2] - obs[:, :2], axis=-1)).max(axis=(1, 2)).clip(0)
  bounds = np.maximum(np.abs(U[..., 0]).max(1) - A_MAX, np.abs(U[..., 1]).max(1) - DELTA_MAX).clip(0)
  return goal, depth, bounds

GOAL_TOL, PENETRATION_TOL, BOUND_TOL = 0.1, 0.0, 0.05   # meters, meters, (m/s^2 or rad)

def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--T", type=int, default=100, help="knots (50 to 1000)")
  parser.add_argument("--B", type=int, default=16, help="problems solved at once (1 to 1024)")
  parser.add_argument("--iters", type=int, default=100)
  parser.add_argument("--float64", action="store_true")
  parser.add_argument("--plot", action="store_true", help="write docs/trajopt.png")
  args = parser.parse_args()
  solver = Solver(start_poses(args.B), args.T, dtypes.float64 if args.float64 else dtypes.float32)
  history = [solver.cost.numpy()]
  st = time.perf_counter()
  for i in range(args.iters):
    history.append(solver.iterate().numpy())
    if i == 2: jit_start = time.perf_counter()
  Device[Device.DEFAULT].synchronize()
  per_iter = (time.perf_counter() - jit_start) / (args.iters - 3) * 1e3
  history = np.stack(history, 1)
  X, U = solver.X.numpy(), solver.U.numpy()
  kernels = solver.kernels_per_iteration()
  print(f"T={args.T} knots, B={args.B} problems, {solver.dtype}: {kernels} kernels per iteration, "
        f"{per_iter:.2f} ms per iteration (TinyJit), first three {(jit_start - st) * 1e3:.0f} ms")
  for i in list(range(0, args.iters, max(1, args.iters // 8))) + [args.iters]:
    print(f"  iteration {i:3d}: cost median {np.median(history[:, i]):10.4f}, max {history[:, i].max():10.4f}")
  goal, depth, bounds = violations(X, U)
  decreasing = bool((np.diff(history, axis=1) <= 0).all())
  ok = decreasing and goal.max() < GOAL_TOL and depth.max() <= PENETRATION_TOL and bounds.max() < BOUND_TOL
  print(f"goal error max {goal.max():.4f} m (< {GOAL_TOL}), obstacle penetration max {depth.max():.4f} m (<= {PENETRATION_TOL}), "
        f"bound excess max {bounds.max():.4f} (< {BOUND_TOL}), cost never increased: {decreasing}")
  if args.plot: plot(X, history, "docs/trajopt.png")
  print("PASS" if ok else "FAIL")
  return 0 if ok else 1

def plot(X:np.ndarray, history:np.ndarray, path:str):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax, cx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.6, 1]})
  for ox, oy, r in OBSTACLES: ax.add_patch(plt.Circle((ox, oy), r, color="0.6"))
  for x in X: ax.plot(x[:, 0], x[:, 1], lw=1)
  ax.plot(X[:, 0, 0], X[:, 0, 1], "k.", ms=4, label="start poses")
  ax.plot(*GOAL[:2], "r*", ms=12, label="goal")
  ax.set_aspect("equal"); ax.set_xlabel("px [m]"); ax.set_ylabel("py [m]"); ax.legend(loc="lower right")
  ax.set_title(f"{len(X)} problems solved at once, {X.shape[1] - 1} knots")
  cx.semilogy(history.T, lw=0.8); cx.set_xlabel("iteration"); cx.set_ylabel("cost"); cx.set_title("cost per problem")
  fig.tight_layout(); fig.savefig(path, dpi=110)
  print(f"wrote {path}")

if __name__ == "__main__": sys.exit(main())
