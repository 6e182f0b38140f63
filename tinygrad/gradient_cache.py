# compute_gradient for a graph whose structure was seen before (the eager-cost topic hooks it into mixin/gradient.py on the 0.14.0 line).
# An eager call of a function that takes a gradient (a per-example loss's, bench W6) builds the same forward graph again on new buffers
# (and, inside vmap, a new RANGE), and the gradient rules rebuild its backward graph node by node: ~1 ms of W6's eager call, where the
# forward pass costs 0.5. The gradients are a function of the graph's structure and of its leaves (buffers, RANGEs), so they are kept
# per structure with a placeholder for each leaf; a hit builds them on this graph's leaves. UOps are hash-consed, so the forward nodes a
# gradient reads come back as this graph's own. Only plain computations are kept: a graph with calls, assigns, copies or bound Variables
# takes the rules.
from __future__ import annotations
from dataclasses import dataclass, replace
from tinygrad.uop import Ops, GroupOp
from tinygrad.uop.ops import UOp, ParamArg, all_metadata
from tinygrad.helpers import getenv
from tinygrad.batching import _rebuild as rebuild_on

# the ops a kept graph may hold, and its leaves: a buffer or a RANGE is named by its place in the walk, not its number
_PLAIN_OPS = GroupOp.ALU | GroupOp.Movement | {Ops.CAST, Ops.CONST, Ops.STACK, Ops.REDUCE, Ops.CONTIGUOUS, Ops.DETACH,
                                               Ops.CONTIGUOUS_BACKWARD, Ops.SINK, Ops.VMAPIN, Ops.VMAPOUT}
_LEAVES = {Ops.BUFFER, Ops.RANGE}
GRADIENT_TEMPLATES = getenv("GRADIENT_TEMPLATES", 1)
TEMPLATES_KEPT = 1024

@dataclass(frozen=True)
class GradientTemplate:
  grads: tuple[UOp|None, ...]     # per target (in the order of the walk), its gradient on the placeholders; None: no gradient flows
  placeholders: tuple[UOp, ...]   # per leaf of the graph, in the walk's order
  order: tuple[UOp, ...]          # the nodes of grads that read a placeholder, srcs first: what a hit builds anew
  metadata: tuple[tuple, ...]     # per node of order, the metadata the rules gave it (all_metadata)

_templates: dict[tuple, GradientTemplate] = {}

def _placeholder(leaf:UOp, i:int) -> UOp:
  """what stands for a leaf in a template: the leaf with an identity no graph has (ids and slots far from any real one)"""
  return leaf.replace(arg=((1 << 41)+i,)+leaf.arg[1:] if leaf.op is Ops.RANGE else replace(leaf.arg, slot=(1 << 41)+i))

@dataclass
class KeptGradient:
  """what compute_gradient asks first: `grads` is the gradient of a structure seen before, on this graph's leaves; else keep() stores
  the rules' gradients as that structure's template"""
  key: tuple|None
  leaves: list[UOp]
  targets: list[UOp]
  grads: dict[UOp, UOp]|None = None

  def keep(self, grads:dict[UOp, UOp]) -> dict[UOp, UOp]:
    if self.key is None or self.key in _templates: return grads
    _templates[self.key] = _make_template([grads.get(t) for t in self.targets], self.leaves)
    if len(_templates) > TEMPLATES_KEPT: del _templates[next(iter(_templates))]
    return grads

def kept_gradient(root:UOp, root_grad:UOp, targets:set[UOp]) -> KeptGradient:
  if not GRADIENT_TEMPLATES or (walked:=_walk(root, root_grad, targets)) is None: return KeptGradient(None, [], [])
  key, leaves, ordered_targets = walked
  ret = KeptGradient(key, leaves, ordered_targets)
  if (t:=_templates.get(key)) is not None: ret.grads = _rebuild(t, leaves, ordered_targets)
  return ret

def _walk(root:UOp, root_grad:UOp, targets:set[UOp]) -> tuple[tuple, list[UOp], list[UOp]]|None:
  """the structure of root and root_grad as a key (every node but a leaf's identity, and where the targets are), the leaves in the
  walk's order and the targets in it; None for a graph that isn't kept"""
  index: dict[UOp, int] = {}
  key: list = []
  leaves: list[UOp] = []
  for u in UOp.sink(root, root_grad).toposort():
    if u.op in _LEAVES:
      if u.op is Ops.BUFFER and not isinstance(u.arg, ParamArg): return None
      key.append((u.op, u.dtype, u.arg[1:] if u.op is Ops.RANGE else replace(u.arg, slot=0), u.tag, tuple(index[s] for s in u.src)))
      leaves.append(u)
    elif u.op not in _PLAIN_OPS: return None
    else: key.append((u.op, u.dtype, u.arg, u.tag, tuple(index[s] for s in u.src)))
    index[u] = len(index)
  ordered_targets = sorted(targets, key=lambda t: index.get(t, -1))
  key.append(tuple(index.get(t, -1) for t in ordered_targets))
  return tuple(key), leaves, ordered_targets

def _make_template(grads:list[UOp|None], leaves:list[UOp]) -> GradientTemplate:
  """the gradients with placeholders for the leaves"""
  placeholders = tuple(_placeholder(u, i) for i,u in enumerate(leaves))
  memo: dict[UOp, UOp] = dict(zip(leaves, placeholders))
  out = [None if g is None else rebuild_on(g, memo) for g in grads]
  reads: set[UOp] = set(placeholders)
  order: list[UOp] = []
  for x in UOp.sink(*[g for g in out if g is not None]).toposort():
    if x not in reads and any(s in reads for s in x.src): reads.add(x); order.append(x)
  by_template = {v:k for k,v in memo.items()}
  return GradientTemplate(tuple(out), placeholders, tuple(order), tuple(all_metadata.get(by_template.get(x, x), ()) for x in order))

def _rebuild(t:GradientTemplate, leaves:list[UOp], targets:list[UOp]) -> dict[UOp, UOp]:
  memo: dict[UOp, UOp] = dict(zip(t.placeholders, leaves))
  for u,md in zip(t.order, t.metadata):
    memo[u] = new = UOp(u.op, u.dtype, tuple([memo.get(s, s) for s in u.src]), u.arg, u.tag)
    if md and new not in all_metadata: all_metadata[new] = md
  return {tg:memo.get(g, g) for tg,g in zip(targets, t.grads) if g is not None}
