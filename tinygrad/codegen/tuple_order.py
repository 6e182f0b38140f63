# The linearizer numbers the uops in the order of sorted(lst, key=priority + u.tuplize): ties of priority are broken by comparing
# whole nested tuples of the uops' graphs. The lanes of a vector (W4's 8 lanes of sin/cos, ~500 uops each) are the same graph down
# to their loads, so each comparison of two lanes walks ~100 levels of tuples before it finds their difference: the sort is
# O(n log n * depth), 130-185 ms of W4's ~4200-uop kernel, most of its linearize. Here each uop gets a label, an int that orders as
# its tuplize does (equal where it is equal): a uop's tuplize is (op, arg, dtype, *its srcs' tuplize), compared element by element,
# so it orders as (op, arg, dtype, *its srcs' labels) once the srcs are labelled, srcs first. A NaN const (sin's inf/nan mask) is
# neither equal to, below nor above a number, so a uop over one keeps its tuple: those few are compared as upstream compares them. The
# same comparisons' answers, so the same order (TUPLE_LABELS=0: upstream's sort; test_first_call_cpu.py's TestCodegenCost3, TestTupleLabels).
from __future__ import annotations
import bisect, math
from typing import Any, Callable
from tinygrad.helpers import ContextVar
from tinygrad.uop.ops import UOp, Ops

TUPLE_LABELS = ContextVar("TUPLE_LABELS", 1)
_OPV = {op:op.value for op in Ops}   # Enum's .value is a Python call
# below this many uops upstream's sort costs about what the labels do (W2's 1140 and W6's 883: +0.4% of their codegen with labels)
LABELS_MIN_UOPS = 2048
_GAP = 1 << 256   # room for 256 halvings between two labels before they are spread out again

def _nan(a:Any) -> bool: return (isinstance(a, float) and math.isnan(a)) or (isinstance(a, tuple) and any(_nan(x) for x in a))

def tuple_labels(lst:list[UOp]) -> dict[UOp, int]|None:
  """a label for each uop of lst (toposorted: srcs first) with label(u) < label(v) iff u.tuplize < v.tuplize, equal iff equal; none
  for a uop whose tuplize holds a NaN (nan == nan, but neither is less than a number: no total order) and those above it. None where
  two args can't be compared or the sorted keys aren't a chain (upstream's sort compares fewer pairs: its own answer, or its error)"""
  label: dict[UOp, int] = {}
  keys: list[tuple] = []    # the distinct (op, arg, dtype's rank, *src labels), sorted
  labels: list[int] = []    # their labels, increasing
  try:
    # dtypes by rank (DType's __eq__ and __lt__ are Python calls): the same answers where they are a chain, as they are
    dts = sorted({u.dtype for u in lst})
    if any(not a < b for a,b in zip(dts, dts[1:])): return None
    drank = {d:i for i,d in enumerate(dts)}
    for u in lst:
      if (arg:=u.arg) is not None and _nan(arg) or any(s not in label for s in u.src): continue
      k = (_OPV[u.op], arg, drank[u.dtype], *[label[s] for s in u.src])
      i = bisect.bisect_left(keys, k)
      if i < len(keys) and keys[i] == k:
        label[u] = labels[i]
        continue
      # each key strictly above the one before it: the keys are a chain, and bisect's place for the next one is its place
      if (i and not keys[i-1] < k) or (i < len(keys) and not k < keys[i]): return None
      lo, hi = labels[i-1] if i else 0, labels[i] if i < len(labels) else (labels[-1] if labels else 0) + 2*_GAP
      if hi - lo < 2:   # no int left between the neighbours: spread every label out again (the same order) and key them anew
        by_old = {old:(j+1)*_GAP for j,old in enumerate(labels)}
        label = {x:by_old[l] for x,l in label.items()}
        labels = [(j+1)*_GAP for j in range(len(labels))]
        keys = [(*kk[:3], *[by_old[l] for l in kk[3:]]) for kk in keys]
        k = (_OPV[u.op], arg, drank[u.dtype], *[label[s] for s in u.src])
        lo, hi = labels[i-1] if i else 0, labels[i] if i < len(labels) else labels[-1] + 2*_GAP
      keys.insert(i, k)
      labels.insert(i, l:=(lo + hi) // 2)
      label[u] = l
  except TypeError: return None
  return label

class _Key:
  """priority + tuplize compared as upstream's key tuple is: by priority and label where both have a label, the tuples where not"""
  __slots__ = ("p", "t", "u")
  def __init__(self, p:tuple, l:int|None, u:UOp): self.p, self.t, self.u = p, None if l is None else p+(l,), u
  def __lt__(self, o:_Key) -> bool:
    if self.t is not None and o.t is not None: return self.t < o.t
    if self.p != o.p: return self.p < o.p
    return self.u.tuplize < o.u.tuplize

def ideal_order(lst:list[UOp], key:Callable[[UOp], tuple], tuplize:bool) -> dict[UOp, int]:
  """the linearizer's {u: i for i,u in enumerate(sorted(lst, key=lambda x: key(x)+(x.tuplize if tuplize else ())))}"""
  if tuplize and TUPLE_LABELS and len(lst) >= LABELS_MIN_UOPS and (label:=tuple_labels(lst)) is not None:
    if len(label) == len(lst): return {u:i for i,u in enumerate(sorted(lst, key=lambda x: key(x)+(label[x],)))}
    return {u:i for i,u in enumerate(sorted(lst, key=lambda x: _Key(key(x), label.get(x), x)))}
  return {u:i for i,u in enumerate(sorted(lst, key=lambda x: key(x)+(x.tuplize if tuplize else ())))}
