"""The upstream bugs the fix-* topic patches fix, each as its plain repro (no vmap: vanilla 0.12.0 or 0.14.0 fails each) against numpy.
The vmap cases the fuzzer found them by are in test/test_vmap_fuzz.py (TestFuzzRegressions); docs/internals.md maps topics to tests."""
import contextlib, functools, sys, unittest
from unittest import mock
import numpy as np
from tinygrad import Tensor, Device, dtypes, GlobalCounters, vmap
from tinygrad.helpers import Context
from tinygrad.fork_line import LINE_012
from tinygrad.uop.ops import UOp, Ops, KernelInfo
from vmap_oracle import cpu_devices_missing, on_test_device
from fork_topics import applied

def rand(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape)

class TestFixes(unittest.TestCase):
  def test_cut_store_range_reduces(self):
    # fix-cut-store-range-reduces: a store loop cut at a pad's mask, with two REDUCEs inside (the tangent of a max over a padded axis)
    x, t = 0.7, 0.3
    P = lambda v: v.reshape(1, 1, 1).expand(1, 2, 4).pad(((0, 0), (0, 2), (2, 0)))
    mask = (P(Tensor([x])) == P(Tensor([x])).max(1, keepdim=True)).float()
    got = ((mask * P(Tensor([t]))).sum(1) / mask.sum(1)).numpy()
    Pn = lambda v: np.pad(np.full((1, 2, 4), v), ((0, 0), (0, 2), (2, 0)))
    mn = (Pn(x) == Pn(x).max(1, keepdims=True)).astype(np.float32)
    np.testing.assert_allclose(got, (mn * Pn(t)).sum(1) / mn.sum(1), rtol=1e-6)

  def test_merge_adjacent_counts_once(self):
    # fix-merge-adjacent-double-count: the sum of a stack (0.12) or a cat (0.14) of x with itself was 4*x.sum()
    x = rand(3, 4)
    np.testing.assert_allclose(Tensor(x).stack(Tensor(x), dim=-2).sum().numpy(), 2 * x.sum())
    np.testing.assert_allclose(Tensor(x).cat(Tensor(x)).sum().numpy(), 2 * x.sum())

  def test_accumulator_of_a_zero_keeps_its_init(self):
    # fix-accumulator-init (0.14): a sum of mask * (t - t) over ties, after a stack and a pad, read an uninitialized accumulator: nan
    x, t, P = rand(3, 1), rand(3, 1), ((0, 1), (0, 1), (1, 2))
    v, tv = Tensor(x).stack(Tensor(x), dim=2).pad(P), Tensor(t).stack(Tensor(t), dim=2).pad(P)
    u, tu = v - v, tv - tv
    m = (u == u.max(1).unsqueeze(1)).cast(dtypes.float64)
    np.testing.assert_array_equal(((m * tu).sum(1) / m.sum(1)).numpy(), np.zeros((4, 5)))

  def test_stack_of_replicated_and_sharded(self):
    # fix-stack-multi-replicated (0.14): a STACK passed a replicated src (no UNSHARD) whole into every shard's stack beside the sharded
    # srcs' shards: wrong numbers with the sharded src first, an assert with the replicated one first. Also a replicated src made by a sum
    # over a sharded axis (an allreduce) beside one sharded on the other axis.
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    devs, a, b = ("CPU:0", "CPU:1"), rand(4, 6), rand(4, 6, seed=1)
    for axis in (0, 1):
      for dim in (0, 1, 2):
        want = np.stack([a, b], dim)
        np.testing.assert_allclose(Tensor.stack(Tensor(a).shard(devs, axis), Tensor(b).to(devs), dim=dim).numpy(), want)
        np.testing.assert_allclose(Tensor.stack(Tensor(a).to(devs), Tensor(b).shard(devs, axis), dim=dim).numpy(), want)
    np.testing.assert_allclose(Tensor.stack(Tensor(a).shard(devs, 0).sum(1), Tensor(b).shard(devs, 1).sum(1)).numpy(), np.stack([a.sum(1), b.sum(1)]))

  def test_variable_is_not_a_buffer(self):
    # fix-variable-not-a-buffer (0.14): rangeify keeps a value that several kernels read as a buffer of its own when it reads more than
    # three buffers, and it counted a bound Variable as one: here x (three buffers and the Variable) became a third kernel
    a, b, c = (rand(4, 3, seed=i) for i in range(3))
    ta, tb, tc = (Tensor(t).realize() for t in (a, b, c))
    v = UOp.variable("i", 0, 3).bind(2)
    x = ta[v] * tb[v] + tc[v]
    outs = [(x * 2).contiguous(), (x + 1).contiguous()]
    GlobalCounters.reset()
    Tensor.realize(*outs)
    self.assertEqual(GlobalCounters.kernel_count, 2)
    want = a[2] * b[2] + c[2]
    np.testing.assert_allclose(outs[0].numpy(), want * 2)
    np.testing.assert_allclose(outs[1].numpy(), want + 1)

  def test_reduces_of_a_statically_masked_load(self):
    # fix-invalid-lanes (0.14): with the reduces unrolled, every lane of cond.where(0, p)'s load of p is masked off, its index a STACK of
    # Invalid lanes that folded to one scalar Invalid: the ops over it lost their shape ("bad reshape: () -> (1, 2)"), or with n=4 an
    # Invalid reached the renderer
    for n in (2, 4):
      p = rand(n, seed=n)
      cond = 0 < (Tensor.arange(n) + 1).cast(dtypes.float64) * 0.1257
      tp = Tensor(p)
      out = cond.where(tp, 0).sum() + cond.where(0, tp).sum() * 3
      np.testing.assert_allclose(out.numpy(), p.sum())

  def test_cast_folding(self):
    # fix-cast-folding: an inf cast to an int is left to run (it raised while folding), a float constant cast to half is rounded, and a
    # cast of an index that is never valid folds to 0
    self.assertEqual(Tensor.full((2,), float("inf")).cast(dtypes.int32).numpy().shape, (2,))
    v = 0.1234567891234
    self.assertEqual(on_test_device(Tensor(v, dtype=dtypes.float64).cast(dtypes.float16).cast(dtypes.float64)).item(), float(np.float16(v)))
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_equal((w:=Tensor.arange(6).float().reshape(3, 2)).stack(w, dim=-1)[:, 1].numpy(), np.stack([a, a], -1)[:, 1])

  def test_folded_input_not_overwritten(self):
    # fix-folded-input-overwritten: x folds out of (x*0+5), and the output buffer took x's number: the kernel wrote into x
    x = rand(4, 3)
    t = Tensor(x).realize()
    np.testing.assert_equal((t*0+5).contiguous().numpy(), np.full((4, 3), 5.0))
    np.testing.assert_equal(t.numpy(), x)

  def test_spec_custom_kernel(self):
    # fix-spec-custom-kernel: SPEC=2 renders every graph to Python and back, and a custom kernel's function can't be rendered
    def twice(B, A):
      i = UOp.range(3, 0)
      return B[i].store(A[i] * 2).end(i).sink(arg=KernelInfo(name="twice"))
    x = rand(3)
    with Context(SPEC=2): got = Tensor.empty(3, dtype=dtypes.float64).custom_kernel(Tensor(x), fxn=twice)[0].numpy()
    np.testing.assert_equal(got, 2 * x)

  def test_setitem_after_slices(self):
    # fix-setitem-tensor-indices: tensor indices after a slice set only the slice's rows, and t[::-1] = v is not a copy of t reversed
    x, v = rand(3, 4), rand(2)
    t = Tensor(x).contiguous()
    t[1:, Tensor([0])] = Tensor(v).reshape(2, 1)
    want = x.copy()
    want[1:, [0]] = v.reshape(2, 1)
    np.testing.assert_allclose(t.numpy(), want)
    t, v = Tensor(x).contiguous(), rand(3, 4, seed=1)
    t[::-1] = Tensor(v)
    np.testing.assert_allclose(t.numpy(), v[::-1])

  def test_metadata_reset_after_raise(self):
    # fix-metadata-reset: after an op raised, every later op counted as nested in it and got its metadata
    with self.assertRaises(Exception): Tensor.ones(2, 3).reshape(7)
    y = Tensor.ones(3).exp()
    self.assertEqual([m.name for m in y.uop.metadata or ()], ["exp"])

  def test_gradient_of_piecewise_constant_ops(self):
    # fix-gradient-piecewise-constant: a cast to int passed the gradient through; floor had no rule (backward raised)
    x = Tensor(rand(5) * 3)
    (g,) = (x.int().float() + x.floor() * 2 + x.bool().float() * x).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), (rand(5) * 3 != 0).astype(np.float64))

  def test_gradient_through_clone(self):
    # fix-gradient-assign: clone is an assign to an empty buffer, and the assign stopped the gradient (materialized as zeros)
    x = Tensor(rand(4))
    (g,) = (x.clone() * 3).sum().gradient(x)
    np.testing.assert_allclose(on_test_device(g).numpy(), np.full(4, 3.0))

  def test_padded_weak_const_in_a_binary_op(self):
    # fix-weak-const-pad (0.14): a binary op took a weak const seen through a PAD for the const everywhere, dropping the pad's zeros
    a, b = Tensor(1.5).reshape(1).expand(3), Tensor(2.5).reshape(1).expand(1)
    np.testing.assert_equal(on_test_device(a.pad(((0, 1),)) * 2).numpy(), [3, 3, 3, 0])
    np.testing.assert_equal(on_test_device(a.cat(b)).numpy(), [1.5, 1.5, 1.5, 2.5])

  def test_refused_schedule_keeps_the_inputs(self):
    # fix-realize-error-keeps-data (0.14): a graph the scheduler refuses (a shrink of a sharded axis) raised after every Tensor was
    # given its new buffer, so the input, a lazy copy of numpy data, read as zeros afterwards
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    x = rand(4, 4)
    t = Tensor(x).shard(("CPU:0", "CPU:1"), axis=1)
    try: Tensor.stack(t[:, 0] * 2, t[:, 1], dim=1).realize()
    except Exception: pass   # refused (0.14), or scheduled: either way t keeps its data
    np.testing.assert_equal(t.numpy(), x)

  def test_gradient_of_prod_at_zero(self):
    # fix-gradient-prod-zero: ret/x is 0/0 at a zero entry; the product of the others is its derivative
    x = Tensor([2.0, 0.0, 3.0])
    (g,) = x.prod().gradient(x)
    np.testing.assert_allclose(g.numpy(), [0.0, 6.0, 0.0])

  def test_gradient_of_prod_over_ranges(self):
    # the same rule on a REDUCE over RANGE srcs (a product over a vmap scope's examples), whose arg is the op alone, not (op, axes)
    from tinygrad.gradient import compute_gradient
    x = rand(3, 2)
    x[1, 0] = 0
    r, t = UOp.range(3, -7), Tensor(x)
    loss = t.uop.vmapin((r, UOp.const(dtypes.index, 0))).reduce(r, arg=Ops.MUL).r(Ops.ADD, (0,))
    got = Tensor(compute_gradient(loss, loss.const_like(1.0), {t.uop})[t.uop]).numpy()
    np.testing.assert_allclose(got, np.stack([np.prod(np.delete(x, i, 0), 0) for i in range(3)]))

  def test_float_association_kept(self):
    # fix-c-float-association: the C renderers dropped the parentheses of a float's right operand, so a+(b+c) ran as (a+b)+c: 0.0 here
    for dt, big in ((np.float64, 1e16), (np.float32, 1e8)):
      a, b, c = (np.full(4, v, dt) for v in (1.0, big, -big))
      with self.subTest(dtype=np.dtype(dt).name):
        np.testing.assert_array_equal((Tensor(a) + (Tensor(b) + Tensor(c))).numpy(), a + (b + c))
    a, b, c = (np.full(4, v, np.float32) for v in (1e30, 1e30, 1e-30))   # (a*b)*c overflows
    np.testing.assert_array_equal((Tensor(a) * (Tensor(b) * Tensor(c))).numpy(), a * (b * c))

  @unittest.skipUnless(Device.DEFAULT == "CPU", "sin and cos decomposed into float math (a GPU's native sin has its own accuracy)")
  def test_sin_cos_within_ulps_of_numpy(self):
    # fix-c-float-association: Cody-Waite's x - q*PI_A - q*PI_B - ... rendered as q*PI_D + ... + x (float64 sin(1e8) off by 6e-8, 1e-3 at
    # 1e12); fix-cos-large-arguments: cos reduces x itself below the switch too (pi/2 - x rounded: float32 cos(50) off by 6e-7)
    rng = np.random.default_rng(7)
    for dt, top, atol in ((np.float64, 13, 5e-16), (np.float32, 30, 2e-7)):
      x = (rng.uniform(1, 10, (top + 4, 64)) * 10.0 ** np.arange(-3, top + 1)[:, None] * rng.choice([-1, 1], (top + 4, 64))).astype(dt)
      with self.subTest(dtype=np.dtype(dt).name):
        np.testing.assert_allclose(Tensor(x).sin().numpy(), np.sin(x.astype(np.float64)), rtol=0, atol=atol)
        np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x.astype(np.float64)), rtol=0, atol=atol)

  def test_interpolate_float64(self):
    # fix-interpolate-float64: linear interpolate's weights were float32 for any input: a float64 result and its gradient off by ~1e-7
    def lerp_matrix(n_in:int, n_out:int, align_corners:bool) -> np.ndarray:
      src = np.arange(n_out) * (n_in - 1) / (n_out - 1) if align_corners else np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, None)
      lo = np.floor(src).astype(int); hi = np.minimum(lo + 1, n_in - 1)
      m = np.zeros((n_out, n_in))
      np.add.at(m, (np.arange(n_out), lo), 1 - (src - lo)); np.add.at(m, (np.arange(n_out), hi), src - lo)
      return m
    x, g = rand(2, 5, 7, seed=1), rand(2, 8, 11, seed=2)
    for align_corners in (False, True):
      with self.subTest(align_corners=align_corners):
        t = Tensor(x)
        out = t.interpolate((8, 11), mode="linear", align_corners=align_corners)
        grad = (out * Tensor(g)).sum().gradient(t)[0]
        h, w = lerp_matrix(5, 8, align_corners), lerp_matrix(7, 11, align_corners)
        np.testing.assert_allclose(out.numpy(), h @ x @ w.T, rtol=0, atol=1e-13)
        np.testing.assert_allclose(grad.numpy(), h.T @ g @ w, rtol=0, atol=1e-13)

  def test_float64_sin_of_large_arguments(self):
    # fix-float64-sin-reduction: float64's Payne-Hanek reduction was float32-exact: no digit right past 1e7
    x = np.array([1e3, 1e5, 1e7, 1e10])
    np.testing.assert_allclose(Tensor(x).sin().numpy(), np.sin(x), atol=1e-5)
    np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x), atol=1e-5)

  def test_cos_of_large_arguments(self):
    # fix-cos-large-arguments: cos(x) was sin(pi/2-x), and pi/2-x rounds to x's precision: float32's cos was off by ~1e-3 near 1e4, cos(1e30)
    # by 1.4; now cos reduces x itself, one quadrant on
    # (float64 stops at 3e5: past 1e14 its sin and cos are both float32-exact, test_float64_sin_of_large_arguments)
    for dt, x in ((np.float32, [31, -100, 1e4, -3e5, 1e30]), (np.float64, [31, -100, 1e4, -3e5])):
      x = np.array(x, dt)
      with self.subTest(dtype=np.dtype(dt).name):
        np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x.astype(np.float64)), atol=1e-6)

  def test_cos_of_a_scaled_argument(self):
    # fix-cos-large-arguments: cos(x*k) reached the decomposition as SIN(pi/2 + x*-k) (symbolic folds -1*(x*k)), which it didn't know as
    # a cos: pi/2 + x*-k rounded to float32's precision of 1e5 and cos was off by ~2e-2 (sin of the same argument: 1e-7); a native SIN
    # (GPUs, CL, the emulator) takes 1 - 2*sin(x*k/2)^2
    x = (rand(64, seed=3) * 1.7 + 0.3).astype(np.float32)
    for k in (1e5, -3e3, 0.5):
      with self.subTest(k=k):
        want = np.cos((x * np.float32(k)).astype(np.float64))
        np.testing.assert_allclose((Tensor(x) * k).cos().numpy(), want, atol=1e-6)

  def test_view_of_a_folded_contiguous_reads(self):
    # fix-view-of-folded-contiguous: realize folds a CONTIGUOUS of a view that covers the whole buffer (here a permute of size-1 axes)
    # into that view but leaves the CONTIGUOUS in the tensor; reading a view on top of it raised "non-contiguous view is not supported"
    x = rand(1, 1, 3, 1)
    got = Tensor(x).realize().permute(1, 0, 2, 3).contiguous().permute(0, 2, 1, 3).realize()
    np.testing.assert_equal(got.numpy(), x.transpose(1, 0, 2, 3).transpose(0, 2, 1, 3))

  @unittest.skipIf(LINE_012, "0.12's CPU device has one Python worker thread, not 0.14's ring-buffer workers")
  def test_new_cpu_worker_counters_start_at_zero(self):
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    # fix-cpu-worker-counters: a CPU worker's put/done counters came from the allocator's LRU cache, holding what a freed 8-byte tensor
    # held; the first command buffer submitted then waited for ring room forever (or the worker ran garbage commands and crashed)
    Tensor([3.0, 4.0]).contiguous().realize()   # dropped at once: its 8 bytes, nonzero, go back to the LRU cache
    worker = Device["CPU"].worker("TEST:0")      # a queue nothing else uses: a new worker
    self.assertEqual([getattr(worker, n)._buf.cpu_view().view(fmt='Q')[0] for n in ("put", "done", "sys")], [0, 0, 0])

  @unittest.skipIf(LINE_012, "the fix is the 0.14 line's (make test-cl runs there)")
  def test_cl_second_device(self):
    # fix-cl-all-devices: on an OpenCL platform with no GPU, CL:1 was an IndexError however many devices it had (PoCL's CPU devices)
    try:
      from tinygrad.runtime.autogen import opencl as cl
      cl.clGetPlatformIDs(1, platform := (cl.cl_platform_id * 1)(), None)
      n = cl.clGetDeviceIDs(platform[0], cl.CL_DEVICE_TYPE_ALL, 0, None, count := cl.cl_uint()) == 0 and count.value
    except Exception as e: self.skipTest(f"no OpenCL runtime ({type(e).__name__}): make test-cl installs PoCL")
    if n < 2: self.skipTest(f"the OpenCL platform has {n} device(s): make test-cl asks PoCL for four (POCL_DEVICES)")
    x = rand(4)
    np.testing.assert_allclose(Tensor(x).shard(("CL:0", "CL:1"), axis=0).sum().numpy(), x.sum())

  def test_tensor_index_of_computed_eye(self):
    # fix-cmpne-add-lift-loop: indexing a computed eye (jacfwd's basis) with a Tensor looped forever in the load collapse's rewrite
    got = Tensor.eye(4).reshape(4, 2, 2)[:, Tensor([1, 0])].numpy()
    np.testing.assert_equal(got, np.eye(4).reshape(4, 2, 2)[:, [1, 0]])

  def test_cat_of_int_cast_softmaxes(self):
    # fix-cast-folding: the cat's kernel folded its dead half to inf (a load at an invalid index is 0, 1/0), and folding that half's
    # int cast raised OverflowError; vmap's chunks are such a cat
    x = rand(3, 2)
    got = Tensor(x)[:2].softmax(1).mul(3).cast(dtypes.int32).cat(Tensor(x)[2:].softmax(1).mul(3).cast(dtypes.int32)).numpy()
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_equal(got, (3 * e / e.sum(1, keepdims=True)).astype(np.int32))

  def test_assigns_that_read_each_other_raise(self):
    # fix-assign-cycle: two assigns realized together, each reading the other's target, have no order that gives both the old
    # values; vanilla 0.12.0 ran one first and returned [13, 26, 39] for x (0.14.0 raises too)
    x, u = Tensor([1.0, 2.0, 3.0]).contiguous().realize(), Tensor([10.0, 20.0, 30.0]).contiguous().realize()
    new_x, new_u = x + u, x * 2 + u    # both from the old x and u
    with self.assertRaisesRegex(RuntimeError, "cycle detected in assign graph"): Tensor.realize(x.assign(new_x), u.assign(new_u))
    # one way round is an order: u's kernel reads x before x is written
    x, u = Tensor([1.0, 2.0, 3.0]).contiguous().realize(), Tensor([10.0, 20.0, 30.0]).contiguous().realize()
    new_x, new_u = x * 3, x * 2 + u
    Tensor.realize(x.assign(new_x), u.assign(new_u))
    np.testing.assert_allclose(x.numpy(), [3, 6, 9])
    np.testing.assert_allclose(u.numpy(), [12, 24, 36])

  def test_jit_replays_variables_bound_inside(self):
    # fix-jit-inner-variables: a Variable bound inside a jitted function (one kernel run at several values, an index over time)
    # crashed the JIT's graph ("'knot' is not in list") or replayed with no value; each kernel replays with the value it ran with
    from tinygrad import TinyJit
    buf = Tensor.zeros(6, 3).contiguous().realize()
    @TinyJit
    def recursion(x:Tensor) -> Tensor:
      buf[5].assign(x).realize()
      for k in reversed(range(5)):
        k = UOp.variable("knot", 0, 4).bind(k)
        buf[k].assign(buf[k + 1] * 0.5 + 1).realize()
      return buf
    for call in range(4):
      x = rand(3, seed=call)
      want = [x]
      for _ in range(5): want.insert(0, want[0] * 0.5 + 1)
      np.testing.assert_allclose(recursion(Tensor(x, dtype=dtypes.float32)).numpy(), np.stack(want), rtol=1e-6)

