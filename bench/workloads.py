"""The benchmark workloads, each defined ONCE: a per-example tinygrad function, its numpy oracle, and the same computation written for
the other implementations the benchmark compares (hand-batched tinygrad, hand-batched numpy, a per-example JAX function, a per-example
torch function).

Nothing here imports jax or torch at module level: `jax_fn`/`torch_fn` take the module as their first argument, so this file loads on a
machine that has neither (CI). Data is float32 (what a user runs); the oracle runs in float64 on the same float32 inputs.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable
import numpy as np

@dataclass(frozen=True)
class Workload:
  name: str                     # W1 ... W6
  title: str
  n: int                        # batch size of the primary table
  n_quick: int                  # batch size of `make bench QUICK=1`
  n_loop: int                   # examples the tinygrad Python loop runs (its per-example time is extrapolated to n)
  n_pad: int                    # batch size upstream's pad+reduce OUTER idiom runs at (its cost is O(N^2): N kernels, each writes N slots)
  inputs: Callable[[int, np.random.Generator], list[np.ndarray]]   # the positional arguments, batched
  in_axes: tuple                # vmap in_axes of the per-example function (0 or None per argument)
  tg: Callable                  # the per-example tinygrad function (what a user writes), or a function of the batch for nested vmaps
  tg_vmap: Callable             # (vmap, tg) -> the vmapped function: vmap(tg, in_axes) except for nested vmaps
  tg_hand: Callable             # the same computation, hand-batched in tinygrad with broadcasting
  np_hand: Callable             # ... in numpy (the numpy row; also the oracle, run in float64)
  jax_fn: Callable              # (jax, jnp) -> the per-example jax function; jax_vmap(jax, f) maps it
  torch_fn: Callable            # (torch) -> the per-example torch function
  jax_vmap: Callable|None = None    # (jax, f) -> the jax vmapped function (default jax.vmap(f, in_axes))
  torch_vmap: Callable|None = None  # (torch, f) -> the torch.func vmapped function (default torch.func.vmap(f, in_dims=in_axes))
  loop_examples: Callable|None = None  # (arrays, i) -> the per-example arguments of example i (default: index the mapped arguments)
  memory_bound: bool = False    # report its GB/s against the machine's copy bandwidth
  flops: Callable[[int], float]|None = None   # the flops of a call at batch size N: its GFLOP/s reported against the core's FMA peak
  notes: str = ""
  extra: dict = field(default_factory=dict)

  def size(self, quick:bool) -> int: return self.n_quick if quick else self.n

  def n_examples(self, args:list[np.ndarray]) -> int:
    """examples in a call: the batch size (N1*N2 for the nested W5)"""
    return self.extra.get("examples", lambda a: next(x.shape[0] for x, ax in zip(a, self.in_axes) if ax == 0))(args)

  def oracle(self, args:list[np.ndarray]):
    return self.np_hand(*[a.astype(np.float64) if a.dtype == np.float32 else a for a in args])

def _f32(*xs) -> list[np.ndarray]: return [np.asarray(x, dtype=np.float32) for x in xs]

# ---------------------------------------------------------------- W1: per-row reduce
def w1_tg(x): return (x * x).sum() * 2 + x.max()
W1 = Workload(
  "W1", "per-row reduce `(x*x).sum()*2 + x.max()`, rows of 64", n=100_000, n_quick=1000, n_loop=20, n_pad=1000,
  inputs=lambda n, rng: _f32(rng.standard_normal((n, 64))), in_axes=(0,),
  tg=w1_tg, tg_vmap=lambda vmap, f: vmap(f),
  tg_hand=lambda X: (X * X).sum(1) * 2 + X.max(1),
  np_hand=lambda X: (X * X).sum(1) * 2 + X.max(1),
  jax_fn=lambda jax, jnp: (lambda x: (x * x).sum() * 2 + x.max()),
  torch_fn=lambda torch: (lambda x: (x * x).sum() * 2 + x.max()),
  memory_bound=True)

# ---------------------------------------------------------------- W2: per-example MLP 64 -> 64 -> 8
def w2_tg(x, w1, b1, w2, b2): return (x @ w1 + b1).relu() @ w2 + b2
def w2_inputs(n, rng):
  return _f32(rng.standard_normal((n, 64)), rng.standard_normal((64, 64)) / 8, rng.standard_normal(64) / 8,
              rng.standard_normal((64, 8)) / 8, rng.standard_normal(8) / 8)
W2 = Workload(
  "W2", "per-example MLP 64->64->8 with ReLU (weights unbatched)", n=20_000, n_quick=500, n_loop=20, n_pad=500,
  inputs=w2_inputs, in_axes=(0, None, None, None, None),
  tg=w2_tg, tg_vmap=lambda vmap, f: vmap(f, in_axes=(0, None, None, None, None)),
  tg_hand=w2_tg,   # broadcasting makes the per-example code the batched code here
  np_hand=lambda X, w1, b1, w2, b2: np.maximum(X @ w1 + b1, 0) @ w2 + b2,
  jax_fn=lambda jax, jnp: (lambda x, w1, b1, w2, b2: jnp.maximum(x @ w1 + b1, 0) @ w2 + b2),
  torch_fn=lambda torch: (lambda x, w1, b1, w2, b2: torch.relu(x @ w1 + b1) @ w2 + b2),
  flops=lambda n: 2 * n * (64 * 64 + 64 * 8))   # the two matmuls' multiply-adds (bias and relu left out): 184 MFLOP at N=20000

# ---------------------------------------------------------------- W3: stack then index (the sparse-Jacobian pattern)
# per example x (4,): three rows x*C[k] stacked into a (3, 4) block, flattened, and the 4 structurally nonzero entries picked out
PICK = [0, 5, 10, 3]
def w3_tg(x, C):
  flat = type(x).stack(x * C[0], x * C[1], x * C[2]).flatten()
  return type(x).stack(*[flat[i] for i in PICK])
def w3_tg_hand(X, C):
  flat = type(X).stack(X * C[0], X * C[1], X * C[2], dim=1).reshape(X.shape[0], 12)
  return type(X).stack(*[flat[:, i] for i in PICK], dim=1)
def w3_np(X, C): return np.stack([X * C[0], X * C[1], X * C[2]], axis=1).reshape(X.shape[0], 12)[:, PICK]
W3 = Workload(
  "W3", "stack then index: stack(x*c0, x*c1, x*c2).flatten()[[0,5,10,3]] (sparse-Jacobian pattern), x of 4",
  n=100_000, n_quick=1000, n_loop=20, n_pad=500,
  inputs=lambda n, rng: _f32(rng.standard_normal((n, 4)), rng.standard_normal((3, 4))), in_axes=(0, None),
  tg=w3_tg, tg_vmap=lambda vmap, f: vmap(f, in_axes=(0, None)),
  tg_hand=w3_tg_hand, np_hand=w3_np,
  jax_fn=lambda jax, jnp: (lambda x, C: jnp.stack([x * C[0], x * C[1], x * C[2]]).reshape(12)[jnp.array(PICK)]),
  torch_fn=lambda torch: (lambda x, C: torch.stack([x * C[0], x * C[1], x * C[2]]).reshape(12)[PICK]),
  memory_bound=True)

# ---------------------------------------------------------------- W4: kinematic bicycle, 4x6 Jacobian [d/dstate | d/dcontrol] per point
DT, L = 0.1, 2.5
def w4_tg(s, u):
  """the analytic Jacobian of one Euler step (px+=dt*v*cos th, py+=dt*v*sin th, th+=dt*v*tan(delta)/L, v+=dt*a), for ONE point"""
  T = type(s)
  th, v, de = s[2], s[3], u[1]
  c, sn, z, o = th.cos(), th.sin(), th.full_like(0.0), th.full_like(1.0)
  return T.stack(T.stack(o, z, -DT * v * sn, DT * c, z, z),
                 T.stack(z, o, DT * v * c, DT * sn, z, z),
                 T.stack(z, z, o, DT * de.tan() / L, z, DT * v / (L * de.cos() ** 2)),
                 T.stack(z, z, z, o, z.full_like(DT), z))
def w4_tg_hand(S, U):
  T = type(S)
  th, v, de = S[:, 2], S[:, 3], U[:, 1]
  c, sn, z, o = th.cos(), th.sin(), th.full_like(0.0), th.full_like(1.0)
  return T.stack(T.stack(o, z, -DT * v * sn, DT * c, z, z, dim=1),
                 T.stack(z, o, DT * v * c, DT * sn, z, z, dim=1),
                 T.stack(z, z, o, DT * de.tan() / L, z, DT * v / (L * de.cos() ** 2), dim=1),
                 T.stack(z, z, z, o, z.full_like(DT), z, dim=1), dim=1)
def w4_np(S, U):
  th, v, de = S[:, 2], S[:, 3], U[:, 1]
  J = np.zeros((len(S), 4, 6), S.dtype)
  J[:, 0, 0] = J[:, 1, 1] = J[:, 2, 2] = J[:, 3, 3] = 1
  J[:, 0, 2], J[:, 0, 3] = -DT * v * np.sin(th), DT * np.cos(th)
  J[:, 1, 2], J[:, 1, 3] = DT * v * np.cos(th), DT * np.sin(th)
  J[:, 2, 3], J[:, 2, 5] = DT * np.tan(de) / L, DT * v / (L * np.cos(de) ** 2)
  J[:, 3, 4] = DT
  return J
def _w4_array(xp):
  """the per-point Jacobian in an array namespace with stack/sin/cos/tan/zeros_like/ones_like (jax.numpy, torch)"""
  def f(s, u):
    th, v, de = s[2], s[3], u[1]
    z, o = xp.zeros_like(th), xp.ones_like(th)
    return xp.stack([xp.stack([o, z, -DT * v * xp.sin(th), DT * xp.cos(th), z, z]),
                     xp.stack([z, o, DT * v * xp.cos(th), DT * xp.sin(th), z, z]),
                     xp.stack([z, z, o, DT * xp.tan(de) / L, z, DT * v / (L * xp.cos(de) ** 2)]),
                     xp.stack([z, z, z, o, z + DT, z])])
  return f
def w4_jax(jax, jnp): return _w4_array(jnp)
def w4_torch(torch): return _w4_array(torch)
def w4_inputs(n, rng): return _f32(rng.standard_normal((n, 4)), rng.uniform(-0.5, 0.5, (n, 2)))
W4 = Workload(
  "W4", "kinematic bicycle: 4x6 Jacobian of one Euler step per trajectory point (analytic, written per example)",
  n=50_000, n_quick=1000, n_loop=20, n_pad=500,
  inputs=w4_inputs, in_axes=(0, 0),
  tg=w4_tg, tg_vmap=lambda vmap, f: vmap(f), tg_hand=w4_tg_hand, np_hand=w4_np, jax_fn=w4_jax, torch_fn=w4_torch,
  memory_bound=True)

def bicycle_step(s, u):
  """the step itself, for the jacfwd rows: vmap(jacfwd(step)) must equal the analytic Jacobian"""
  T = type(s)
  px, py, th, v, a, de = s[0], s[1], s[2], s[3], u[0], u[1]
  return T.stack(px + DT * v * th.cos(), py + DT * v * th.sin(), th + DT * v * de.tan() / L, v + DT * a)
def bicycle_step_jax(jax, jnp):
  def step(s, u):
    px, py, th, v, a, de = s[0], s[1], s[2], s[3], u[0], u[1]
    return jnp.stack([px + DT * v * jnp.cos(th), py + DT * v * jnp.sin(th), th + DT * v * jnp.tan(de) / L, v + DT * a])
  return step

# ---------------------------------------------------------------- W5: nested vmap, pairwise distances
def w5_dist(p, q): return ((p - q) ** 2).sum().sqrt()
W5 = Workload(
  "W5", "nested vmap: pairwise distances, 1000 x 1000 points of 16", n=1000, n_quick=60, n_loop=20, n_pad=60,
  inputs=lambda n, rng: _f32(rng.standard_normal((n, 16)), rng.standard_normal((n, 16))), in_axes=(0, None),
  tg=w5_dist,
  tg_vmap=lambda vmap, f: vmap(lambda p, B: vmap(lambda q: f(p, q))(B), in_axes=(0, None)),
  tg_hand=lambda A, B: ((A[:, None] - B[None]) ** 2).sum(-1).sqrt(),
  np_hand=lambda A, B: np.sqrt(((A[:, None] - B[None]) ** 2).sum(-1)),
  jax_fn=lambda jax, jnp: (lambda p, q: jnp.sqrt(((p - q) ** 2).sum())),
  jax_vmap=lambda jax, f: jax.vmap(jax.vmap(f, in_axes=(None, 0)), in_axes=(0, None)),
  torch_fn=lambda torch: (lambda p, q: ((p - q) ** 2).sum().sqrt()),
  torch_vmap=lambda torch, f: torch.func.vmap(torch.func.vmap(f, in_dims=(None, 0)), in_dims=(0, None)),
  loop_examples=lambda args, i: [args[0][i // len(args[1])], args[1][i % len(args[1])]],
  notes="the per-example function is the distance of ONE pair; the loop and its extrapolation run over the N*N pairs",
  extra={"examples": lambda a: a[0].shape[0] * a[1].shape[0], "pad_inner": True})

# ---------------------------------------------------------------- W6: per-example gradients of a small MLP
D6, H6 = 16, 32
def w6_loss(w1, b1, w2, x, y): return ((x @ w1 + b1).relu() @ w2 - y) ** 2
def w6_tg(w1, b1, w2, x, y): return tuple(w6_loss(w1, b1, w2, x, y).gradient(w1, b1, w2))
def w6_tg_hand(w1, b1, w2, X, Y):
  """per-example gradients by hand: the backward pass written batched (analytic)"""
  h = X @ w1 + b1
  d = 2 * (h.relu() @ w2 - Y)                          # (N,)
  gpre = d[:, None] * w2 * (h > 0).cast(h.dtype)       # (N, H)
  return X[:, :, None] * gpre[:, None, :], gpre, d[:, None] * h.relu()
def w6_np(w1, b1, w2, X, Y):
  h = X @ w1 + b1
  d = 2 * (np.maximum(h, 0) @ w2 - Y)
  gpre = d[:, None] * w2 * (h > 0)
  return X[:, :, None] * gpre[:, None, :], gpre, d[:, None] * np.maximum(h, 0)
def w6_inputs(n, rng):
  return _f32(rng.standard_normal((D6, H6)) / 4, rng.standard_normal(H6) / 4, rng.standard_normal(H6) / 4,
              rng.standard_normal((n, D6)), rng.standard_normal(n))
W6 = Workload(
  "W6", f"per-example gradients of an MLP {D6}->{H6}->1 (ReLU, squared error) w.r.t. its 3 weights", n=10_000, n_quick=200, n_loop=10,
  n_pad=200, inputs=w6_inputs, in_axes=(None, None, None, 0, 0),
  tg=w6_tg, tg_vmap=lambda vmap, f: vmap(f, in_axes=(None, None, None, 0, 0)),
  tg_hand=w6_tg_hand, np_hand=w6_np,
  jax_fn=lambda jax, jnp: (lambda w1, b1, w2, x, y: jax.grad(lambda w1, b1, w2: (jnp.maximum(x @ w1 + b1, 0) @ w2 - y) ** 2,
                                                              argnums=(0, 1, 2))(w1, b1, w2)),
  torch_fn=lambda torch: (lambda w1, b1, w2, x, y: torch.func.grad(lambda w1, b1, w2: (torch.relu(x @ w1 + b1) @ w2 - y) ** 2,
                                                                    argnums=(0, 1, 2))(w1, b1, w2)),
  notes="inside the vmapped function: `loss.gradient(w1, b1, w2)`; hand-batched tinygrad and numpy write the backward pass by hand",
  extra={"requires_grad": (0, 1, 2)})

WORKLOADS: dict[str, Workload] = {w.name: w for w in (W1, W2, W3, W4, W5, W6)}
