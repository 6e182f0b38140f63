"""Shared helpers for the vmap tests: random data, the VMAPIN/VMAPOUT bracket, and the independent oracle (a numpy loop over examples)."""
import functools, os, unittest
from types import SimpleNamespace
import numpy as np
from tinygrad import Tensor, GlobalCounters, Device, dtypes
from tinygrad.uop.ops import AxisType
from tinygrad.fork_line import LINE_012
from tinygrad.helpers import Context
from tinygrad.vmap import vmap_range, varg
if LINE_012: from tinygrad.uop.spec import tensor_spec as TENSOR_SPEC   # the tensor graph's spec: tensor_spec on 0.12, spec_tensor on 0.14
else: from tinygrad.uop.spec import spec_tensor as TENSOR_SPEC

RNG = np.random.default_rng(20261122)

# *** what the two upstream lines spell differently ***

def param(x, **kwargs) -> Tensor:
  """a Tensor whose .grad backward() fills: requires_grad=True on 0.12; 0.14 has no requires_grad (backward fills every float leaf)"""
  return Tensor(x, requires_grad=True, **kwargs) if LINE_012 else Tensor(x, **kwargs)

def realize_with_buffers(t:Tensor) -> list:
  """realizes t and returns the Buffers its kernels use (t's own, its inputs' and the intermediates'), from its schedule"""
  if LINE_012:
    from tinygrad.engine.realize import run_schedule
    sched = t.schedule()
    bufs = [b for ei in sched for b in ei.bufs if b is not None]
    run_schedule(sched)   # which empties sched
    return bufs
  from tinygrad.engine.realize import run_linear
  from tinygrad.uop.ops import Ops
  if t.uop.is_virtual: t.replace(t.contiguous())   # 0.14 leaves an elementwise op of realized buffers virtual (computed where it is read)
  linear, var_vals = t.linear_with_vars()
  run_linear(linear, var_vals)
  # an intermediate is a slice of 0.14's arena, BITCAST(SHRINK(BUFFER of bytes)): its size is the slice's bytes over its itemsize
  def buf(u): return u.buffer if u.op is Ops.BUFFER else SimpleNamespace(size=u.src[0].shape[0] // u.dtype.itemsize)
  return [buf(u) for call in linear.src for u in call.src[1:] if u.op is Ops.BUFFER or
          (u.op is Ops.BITCAST and u.src[0].op is Ops.SHRINK and u.src[0].src[0].op is Ops.BUFFER)]

def jit_kernels(jf) -> int:
  """how many kernels a TinyJit replays"""
  if LINE_012: return len(jf.captured.jit_cache)
  from tinygrad.uop.ops import Ops
  # a CALL a kernel, or one command buffer of them all (hcq: TinyJit's CPU graph of a capture of many kernels)
  return sum(len(c.arg.aux.kernels) if c.src[0].op is Ops.CUSTOM_FUNCTION and c.src[0].arg == "hcq" else 1
             for c in jf.captured.linear.src if c.op is Ops.CALL)

def training():
  """the context dropout & co draw in: Tensor.train() on 0.12, Context(TRAINING=1) on 0.14"""
  if LINE_012: return Tensor.train()
  from tinygrad.helpers import Context
  return Context(TRAINING=1)

def schedule_cache_size() -> int:
  """how many schedules the schedule cache holds"""
  if LINE_012: from tinygrad.engine.schedule import schedule_cache
  else: from tinygrad.schedule import schedule_cache
  return len(schedule_cache)

def compiled_programs() -> int:
  """how many kernels this process has compiled: 0.14's to_program cache, 0.12's method cache"""
  if LINE_012: from tinygrad.engine.realize import method_cache as to_program_cache
  else: from tinygrad.codegen import to_program_cache
  return len(to_program_cache)

# LINE_012: the 0.12 line's vmap scopes reach the scheduler (which refuses some sharded cases with a clear error); on 0.14 (no OUTER) a
# scope is a batched graph from its vmapout on, and upstream's multi-device code runs those cases

def needs_grad(t:Tensor) -> Tensor:
  """t, marked for backward() to fill its .grad: requires_grad_() on 0.12; 0.14 fills every float leaf's"""
  return t.requires_grad_() if LINE_012 else t

def kernel_sources(t:Tensor) -> list[str]:
  """the source code of the kernels that realize t, in the order they run"""
  if LINE_012: return [p.src for ei in t.schedule() if (p:=getattr(ei.lower().prg, "p", None)) is not None]
  from tinygrad.engine.realize import compile_linear
  from tinygrad.uop.ops import Ops
  return [u.arg for u in compile_linear(t.schedule_linear()).toposort() if u.op is Ops.SOURCE]

@functools.cache
def half_missing() -> str|None:
  """why the tests' device can't compute in float16, or None: PoCL's CPU device has no cl_khr_fp16 (make test-cl), the PYTHON
  emulator has no half before Python 3.12. There a cast to half is not rounded, so a test of one skips, saying so"""
  if LINE_012:
    from tinygrad.device import is_dtype_supported
    # 0.12 says yes for any CL device: PoCL's CPU device lists no cl_khr_fp16
    ok = is_dtype_supported(dtypes.half) and (Device.DEFAULT != "CL" or "cl_khr_fp16" in str(getattr(Device["CL"], "device_exts", "")))
  else: ok = dtypes.half in Device[Device.DEFAULT].renderer.supported_dtypes()
  return None if ok else f"{Device.DEFAULT} has no float16 (its renderer's supported dtypes)"

# the device whose instances (:0, :1, ...) the sharded tests shard over: the CPU's (one GPU has no second device), or SHARD_DEVICE's
# (make test-cl: CL, PoCL's CPU devices)
SHARD_DEVICE = os.environ.get("SHARD_DEVICE", "CPU")
def shard_devices(n:int) -> tuple[str, ...]: return tuple(f"{SHARD_DEVICE}:{i}" for i in range(n))

@functools.cache
def cpu_devices_missing() -> str|None:
  """why the CPU devices that the sharded tests shard over (CPU:0, CPU:1, ...: one GPU has no second device) can't build a kernel on this
  machine, or None. A GPU machine may lack clang, tinygrad's CPU compiler. SHARD_DEVICE's: why its fourth instance can't be opened"""
  if SHARD_DEVICE != "CPU":
    try: Device[f"{SHARD_DEVICE}:3"]
    except Exception as e: return f"{SHARD_DEVICE}:3, the sharded tests' fourth device, can't be opened: {type(e).__name__}: {e}"
    return None
  try: Device["CPU"].compiler.compile("void probe(void) {}")
  except Exception as e: return f"the CPU devices these tests shard over can't compile here (CC={os.environ.get('CC', 'clang')}: {type(e).__name__})"
  return None

def on_test_device(t:Tensor) -> Tensor:
  """t where the tests run: 0.14 realizes a Tensor of constants alone (no device: a scalar Tensor, a constant gradient) on the CPU,
  which a GPU machine may not compile for; a test of what such a Tensor holds reads it on the tests' device"""
  return t if t.device is not None else Tensor(t.uop.clone(device=Device.DEFAULT))

def skip_without_cpu_devices():
  """setUpModule of a module whose tests shard over CPU devices"""
  if (why:=cpu_devices_missing()) is not None: raise unittest.SkipTest(why)

def rand(*shape:int) -> np.ndarray:
  """float64 standard normal data: every example differs, so 'last batch wins' can't pass"""
  return RNG.standard_normal(shape)

def batched(batch:int, shape:tuple[int, ...], axis:int) -> np.ndarray:
  """random data of per-example `shape` with a batch axis of size `batch` at `axis`"""
  return np.moveaxis(rand(batch, *shape), 0, axis)

def nested_batch(shape:tuple[int, ...], axes:tuple[int, ...], sizes:tuple[int, ...]) -> np.ndarray:
  """random data for nest(fn, axes): per-example `shape` with a batch axis of size sizes[d] at axes[d] of what depth d sees"""
  full = list(shape)
  for a, b in zip(reversed(axes), reversed(sizes)): full.insert(a, b)
  return rand(*full)

def bracket(fn, *xs:Tensor, in_axes:int|tuple[int|None, ...]=0, out_axis:int=0, axis_type:AxisType=AxisType.LOOP) -> Tensor:
  """fn run on one example of each x inside a VMAPIN/VMAPOUT scope over axis in_axes[i] of xs[i] (None: not mapped, passed whole)"""
  in_axes = in_axes if isinstance(in_axes, tuple) else (in_axes,)*len(xs)
  r = vmap_range(next(x.shape[a] for x, a in zip(xs, in_axes) if a is not None), axis_type)
  y = fn(*[x if a is None else x.vmapin(varg(x.ndim, {a:r})) for x, a in zip(xs, in_axes)])
  return y.vmapout(varg(y.ndim+1, {out_axis:r}))

def np_loop(fn, *xs:np.ndarray, in_axes:int|tuple[int|None, ...]=0, out_axis:int=0) -> np.ndarray:
  """the oracle: fn on each example, one at a time, stacked at out_axis"""
  in_axes = in_axes if isinstance(in_axes, tuple) else (in_axes,)*len(xs)
  n = next(x.shape[a] for x, a in zip(xs, in_axes) if a is not None)
  return np.stack([np.asarray(fn(*[x if a is None else np.take(x, i, axis=a) for x, a in zip(xs, in_axes)])) for i in range(n)], axis=out_axis)

def nest(fn, axes:tuple[int, ...], axis_type:AxisType|tuple[AxisType, ...]=AxisType.LOOP):
  """fn (of one input) inside len(axes) nested vmap scopes, the scope at depth d mapping axis axes[d] of what the enclosing scope passes in,
  its RANGE of axis_type (or axis_type[d])"""
  types = axis_type if isinstance(axis_type, tuple) else (axis_type,)*len(axes)
  for a, t in zip(reversed(axes), reversed(types)): fn = (lambda f, a, t: lambda e: bracket(f, e, in_axes=a, axis_type=t))(fn, a, t)
  return fn

def np_nest(fn, axes:tuple[int, ...]):
  """the oracle of nest: numpy loops nested the same way"""
  for a in reversed(axes): fn = (lambda f, a: lambda e: np_loop(f, e, in_axes=a))(fn, a)
  return fn

def np_softmax(x:np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def kernels(fn) -> int:
  """the number of kernels run by fn()"""
  before = GlobalCounters.kernel_count
  fn()
  return GlobalCounters.kernel_count - before

class VmapTestCase(unittest.TestCase):
  def assert_close(self, got, want, atol=1e-9, rtol=1e-9):
    self.assertEqual(got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)

  def check(self, tfn, *xs:np.ndarray, nfn=None, in_axes:int|tuple[int|None, ...]=0, out_axis:int=0, axis_type=AxisType.LOOP, **tol):
    """bracket(tfn) on the batch equals the numpy loop of nfn (default: tfn, for functions that read the same on Tensor and ndarray)"""
    got = bracket(tfn, *[Tensor(x) for x in xs], in_axes=in_axes, out_axis=out_axis, axis_type=axis_type).numpy()
    self.assert_close(got, np_loop(nfn or tfn, *xs, in_axes=in_axes, out_axis=out_axis), **tol)

class Scheduled:
  """a mixin for tests of what the scheduler makes (schedule cache hits, kernel counts): a function's first realize, run as numpy over
  its graph where FIRST_NUMPY=1 turns that on (engine/first_graph.py), would not be scheduled, so here it is"""
  def setUp(self):
    super().setUp()  # type: ignore[misc]
    from fork_topics import applied
    if not LINE_012 and applied("first-numpy-graph"): self.enterContext(Context(FIRST_GRAPH=0))  # type: ignore[attr-defined]
class ScheduledTestCase(Scheduled, VmapTestCase): pass

# *** oracles of the differential fuzzer (test_vmap_fuzz.py): a vmap of any in_axes/out_axes, softmax on any axis, a numeric Jacobian ***

def np_batch(fn, size:int, in_axes, out_axes=0):
  """the oracle of vmap(fn, in_axes, out_axes, axis_size=size): fn on each example (np.take of every mapped input), one at a time, each
  output stacked at its out_axes (an int, None for an output that doesn't depend on the batch, or a tuple with one entry per output)"""
  def batched(*xs):
    ia = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,)*len(xs)
    res = [fn(*[x if a is None else np.take(x, i, axis=a) for x, a in zip(xs, ia)]) for i in range(size)]
    def stack(outs, a): return outs[0] if a is None else np.stack(outs, axis=a)
    if isinstance(out_axes, (tuple, list)): return tuple(stack([r[k] for r in res], a) for k, a in enumerate(out_axes))
    return stack(res, out_axes)
  return batched

def set_items(x, idx, v):
  """x with x[idx] = v, on a copy: the same code for a Tensor and an ndarray (JAX's x.at[idx].set(v))"""
  y = x.clone() if isinstance(x, Tensor) else x.copy()
  y[idx] = v
  return y

def np_scan(f, init, xs, reverse=False):
  """the oracle of scan(f, init, xs, reverse=reverse) on arrays: a Python loop, ys stacked in xs's order"""
  carry, ys = init, [None]*len(xs)
  for t in (reversed(range(len(xs))) if reverse else range(len(xs))): carry, ys[t] = f(carry, xs[t])
  return carry, np.stack(ys)

def np_softmax_axis(x:np.ndarray, axis:int) -> np.ndarray:
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)