class Forced(Exception): pass

def failing(stage:str) -> contextlib.ExitStack:
  """a context in which one stage of a realize raises Forced: the line's function for it wherever a tinygrad module bound it (schedule,
  codegen), the default device's compiler (compile: compile_cached and what else it has) and its programs' call (run)"""
  def boom(*args, **kwargs): raise Forced(stage)
  dev = Device[Device.DEFAULT]
  fxn = {"schedule": ("complete_create_schedule_with_vars",) if LINE_012 else ("create_linear_with_vars",),
         "codegen": ("get_program",) if LINE_012 else ("to_program", "do_to_program")}   # 0.14's quick first build calls do_to_program
  if stage == "compile": targets = [(dev.compiler, n) for n in ("compile", "compile_cached", "compile_cached_many") if hasattr(dev.compiler, n)]
  elif stage == "run":
    rt = dev.runtime if LINE_012 else dev.runtime_t
    targets = [(rt.func if isinstance(rt, functools.partial) else rt, "__call__")]   # a runtime may be a partial of its class (0.12's CPU)
  else: targets = [(m, n) for m in list(sys.modules.values()) for n in fxn[stage] if m.__name__.startswith("tinygrad.")
                   and getattr(getattr(m, n, None), "__module__", "").startswith("tinygrad.")]
  assert targets, stage
  stack = contextlib.ExitStack()
  # 0.14 lowers and compiles several kernels in a pool of processes, which these patches don't reach: here, in this one
  # and with first-numpy a CPU kernel's first run is numpy's, no codegen or compile (test_first_numpy.py checks that raising there keeps
  # the data too)
  if not LINE_012: stack.enter_context(Context(PARALLEL=0, **({"FIRST_NUMPY": 0} if applied("first-numpy") else {})))
  for obj, name in targets: stack.enter_context(mock.patch.object(obj, name, side_effect=boom))
  return stack

