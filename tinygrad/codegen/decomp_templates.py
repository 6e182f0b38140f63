# A transcendental's decomposition (xsin: ~250 UOps, Payne-Hanek's and Cody-Waite's reductions, a polynomial) is built by the mixins'
# Python (_binop, promote, const_like, dtype_from_uop) once a lane: a float8 batch of W4's sin and cos is 32 of them, ~half of "late
# decompositions". What they build depends on their arguments' dtypes and shapes alone (no value, no identity is looked at), so it
# is built once on placeholders and rebuilt on each lane's arguments: the same ops, dtypes and args over the same sources, so the same
# UOps (hash-consed) as built directly. DECOMP_TEMPLATES=0 builds each directly (test_first_call_cpu.py's TestDecompTemplates).
from typing import Callable
from tinygrad.helpers import ContextVar
from tinygrad.uop.ops import UOp, Ops

DECOMP_TEMPLATES = ContextVar("DECOMP_TEMPLATES", 1)

_templates: dict[tuple, tuple[tuple[UOp, ...], list[UOp], UOp]] = {}

def templated(fxn:Callable[..., UOp], *srcs:UOp) -> UOp:
  """fxn(*srcs), built once per fxn and srcs' dtypes on placeholders of those dtypes, then with srcs in their place"""
  # a scalar lane (a placeholder has its shape, ()); a CONST could be folded where the mixins see it (none does today)
  if not DECOMP_TEMPLATES or any(s.op is Ops.CONST or s._shape != () for s in srcs): return fxn(*srcs)
  if (t:=_templates.get(key:=(fxn, tuple(s.dtype for s in srcs)))) is None:
    ph = tuple(UOp(Ops.NOOP, s.dtype, (UOp.const(0, s.dtype),), ("decomp template", i)) for i,s in enumerate(srcs))
    out, dep, order = fxn(*ph), set(ph), []
    for u in out.toposort():
      if u not in dep and any(s in dep for s in u.src): dep.add(u); order.append(u)  # noqa: E702
    t = _templates[key] = (ph, order, out)
  ph, order, out = t
  new = dict(zip(ph, srcs))
  for u in order: new[u] = UOp(u.op, u.dtype, tuple([new.get(s, s) for s in u.src]), u.arg, u.tag)
  return new.get(out, out)

# the patterns' functions (module functions: a pattern's function is compiled from its code and globals, no closure)
def xsin_t(d:UOp) -> UOp:
  from tinygrad.codegen.decomp.transcendental import xsin
  return templated(xsin, d)
def _xsin_cos(d:UOp, x:UOp) -> UOp:
  from tinygrad.codegen.decomp.transcendental import xsin
  return xsin(d, cos_of=x)
def xsin_cos_t(d:UOp, x:UOp) -> UOp: return templated(_xsin_cos, d, x)
def xexp2_t(d:UOp) -> UOp:
  from tinygrad.codegen.decomp.transcendental import xexp2
  return templated(xexp2, d)
def xlog2_t(d:UOp) -> UOp:
  from tinygrad.codegen.decomp.transcendental import xlog2
  return templated(xlog2, d)
