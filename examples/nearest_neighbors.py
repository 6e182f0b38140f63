"""Nearest neighbours with nested vmap: the distance between ONE query and ONE reference point, mapped over both sets.

  CPU=1 PYTHONPATH=. python examples/nearest_neighbors.py

`dist(q, r)` is written for one pair of points. vmap over the references gives one query's distances to all of them, a second vmap
over the queries gives the whole (Q, R) matrix; argmin and a softmax-weighted vote run per query inside the outer scope. Everything
is checked against numpy; the script prints the kernels per call (the same for 10 queries as for 2000), and the time per call with
the schedule cache warm and with TinyJit.
"""
import sys, time
import numpy as np
from tinygrad import Tensor, TinyJit, GlobalCounters, Device, vmap

Q, R, D = 2000, 500, 16
rng = np.random.default_rng(0)
queries, refs, labels = rng.standard_normal((Q, D)), rng.standard_normal((R, D)), rng.integers(0, 2, R).astype(np.float64)

def dist(q:Tensor, r:Tensor) -> Tensor:               # one query, one reference point: a scalar
  return ((q - r) ** 2).sum().sqrt()

def classify(q:Tensor, refs:Tensor, labels:Tensor):   # one query against all references
  d = vmap(dist, in_axes=(None, 0))(q, refs)          # (R,): the inner vmap maps the references
  weights = (-d).softmax()                            # a soft vote of the labels, nearest weigh most
  return d.argmin(), (weights * labels).sum()

knn = vmap(classify, in_axes=(0, None, None))         # the outer vmap maps the queries

def run(n:int):
  nearest, vote = knn(Tensor(queries[:n]), Tensor(refs), Tensor(labels))
  return nearest.numpy(), vote.numpy()

# numpy: the whole distance matrix at once
d_np = np.sqrt(((queries[:, None] - refs[None]) ** 2).sum(-1))
w_np = np.exp(-d_np - (-d_np).max(1, keepdims=True))
want_nearest, want_vote = d_np.argmin(1), (w_np / w_np.sum(1, keepdims=True) * labels).sum(1)

nearest, vote = run(Q)
ok = (nearest == want_nearest).all() and np.allclose(vote, want_vote, rtol=1e-9)
print(f"nested vmap, {Q} queries x {R} references vs numpy: {'PASS' if ok else 'FAIL'}")

def kernels(n:int) -> int:
  before = GlobalCounters.kernel_count
  run(n)
  return GlobalCounters.kernel_count - before
print(f"kernels per call: {kernels(10)} for 10 queries, {kernels(Q)} for {Q} (includes the copies of the inputs to the device)")

def per_call(fn, n=10) -> float:
  fn(); fn()
  Device[Device.DEFAULT].synchronize()
  st = time.perf_counter()
  for _ in range(n): fn()
  Device[Device.DEFAULT].synchronize()   # kernels run asynchronously: time until they are done
  return (time.perf_counter() - st) / n * 1e3
Qt, Rt, Lt = Tensor(queries).realize(), Tensor(refs).realize(), Tensor(labels).realize()
eager = per_call(lambda: [t.realize() for t in knn(Qt, Rt, Lt)])
jitted = TinyJit(lambda q, r, l: [t.realize() for t in knn(q, r, l)])
jit = per_call(lambda: jitted(Qt, Rt, Lt))
print(f"time per call: {eager:.1f} ms eager (schedule cache hit), {jit:.1f} ms with TinyJit")
sys.exit(0 if ok else 1)