STAGES = ("schedule", "codegen", "compile", "run")

class TestRealizeError(unittest.TestCase):
  # fix-realize-error-keeps-data: a realize that raised after it gave the Tensors their new buffers left them naming buffers nobody
  # fills: a lazy input (a Tensor of numpy data) and the Tensors being realized read zeros (vanilla 0.14: both, after a codegen or compile
  # error; vanilla 0.12: the realized Tensor). Each stage raises once here; then every input reads its data and every realized Tensor
  # computes its values
  def check(self, stage:str, c:float, kept=0):
    # c: a constant of this test's own, so its kernels aren't in a cache from an earlier test (codegen and compile would be skipped)
    xn, zn = rand(6, seed=1).astype(np.float32), rand(6, seed=2).astype(np.float32)
    f = lambda x, z: ((x * c + 1).sin(), x.exp() * z)
    # kept: realize the same structure before, on realized inputs, that many times (0.14's callify-cache keeps its template after one, and
    # the template's compiled schedule after two); its kernels are compiled then, so codegen and compile may not happen again
    for i in range(kept): Tensor.realize(*f(Tensor(rand(6, seed=10+i).astype(np.float32)).realize(), Tensor(zn).realize()))
    x, z = Tensor(xn), Tensor(zn).realize()
    if kept: x.realize()
    y, w = f(x, z)
    with failing(stage):
      if kept and stage != "run":
        try: Tensor.realize(y, w)
        except Forced: pass
      else:
        with self.assertRaises(Forced): Tensor.realize(y, w)
    np.testing.assert_equal(x.numpy(), xn)
    np.testing.assert_equal(z.numpy(), zn)
    np.testing.assert_allclose(y.numpy(), np.sin(xn * c + 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), np.exp(xn) * zn, rtol=1e-5)

  def test_schedule_raises(self): self.check("schedule", 1.25)
  def test_codegen_raises(self): self.check("codegen", 1.5)
  def test_compile_raises(self): self.check("compile", 1.75)
  def test_run_raises(self): self.check("run", 2.25)

  def test_kept_template_raises(self):
    # callify-cache (0.14) realizes a structure seen before from a kept template, which gives the Tensors their buffers itself
    for kept in (1, 2):
      for i, stage in enumerate(STAGES): self.check(stage, kept + 1.5 + i / 8, kept=kept)

  def test_vmap_raises(self):
    xn = rand(4, 6, seed=3).astype(np.float32)
    for i, stage in enumerate(STAGES):
      x = Tensor(xn)
      y = vmap(lambda r, c=3.5 + i / 4: (r * c).softmax() + r.max())(x)
      with failing(stage), self.assertRaises(Forced): y.realize()
      np.testing.assert_equal(x.numpy(), xn)
      e = np.exp(xn * (c:=3.5 + i / 4) - (xn * c).max(1, keepdims=True))
      np.testing.assert_allclose(y.numpy(), e / e.sum(1, keepdims=True) + xn.max(1, keepdims=True), rtol=1e-5, atol=1e-6)

if __name__ == "__main__":
  unittest.main()
