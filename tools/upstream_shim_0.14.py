"""conftest.py for upstream 0.12.0's test files run on a 0.14.0 tinygrad (tools/upstream_suite.py, pyproject.toml's `older_tests`).

0.14.0's sdist ships test/test_tiny.py alone, so the op tests its tinygrad still passes come from 0.12.0's sdist. They import a few names
0.14 moved or dropped, and pass `requires_grad=` to Tensor; this gives 0.14 those names so the files import. It changes no behaviour a
test checks: a test that needs what 0.14 dropped fails on vanilla 0.14 too, and the suite only fails on failures vanilla lacks."""
import tinygrad.helpers as helpers, tinygrad.device as device, tinygrad.tensor as tensor
from tinygrad.dtype import dtypes, _to_np_dtype

for name in ("CPU_LLVM", "AMD_LLVM", "EMULATE"):
  if not hasattr(helpers, name): setattr(helpers, name, helpers.ContextVar(name, 0))
if not hasattr(helpers, "CI"): helpers.CI = False
if not hasattr(tensor, "_to_np_dtype"): tensor._to_np_dtype = _to_np_dtype
# the CPU (clang 14 on x86) has no bfloat16 or fp8 arithmetic
if not hasattr(device, "is_dtype_supported"): device.is_dtype_supported = lambda dt, device=None: dt not in (dtypes.bfloat16, *dtypes.fp8s)

_init = tensor.Tensor.__init__
def _init_without_requires_grad(self, *args, requires_grad=None, **kwargs): _init(self, *args, **kwargs)
if "requires_grad" not in _init.__code__.co_varnames: tensor.Tensor.__init__ = _init_without_requires_grad

# test/helpers.py, which no sdist ships and 0.12's test_dtype, test_jit, test_subbuffer, test_const_folding ... import from: the names
# they use, written for 0.14 here (a test whose helper means something else on 0.14 fails on vanilla 0.14 too, and the baseline has it)
def _test_helpers():
  import sys, types, unittest
  import numpy as np
  from tinygrad import Device
  from tinygrad.uop.ops import Ops
  m = types.ModuleType("test.helpers")
  m.REAL_DEV = Device.DEFAULT
  m.slow = unittest.skip("slow: not in this suite")
  m.needs_second_gpu = unittest.skip("needs a second GPU")
  m.not_support_multi_device = lambda: False
  def rand_for_dtype(dt, size:int) -> np.ndarray:
    """random values dt holds exactly: booleans, small ints (non-negative for unsigned), floats in [-10, 10)"""
    rng = np.random.default_rng(0)
    if dtypes.is_bool(dt): return rng.integers(0, 2, size).astype(np.bool_)
    if dtypes.is_unsigned(dt): return rng.integers(0, 100, size).astype(_to_np_dtype(dt))
    if dtypes.is_int(dt): return rng.integers(-100, 100, size).astype(_to_np_dtype(dt))
    return rng.uniform(-10, 10, size).astype(_to_np_dtype(dt))
  m.rand_for_dtype = rand_for_dtype
  def assert_jit_cache_len(fxn, expected_len:int):
    """the calls (kernels and copies) a TinyJit captured"""
    assert fxn.captured is not None, "the jit captured nothing"
    assert (n:=len([c for c in fxn.captured.linear.src if c.op is Ops.CALL])) == expected_len, f"{n} calls captured, not {expected_len}"
  m.assert_jit_cache_len = assert_jit_cache_len
  sys.modules["test.helpers"] = m
_test_helpers()
