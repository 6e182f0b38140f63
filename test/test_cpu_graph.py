"""TinyJit on the CPU replays a capture of many kernels as one graph: on 0.12 its GraphRunner batches the kernels, on 0.14 (whose CPU
device has no graph) with JIT_CPU_GRAPH=64 a capture of 64 kernels or more becomes one command buffer (hcq2's, the cpu-graph topic; on by
default, JIT_CPU_GRAPH=0 turns it off). Either way
each replay runs every kernel, on this call's inputs. A replay counts each kernel on 0.14, each graph launch on 0.12. On 0.14 a thread
waiting for the command buffer yields its core between polls. Compared with numpy on random data every call."""
import unittest
import numpy as np
from tinygrad import Tensor, TinyJit, Device, UOp, dtypes
from tinygrad.helpers import Context
from tinygrad.uop.ops import Ops
from tinygrad.fork_line import LINE_012
from vmap_oracle import rand, kernels, jit_kernels
from fork_topics import applied

COMMAND_BUFFERS = applied("cpu-graph")   # the 0.14 line's topic (not on 0.12, nor in 0.14's SERIES=vmap)
def cpu_graph(n:int=64):
  """the 0.14 line's JIT_CPU_GRAPH for a test (a no-op where there's no such setting)"""
  return Context(JIT_CPU_GRAPH=n) if COMMAND_BUFFERS else Context()

K = 70   # kernels in a capture: above 0.14's JIT_CPU_GRAPH (64)

def chain(x:Tensor, w:Tensor, k:int) -> Tensor:
  """k small kernels, each reading the last one's output and the input w"""
  for i in range(k): x = (x * w + i / k).contiguous()
  return x

def np_chain(x:np.ndarray, w:np.ndarray, k:int) -> np.ndarray:
  for i in range(k): x = x * w + i / k
  return x

def is_command_buffer(jf) -> bool:
  """the capture replays as one hcq command buffer (0.14's CPU graph)"""
  return not LINE_012 and [c.src[0].arg for c in jf.captured.linear.src] == ["hcq"]

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU's graph")
class TestCPUGraph(unittest.TestCase):
  def replays(self, k:int, calls:int=4):
    """a jitted chain of k kernels, called with new data every call; returns it and the kernels each replay ran"""
    jf, counts = TinyJit(lambda x, w: chain(x, w, k).realize()), []
    for _ in range(calls):
      x, w = rand(32), rand(32) * 0.5
      X, W, out = Tensor(x).realize(), Tensor(w).realize(), []
      counts.append(kernels(lambda: out.append(jf(X, W).numpy())))
      np.testing.assert_allclose(out[0], np_chain(x, w, k), rtol=1e-9, atol=1e-12)
    return jf, counts[2:]   # captured on the second call: the rest are replays

  def check_counts(self, jf, counts:list[int], k:int):
    # 0.14 counts each kernel (of a command buffer too), and its jit_kernels does too; 0.12 counts a graph of them as one launch
    if COMMAND_BUFFERS: self.assertEqual((counts, jit_kernels(jf)), ([k, k], k))
    else: self.assertEqual(counts[0], counts[1])

  def test_many_kernels(self):
    with cpu_graph(): jf, counts = self.replays(K)
    self.check_counts(jf, counts, K)
    if COMMAND_BUFFERS: self.assertTrue(is_command_buffer(jf))

  def test_many_kernels_under_spec2(self):
    # SPEC=2 checks every UOp as it is built: a command buffer's GETADDRs of memory-planned views (arena slices) too
    from tinygrad.helpers import Context
    with cpu_graph(), Context(SPEC=2): jf, counts = self.replays(K)
    self.check_counts(jf, counts, K)

  def test_few_kernels_launch_one_by_one(self):
    with cpu_graph(): jf, counts = self.replays(3)
    self.check_counts(jf, counts, 3)
    if COMMAND_BUFFERS: self.assertFalse(is_command_buffer(jf))

  @unittest.skipUnless(COMMAND_BUFFERS, "JIT_CPU_GRAPH is the 0.14 line's cpu-graph topic (0.12's TinyJit graphs with its GraphRunner)")
  def test_on_by_default(self):
    jf, counts = self.replays(K)
    self.check_counts(jf, counts, K)
    self.assertTrue(is_command_buffer(jf))

  @unittest.skipUnless(COMMAND_BUFFERS, "JIT_CPU_GRAPH is the 0.14 line's cpu-graph topic (0.12's TinyJit graphs with its GraphRunner)")
  def test_zero_turns_it_off(self):
    with cpu_graph(0): jf, counts = self.replays(K)
    self.check_counts(jf, counts, K)
    self.assertFalse(is_command_buffer(jf))

  def test_variables_bound_inside(self):
    # each kernel binds a Variable to its own value inside the jitted function (examples/trajopt.py's knot index): the graph keeps them
    buf = Tensor.zeros(K+1, 3, dtype=dtypes.float64).contiguous().realize()
    @TinyJit
    def recursion(x:Tensor) -> Tensor:
      buf[K].assign(x).realize()
      for k in reversed(range(K)):
        k = UOp.variable("knot", 0, K-1).bind(k)
        buf[k].assign(buf[k + 1] * 0.5 + 1).realize()
      return buf
    for call in range(4):
      x, want = rand(3), np.zeros((K+1, 3))
      with cpu_graph(): got = recursion(Tensor(x).realize()).numpy()
      want[K] = x
      for k in reversed(range(K)): want[k] = want[k+1] * 0.5 + 1
      np.testing.assert_allclose(got, want, rtol=1e-12)
    if COMMAND_BUFFERS: self.assertTrue(is_command_buffer(recursion))

@unittest.skipUnless(COMMAND_BUFFERS and Device.DEFAULT == "CPU", "0.14's CPU worker thread, which runs a command buffer")
class TestCPUWaitYields(unittest.TestCase):
  """0.14's CPU worker runs a command buffer on a thread of its own, and a thread that synchronizes polls its signal. Between polls it
  gives up its core (os.sched_yield), so a worker sharing the core (one core, or more busy threads than cores) runs at once, not after
  the poller's time slice: bench W7 on one core (w7_trajopt.py pins it) 41 -> 21 ms an iteration"""
  def test_a_wait_yields_between_polls(self):
    import os, unittest.mock
    import tinygrad.runtime.support.hcq2 as hcq2
    reads = iter([0, 0, 0, 0, 1])   # the signal as the polls read it: the same value three times, then the one waited for
    class Signal:
      def __getitem__(self, i): return next(reads)
    with unittest.mock.patch.object(hcq2.os, "sched_yield", wraps=os.sched_yield) as yielded: Device["CPU"]._wait_signal(Signal(), 1)
    self.assertEqual(yielded.call_count, 3)

  def test_command_buffer_waited_on(self):
    x, w = rand(256, 256), rand(256, 256) * 0.5
    jf = TinyJit(lambda x, w: chain(x, w, K).realize())
    with cpu_graph():
      for _ in range(4): out = jf(Tensor(x), Tensor(w))
      Device["CPU"].synchronize()
    self.assertTrue(is_command_buffer(jf))
    np.testing.assert_allclose(out.numpy(), np_chain(x.astype(np.float64), w, K), rtol=1e-5, atol=1e-5)

if __name__ == "__main__":
  unittest.main()
