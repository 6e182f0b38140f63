"""A node realized inside a vmap scope must keep the batch axis: a stack of reduces indexed again, and a flattened stack read at two
indices. DEBUG_RANGEIFY=1 shows which nodes are realized and why.

  CPU=1 DEBUG_RANGEIFY=1 PYTHONPATH=. python examples/debug_rangeify.py

Both functions make the scheduler realize a node between VMAPIN and VMAPOUT into a buffer of its own (the `***` lines of
DEBUG_RANGEIFY=1's output). In a graph with a vmap scope every `***` line is followed by a `why:` line: why the node is realized, and
the buffer it becomes, the scope RANGEs first (`inside scope rm1 -> buffer [rm1][r2] (3x2)`). That buffer must hold every example;
with one example's worth, every example gets the last one's values (the reduces indexed again) or the scope's RANGE is still open
at the store and no kernel is made of it (the flattened stack read twice). Each case is checked against a numpy loop; the last line
is PASS or FAIL.

On tinygrad 0.14.0 (`make fork UPSTREAM=0.14.0`, `DEV=CPU` for `CPU=1`) no scope reaches the scheduler: the VMAPOUT batches its scope
(tinygrad/batching.py), and DEBUG_RANGEIFY=1 prints that first, a `vmap scope` block with each node's shape for one example, the scope
RANGEs it depends on and its shape over the batch. Rangeify's own blocks for the batched graph follow.
"""
import sys
import numpy as np
from tinygrad import Tensor
from tinygrad.fork_line import LINE_012
if LINE_012: from tinygrad.engine.realize import run_schedule
else: run_schedule = None   # 0.14.0: a schedule is a LINEAR that Tensor.realize runs
from tinygrad.vmap import vmap_range, varg

def reduces_indexed_again(x:Tensor) -> Tensor:   # one example: x of shape (4,). the stacked pair is indexed again: "reduce indexed again"
  return Tensor.stack(x[:2].sum(), x[2:].sum())[[0, 1]]

def stack_read_twice(x:Tensor) -> Tensor:        # one example: x of shape (3,). flat is read at two indices: "multi-consumer"
  v0, v1, v2 = Tensor([1.0, 0.0, 0.0]), Tensor([0.0, 1.0, 0.0]), Tensor([0.0, 0.0, 1.0])
  flat = Tensor.stack(x * v0, x * v1, x * v2).flatten()
  return Tensor.stack(flat[0], flat[1])

def run(name:str, f, f_np, X:np.ndarray, axis:int) -> bool:
  print(f"--- {name}: {X.shape[axis]} examples", flush=True)
  xs = Tensor(X).realize()                        # realized first, so the scheduler's output below is only the scope's graph
  r = vmap_range(X.shape[axis])                   # in DEBUG_RANGEIFY's output it is rm1: the scheduler sees a graph's vmap RANGEs as rm1, rm2, ...
  out = f(xs.vmapin(varg(X.ndim, {axis: r})))
  out = out.vmapout(varg(out.ndim + 1, {0: r}))   # the batch axis comes back as axis 0
  if run_schedule is not None:
    sched = out.schedule()
    print("buffers per kernel:", [[b.size for b in ei.bufs] for ei in sched])
    run_schedule(sched)
  want = np.stack([f_np(np.take(X, i, axis=axis)) for i in range(X.shape[axis])])
  got = out.numpy()
  print(f"vmap {got.shape} vs a numpy loop {want.shape}: largest difference {np.abs(got - want).max() if got.shape == want.shape else 'n/a'}")
  print(f"{name}:", "PASS" if (ok:=got.shape == want.shape and np.allclose(got, want)) else "FAIL: the examples don't match the numpy loop")
  return ok

rng = np.random.default_rng(1)
# the same functions in numpy, for one example
def reduces_indexed_again_np(x:np.ndarray) -> np.ndarray: return np.stack([x[:2].sum(), x[2:].sum()])[[0, 1]]
def stack_read_twice_np(x:np.ndarray) -> np.ndarray: return np.stack([x * [1, 0, 0], x * [0, 1, 0], x * [0, 0, 1]]).flatten()[[0, 1]]

rng = np.random.default_rng(1)
# the batch is axis 1: 3 examples of 4 numbers
ok = run("reduces indexed again", reduces_indexed_again, reduces_indexed_again_np, rng.standard_normal((4, 3)), axis=1)
ok &= run("flattened stack read twice", stack_read_twice, stack_read_twice_np, rng.standard_normal((10, 3)), axis=0)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
