# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
"""Structure templates (0.14 line): what the long way builds on a graph, kept per structure of the graph, so a graph of the same structure
on new leaves (buffers, RANGEs, a vmap scope's inputs) gets it by putting its leaves in their places. An eager call builds the same graph
again and again on new inputs; building on it node by node (batching rules, gradient rules, transform_to_call's rewrites) costs ~20 us
a node, a hit ~3. Three users keep templates, each saying which graphs it keeps and what it keeps: batching.py (a vmap scope's batch),
gradient_cache.py (a graph's gradients), engine/callify_cache.py (a realize's CALL and schedule). Here is what they share: the walk that
keys a graph (`Structure`), the placeholders, the template and its rebuild, the kept dict, and the check that a hit builds the very UOps
(`is`) the long way builds, which TEMPLATE_CHECK=1 runs on every hit (test/test_structure_template.py runs it)."""
from __future__ import annotations
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence
from tinygrad.uop import Ops
from tinygrad.uop.ops import UOp, ParamArg, all_metadata, shape_to_shape_arg
from tinygrad.helpers import ContextVar

# on a hit, build the long way's result too and raise where the template's isn't the very same UOps (every hit of the suites was run so)
TEMPLATE_CHECK = ContextVar("TEMPLATE_CHECK", 0)
# where a UOp a vmap scope's template built keeps (that template, the scope's leaves): a realize of it needs no walk of its graph
# (engine/callify_cache.py, realize_from_batch)
BUILT_FROM = "_built_from"
# where a result of a gradient template's build keeps (that template, the leaves it was built on, its place among the results): the graph
# under it is the template's on those leaves, so what a walk of it finds was found before (batching.py's scope walk, vmap's constants)
TEMPLATE_BUILT = "_template_built"

def built_by(u:UOp) -> tuple[Template, tuple[UOp, ...], int]|None: return u.__dict__.get(TEMPLATE_BUILT)

def template_has(t:Template, op:Ops) -> bool:
  """whether t's results hold a node of `op` (its leaves, a BUFFER or a RANGE, hold none but themselves), kept with the template"""
  if (k:=("has", op)) not in t.memo: t.memo[k] = any(u.op is op for b in t.built if b is not None for u in b.toposort())
  return t.memo[k]

@dataclass
class Structure:
  """a graph's structure as it is walked, srcs first: `key` has an entry per node, `index` is each node's place in the walk and `leaves`
  are the nodes a template reads anew, in the walk's order (placeholder i stands for leaves[i])"""
  index: dict[UOp, int] = field(default_factory=dict)
  key: list = field(default_factory=list)
  leaves: list[UOp] = field(default_factory=list)

  def node(self, u:UOp) -> None:
    """u by its op, dtype, arg, tag and its srcs' places in the walk: two graphs with the same key compute the same on their leaves"""
    self.key.append((u.op, u.dtype, u.arg, u.tag, tuple([self.index[s] for s in u.src])))
    self.index[u] = len(self.index)
  def named(self, u:UOp, entry:Any) -> None:
    """u, which a template holds as it is or builds anew, keyed by `entry` (a constant as itself, a vmap scope's RANGE by its place)"""
    self.key.append(entry)
    self.index[u] = len(self.index)
  def leaf(self, u:UOp, entry:Any) -> None:
    """u, a leaf keyed by `entry`, what a template needs of it (its op, dtype, shape), never its identity (a buffer's slot, a RANGE's id)"""
    self.key.append(entry)
    self.leaves.append(u)
    self.index[u] = len(self.index)

  def walk(self, root:UOp, ops:set[Ops], leaf:Callable[[UOp], Any]) -> bool:
    """every node of root: an op in `ops` as a node, any other a leaf keyed by leaf(u) and the places of its srcs; False, the graph isn't
    kept, where leaf(u) is None. One loop: this walk is most of what a hit costs"""
    index, key, leaves = self.index, self.key, self.leaves
    for u in root.toposort():
      if u.op in ops: key.append((u.op, u.dtype, u.arg, u.tag, tuple([index[s] for s in u.src])))
      elif (entry:=leaf(u)) is None: return False
      else:
        key.append((entry, tuple([index[s] for s in u.src])))
        leaves.append(u)
      index[u] = len(index)
    return True

_ANONYMOUS = "_anonymous"
def anonymous(u:UOp) -> tuple:
  """a BUFFER or RANGE leaf without its identity (a buffer's slot, a RANGE's id): what a key holds of it, kept as the leaf's (an eager
  call's weights are the same leaves every call: dataclasses.replace costs ~3 us)"""
  if (ret:=u.__dict__.get(_ANONYMOUS)) is None:
    ret = u.__dict__[_ANONYMOUS] = (u.op, u.dtype, u.arg[1:] if u.op is Ops.RANGE else replace(u.arg, slot=0), u.tag)
  return ret

_SHAPE_KEPT = UOp.__dict__["_shape"].nm   # where recursive_property keeps a node's shape

def is_constant(u:UOp) -> bool: return u.op is Ops.CONST or (u.op is Ops.STACK and all(s.op is Ops.CONST for s in u.src))

# placeholder ids and slots: far from any RANGE's id (transforms' are negative) or buffer's slot (from_buffer's are negative)
PLACEHOLDER_IDS = 1 << 40
def placeholder(leaf:UOp, i:int) -> UOp:
  """what stands for leaf i in a template: a RANGE or a BUFFER with an identity no graph has, any other leaf a PARAM of its dtype and shape"""
  if leaf.op is Ops.RANGE: return leaf.replace(arg=(PLACEHOLDER_IDS+i,)+leaf.arg[1:])
  if leaf.op is Ops.BUFFER: return leaf.replace(arg=replace(leaf.arg, slot=PLACEHOLDER_IDS+i))
  return UOp(Ops.PARAM, leaf.dtype, (shape_to_shape_arg(leaf.shape),), ParamArg(PLACEHOLDER_IDS+i, leaf.dtype, name="template leaf",
                                                                                  device=leaf.device))

