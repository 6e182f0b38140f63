"""The CPU device's wait (runtime/ops_cpu.py patch): a thread that synchronizes runs the work still queued for the device's worker thread
itself, instead of sleeping until the worker has run it; tasks still run one at a time and in submission order. A one-thread kernel
launched on an idle device runs right away in the launching thread, one behind queued work waits its turn. Results are checked against
numpy."""
from fork_topics import skip_module_unless
skip_module_unless('eager-cost')
import unittest, unittest.mock, threading, time, sys, contextlib, ctypes
import numpy as np
from tinygrad import Tensor, Device, TinyJit, vmap
import tinygrad.runtime.ops_cpu as ops_cpu

@contextlib.contextmanager
def no_forced_gil_switch():
  """the worker thread takes a task only when it gets the GIL: with a long switch interval that is when this thread blocks (its wait)"""
  old = sys.getswitchinterval()
  sys.setswitchinterval(100)
  try: yield
  finally: sys.setswitchinterval(old)

@unittest.skipUnless(Device.DEFAULT == "CPU", "the CPU device's worker thread")
class TestCPUWaitRunsQueuedWork(unittest.TestCase):
  def setUp(self):
    self.dev = Device["CPU"]
    self.dev.synchronize()

  def run_threads(self, fn):
    """fn's result and the threads that ran each task of the CPU device while it ran"""
    threads, run_task = [], ops_cpu.CPUWorker.run_task
    def recording(worker, task, **kwargs):
      if worker is self.dev.worker: threads.append(threading.current_thread())
      return run_task(worker, task, **kwargs)
    with unittest.mock.patch.object(ops_cpu.CPUWorker, "run_task", recording): return fn(), threads

  def test_jitted_vmap_kernels_run_on_the_waiting_thread(self):
    # two kernels: the jit replays them as one queued graph (one kernel would run where it is launched, see below)
    rng = np.random.default_rng(0)
    x, c = rng.standard_normal((1000, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    f = TinyJit(lambda x, c: vmap(lambda r, c: Tensor.stack(r * c[0], r.contiguous() * c[1] + c[2]), in_axes=(0, None))(x, c).realize())
    xt, ct = Tensor(x).realize(), Tensor(c).realize()
    for _ in range(3): f(xt, ct)   # captured on the 2nd call
    self.dev.synchronize()
    with no_forced_gil_switch():
      out, threads = self.run_threads(lambda: f(xt, ct).numpy())
    x64, c64 = x.astype(np.float64), c.astype(np.float64)
    np.testing.assert_allclose(out, np.stack([x64 * c64[0], x64 * c64[1] + c64[2]], axis=1), rtol=1e-6, atol=1e-6)
    self.assertEqual(threads, [threading.main_thread()])

  def test_queued_tasks_run_in_order_one_at_a_time(self):
    log, lock = [], threading.Lock()
    def cmd(tid, i):
      with lock: log.append(("start", i))
      time.sleep(0.001)   # releases the GIL: the worker may take the next task meanwhile, and must not run it yet
      with lock: log.append(("end", i))
    a = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    for _ in range(3):
      log.clear()
      for i in range(20): self.dev.tasks.put([cmd, 1, 1, i])
      out = (Tensor(a) * 3 + 1).numpy()   # its kernel queued behind them; .numpy() waits
      self.assertEqual(log, [(e, i) for i in range(20) for e in ("start", "end")])
      np.testing.assert_allclose(out, a * 3 + 1, rtol=1e-6)

  def steal_first(self, *tasks):
    """puts tasks on the device's queue and steals the first one, as a waiting thread does (again if the worker took it first)"""
    for _ in range(10):
      with no_forced_gil_switch():
        for t in tasks: self.dev.tasks.put(t)
        if (task:=self.dev.worker.steal()) is not None: return task
      self.dev.tasks.join()
    self.fail("the worker took the first task every time")

  def test_the_worker_waits_for_a_stolen_task(self):
    # the task after a stolen one waits on it (in HCQ, on its signal): the worker may take it meanwhile, but must not run it first
    log = []
    def cmd(tid, name): log.append(name)
    task = self.steal_first([cmd, 1, 1, "A"], [cmd, 1, 1, "B"])
    log.clear()   # attempts where the worker took A first
    while self.dev.tasks.queue: time.sleep(0.001)   # the worker takes B (sleeping releases the GIL)
    self.dev.worker.run_task(task, locked=True)
    self.dev.tasks.join()
    self.assertEqual(log, ["A", "B"])

  def test_a_task_that_raises_on_the_waiting_thread_still_counts_as_done(self):
    def cmd(tid):
      if threading.current_thread() is threading.main_thread(): raise ZeroDivisionError("queued command failed")
    task = self.steal_first([cmd, 1, 0])
    with self.assertRaises(ZeroDivisionError): self.dev.worker.run_task(task, locked=True)   # steal took the lock
    self.dev.tasks.join()   # would hang if the task were still unfinished
    a = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    np.testing.assert_allclose((Tensor(a) - 2).numpy(), a - 2, rtol=1e-6)

  def test_eager_kernel_on_an_idle_device_runs_where_it_is_launched(self):
    a = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    at = Tensor(a).realize()
    self.dev.synchronize()
    with unittest.mock.patch.object(ops_cpu.HCQProgram, "__call__", side_effect=AssertionError("went through the queue")):
      out, threads = self.run_threads(lambda: (at * 2 - 1).realize())
    self.assertEqual(threads, [])
    self.assertEqual(self.dev.tasks.unfinished_tasks, 0)
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) * 2 - 1, rtol=1e-6)

  def test_kernel_behind_queued_work_waits_its_turn(self):
    # a queued command writes the kernel's input: run before it, the kernel would read the old values
    a, b = np.arange(64, dtype=np.float32), np.random.default_rng(4).standard_normal(64).astype(np.float32)
    at = Tensor(a).realize()
    (at + 1).realize()   # compiled now: a compile would block this thread, and let the worker run the command first anyway
    self.dev.synchronize()
    def write_input(tid):
      time.sleep(0.02)
      ctypes.memmove(at.uop.buffer._buf.va_addr, b.ctypes.data, b.nbytes)
    with no_forced_gil_switch():
      self.dev.tasks.put([write_input, 1, 0])
      out = (at + 1).numpy()
    np.testing.assert_allclose(out, b.astype(np.float64) + 1, rtol=1e-6)

if __name__ == "__main__":
  unittest.main()
