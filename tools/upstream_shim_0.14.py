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
