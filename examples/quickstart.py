"""Quickstart: write a function for ONE example, run it over a whole batch as ONE kernel.

  make demo        (or: CPU=1 PYTHONPATH=. python examples/quickstart.py)

`vmap(fn, in_axes)` runs fn on every example of a batch. Underneath it is a bracket: `xs.vmapin(varg)` takes one example out of the
batch, `y.vmapout(varg)` puts the batch axis back, and the scheduler turns the bracket into a loop over the batch inside the kernel.
Step 2b writes that bracket by hand.
"""
import re, sys
import numpy as np
from tinygrad import Tensor, GlobalCounters, vmap
from tinygrad.vmap import vmap_range, varg
from tinygrad.uop.ops import Ops
from tinygrad.fork_line import LINE_012

B, D = 1000, 8   # a batch of 1000 examples, each a vector of 8 numbers
LOOP_N = 100     # the Python-loop baseline runs on the first 100 examples only: it is slow (a kernel per example)

# 1. the per-example function: x is ONE example, shape (D,). w is a weight shared by all examples
def score(x:Tensor, w:Tensor) -> Tensor:
  return (x * w).sum() + x.max()   # shape (): one number per example

# 2. the same function over a batch xs of shape (B, D): map axis 0 of xs, pass w whole to every example
batched_score = vmap(score, in_axes=(0, None))

# 2b. what vmap builds, by hand
def bracket_score(xs:Tensor, w:Tensor) -> Tensor:
  r = vmap_range(xs.shape[0])                 # a fresh RANGE: the loop variable over the batch (every scope needs its own)
  x = xs.vmapin(varg(xs.ndim, {0: r}))        # open the scope: axis 0 is mapped by r, x is one example of shape (D,)
  y = score(x, w)                             # per-example code, unchanged. w is not vmapped in: every example sees all of it
  return y.vmapout(varg(y.ndim + 1, {0: r}))  # close the scope: the batch axis comes back as axis 0, shape (B,)

rng = np.random.default_rng(0)
xs_np, w_np = rng.standard_normal((B, D), dtype=np.float32), rng.standard_normal(D, dtype=np.float32)
xs, w = Tensor(xs_np).realize(), Tensor(w_np).realize()   # realized now, so the copies to the device are not counted below

# 3. check the numbers against a numpy loop over the examples
got = batched_score(xs, w).numpy()
want = np.array([(xs_np[i] * w_np).sum() + xs_np[i].max() for i in range(B)])
ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
ok &= np.allclose(bracket_score(xs, w).numpy(), want, rtol=1e-5, atol=1e-5)
print(f"batched_score on {B} examples vs a numpy loop: {'PASS' if ok else 'FAIL'}")

# 4. the generated C kernel: the schedule is the list of kernels that compute the tensor, ours is the last one.
#    It plans the kernels without running them; a Tensor is scheduled once, so this is a fresh one
def kernel_sources(t:Tensor) -> list[str]:
  if LINE_012: return [ei.lower().prg.p.src for ei in t.schedule()]   # tinygrad 0.12
  from tinygrad.engine.realize import compile_linear                               # 0.14: the compiled schedule's kernels
  return [u.arg for u in compile_linear(t.schedule_linear()).toposort() if u.op is Ops.SOURCE]
sources = kernel_sources(batched_score(xs, w))
src = sources[-1]
print(f"\nkernels in the schedule: {len(sources)}. The C source of the last one:\n{src}")
# the loop over the batch is the one over `Lidx`: the CPU heuristics may take several examples per iteration as the lanes of a vector
loops = re.findall(r"for \(int (Lidx\w*) = 0; \w+ < (\d+); \w+\+\+\)", src)
print("loops over the batch:", [f"{name}: {n} iterations of {B // int(n)} examples" for name, n in loops])

# 5. kernels run: vmap vs a Python loop over examples
def kernels_run(fn) -> int:
  before = GlobalCounters.kernel_count
  fn()
  return GlobalCounters.kernel_count - before
n_vmap = kernels_run(lambda: batched_score(xs, w).realize())
n_loop = kernels_run(lambda: [score(xs[i], w).realize() for i in range(LOOP_N)])
print(f"\nkernels run: vmap, all {B} examples:          {n_vmap}")
print(f"             Python loop, first {LOOP_N} examples: {n_loop} ({n_loop / LOOP_N:g} per example, {n_loop * B // LOOP_N} for {B})")

sys.exit(0 if ok else 1)