def np_log_softmax(x:np.ndarray, axis:int) -> np.ndarray:
  m = x - x.max(axis, keepdims=True)
  return m - np.log(np.exp(m).sum(axis, keepdims=True))

def num_jac(fn, h:float=1e-5):
  """the Jacobian of fn by float64 central differences in its first argument: shape out.shape + x.shape, as jacfwd"""
  def jac(x, *rest):
    x = np.asarray(x, dtype=np.float64)
    cols = []
    for i in range(x.size):
      e = np.zeros(x.size)
      e[i] = h
      cols.append((np.asarray(fn(x + e.reshape(x.shape), *rest)) - np.asarray(fn(x - e.reshape(x.shape), *rest))) / (2*h))
    out_shape = np.asarray(fn(x, *rest)).shape
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape) if cols else np.zeros(out_shape + x.shape)
  return jac

def np_mlp_per_example_grads(w1, b1, w2, X, Y):
  """the gradients of ((x @ w1 + b1).relu() @ w2 - y) ** 2 in w1, b1 and w2, one per example (row) of X and Y"""
  h = X @ w1 + b1
  d = 2 * (np.maximum(h, 0) @ w2 - Y)
  g = d[:, None] * w2 * (h > 0)
  return X[:, :, None] * g[:, None, :], g, d[:, None] * np.maximum(h, 0)
