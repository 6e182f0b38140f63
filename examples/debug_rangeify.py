"""Seed 001's reproduction: a node realized inside a vmap scope must keep the batch axis.

  CPU=1 DEBUG_RANGEIFY=1 PYTHONPATH=. python examples/debug_rangeify.py

Inside the scope, Tensor.stack(x[:2].sum(), x[2:].sum()) is indexed again with [[0, 1]], so the scheduler realizes the stacked pair
into a buffer of its own (the `***` lines in DEBUG_RANGEIFY=1's output). That buffer must hold the pair of every example (batch x 2),
loaded at the example's slice; if it held one pair, every example would get the last one's values. Prints PASS/FAIL against numpy.
"""
import sys
import numpy as np
from tinygrad import Tensor
from tinygrad.vmap import vmap_range, varg

def f(x:Tensor) -> Tensor: return Tensor.stack(x[:2].sum(), x[2:].sum())[[0, 1]]   # one example: x of shape (4,)

X = np.random.default_rng(1).standard_normal((4, 3))   # the batch is axis 1: 3 examples of 4 numbers
r = vmap_range(3)
out = f(Tensor(X).vmapin(varg(2, {1: r}))).vmapout(varg(2, {0: r}))
sched = out.schedule()
print("buffers per kernel:", [[b.size for b in ei.bufs] for ei in sched])
from tinygrad.engine.realize import run_schedule
run_schedule(sched)
want = np.stack([np.stack([X[:2, i].sum(), X[2:, i].sum()])[[0, 1]] for i in range(3)])
got = out.numpy()
print("vmap:\n", got, "\nnumpy loop:\n", want)
print("PASS" if np.allclose(got, want) else "FAIL: the examples don't match the numpy loop")
sys.exit(0 if np.allclose(got, want) else 1)