def rebuild(u:UOp, subs:dict[UOp, UOp]) -> UOp:
  """u with the nodes in subs replaced (each node once: subs is the memo), in toposort's order: a per-example graph may be thousands of
  ops deep"""
  for x in u.toposort(gate=lambda x: x not in subs):
    if (src:=tuple([subs.get(s, s) for s in x.src])) != x.src: subs[x] = UOp(x.op, x.dtype, src, x.arg, x.tag)
  return subs.get(u, u)

@dataclass(frozen=True)
class Template:
  """what the long way built on a graph, with a placeholder where it reads each leaf of the graph"""
  built: tuple[UOp|None, ...]
  placeholders: tuple[UOp, ...]   # per leaf, in the walk's order
  order: tuple[UOp, ...]          # the nodes of built that read a placeholder, srcs first: what a hit builds anew
  metadata: tuple[tuple, ...]|None = None   # per node of order, what all_metadata held for the long way's node (gradients' backward ops)
  shapes: tuple = ()              # per node of order, its shape where it is concrete (keys hold their leaves' shapes), else None
  memo: dict = field(default_factory=dict, compare=False, repr=False)   # facts derived from it, computed once (template_has, ...)

  def build(self, memo:dict[UOp, UOp]) -> list[UOp|None]:
    """built on the leaves memo maps the placeholders to (memo may hold the nodes a scope's outputs built before). Each new node keeps
    its shape: the Tensor front end asks it of an output, which would compute it for every node (a toposort a graph)"""
    n = len(self.order)
    for u,md,sh in zip(self.order, self.metadata or (None,)*n, self.shapes if len(self.shapes) == n else (None,)*n):
      if u in memo: continue
      memo[u] = new = UOp(u.op, u.dtype, tuple([memo.get(s, s) for s in u.src]), u.arg, u.tag)
      if sh is not None and (d:=new.__dict__).get(_SHAPE_KEPT, d) is d: d[_SHAPE_KEPT] = sh
      if md and new not in all_metadata: all_metadata[new] = md
    return [None if b is None else memo.get(b, b) for b in self.built]
  def rebuild(self, memo:dict[UOp, UOp]) -> UOp:
    """the build of a template of one result (a vmap scope's output)"""
    return self.build(memo)[0]

def _concrete_shape(x:UOp) -> tuple[int, ...]|None:
  """x's shape where it is concrete, else None; None too where a placeholder makes it invalid: a PARAM has no value range, so one that
  stands for a leaf that bounds a shrink (a chunk's start, a bound Variable in a STACK) makes the shrink look out of bounds"""
  try: sh = x._shape
  except ValueError: return None
  return sh if sh is None or all(isinstance(d, int) for d in sh) else None

def make_template(built:Sequence[UOp|None], leaves:Sequence[UOp], metadata:bool=False) -> Template|None:
  """built with placeholders for the leaves; None where it reads a leaf's insides (besides constants), which would stay this graph's"""
  placeholders = tuple(placeholder(u, i) for i,u in enumerate(leaves))
  memo: dict[UOp, UOp] = dict(zip(leaves, placeholders))
  out = tuple(None if b is None else rebuild(b, memo) for b in built)
  roots = [b for b in out if b is not None]
  sink = roots[0] if len(roots) == 1 else UOp.sink(*roots)
  insides = {x for u in leaves for x in u.toposort() if not is_constant(x)} - set(leaves)
  reads: set[UOp] = set(placeholders)
  if insides and any(x in insides for x in sink.toposort(gate=lambda x: x not in reads)): return None
  order: list[UOp] = []
  for x in sink.toposort():
    if x not in reads and any(s in reads for s in x.src): reads.add(x); order.append(x)
  if len(roots) != 1 and order and order[-1] is sink: order.pop()   # the SINK that joins several roots is no part of what was built
  shapes = tuple(_concrete_shape(x) for x in order)
  if not metadata: return Template(out, placeholders, tuple(order), shapes=shapes)
  by_template = {v:k for k,v in memo.items()}
  return Template(out, placeholders, tuple(order), tuple(all_metadata.get(by_template.get(x, x), ()) for x in order), shapes)

class KeptTemplates(dict):
  """templates by structure key (None: a structure whose result isn't kept), the oldest dropped past `size`: a structure per Python
  constant a graph holds (`x * lr` with a new lr each step is a new one)"""
  def __init__(self, size:int):
    super().__init__()
    self.size = size
  def keep(self, key:tuple, template:Any) -> None:
    if key in self: return
    self[key] = template
    if len(self) > self.size: del self[next(iter(self))]

def check_hit(got:Sequence[UOp|None], want:Sequence[UOp|None], what:str) -> None:
  """TEMPLATE_CHECK: what a hit built is the very UOps (`is`) the long way built"""
  if len(got) != len(want): raise AssertionError(f"{what}: a hit built {len(got)} results, the long way {len(want)}")
  for i,(g,w) in enumerate(zip(got, want)):
    if g is not w: raise AssertionError(f"{what}: a hit's result {i} isn't the long way's:\n{str(g)[:600]}\nthe long way's:\n{str(w)[:600]}")
