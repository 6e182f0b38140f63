# line: 0.14.0 only (the devec-elements topic hooks it into codegen/__init__.py's do_devectorize)
"""devectorize2's lanes without an INDEX each: do_devectorize built lane (i, j) of a vector op from each source's `x.index(i, j)`, and
the rewrite then moved each INDEX through the source's movement ops (pm_mops' _mop_index: apply_movement_op, a RESHAPE's a symbolic
simplify of its own) down to a STACK and took that STACK's source (mop_cleanup's "const INDEX into STACK is src"). The lanes' indices
are constants, so lane walks the same way with integers and returns the STACK's source: bench W2's matmul kernel made ~4,200 INDEXes
of RESHAPEs, ~1,500 of EXPANDs, ~600 of PERMUTEs this way. A source that ends elsewhere (a PAD, a symbolic shape, a LOAD) gets its INDEX,
for the rewrite, as upstream. The same sink: DEVEC_ELEMENTS=0 makes every INDEX; test_first_call_cpu.py's TestDevecElements renders both."""
from tinygrad.helpers import ContextVar, all_int, argsort
from tinygrad.uop.ops import Ops, UOp

DEVEC_ELEMENTS = ContextVar("DEVEC_ELEMENTS", 1)

def lane(x:UOp, ii:tuple[int, ...]) -> UOp|None:
  """what INDEX(x, *ii) of constants rewrites to, where that is a STACK's source, else None"""
  while True:
    if x.op is Ops.STACK:
      if not ii or not 0 <= ii[0] < len(x.src): return None
      x, ii = x.src[ii[0]], ii[1:]
      if not ii: return x
      continue
    if x.op not in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP) or len(ii) != len(x.shape): return None
    if not all_int(x.shape) or not all_int(ins:=x.src[0].shape): return None
    match x.op:   # as apply_movement_op, on integers
      case Ops.PERMUTE: ii = tuple(ii[p] for p in argsort(x.marg))
      case Ops.EXPAND: ii = ii[len(x.marg):]
      case Ops.SHRINK:
        if not all(isinstance(off, int) for off, _ in x.marg): return None
        ii = tuple(a+off for a, (off, _) in zip(ii, x.marg))
      case Ops.FLIP: ii = tuple((s-1)-a if f else a for a, s, f in zip(ii, ins, x.marg))
      case Ops.RESHAPE:
        flat = 0
        for a, s in zip(ii, x.shape): flat = flat * s + a
        out = []
        for s in reversed(ins): flat, r = divmod(flat, s) if s else (flat, 0); out.append(r)
        ii = tuple(reversed(out))
    x = x.src[0]
    if len(ii) != len(x.shape): return None

def element(x:UOp, idx:tuple[UOp, ...]) -> UOp:
  """lane idx (CONSTs) of the vector x: the STACK source it rewrites to, or the INDEX for the rewrite to move"""
  if DEVEC_ELEMENTS and (r:=lane(x, tuple(i.arg for i in idx))) is not None: return r
  return x.index(*idx)
