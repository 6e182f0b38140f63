# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
# compute_gradient for a graph whose structure was seen before (the gradient-cache topic hooks it into mixin/gradient.py on the 0.14.0 line).
# An eager call of a function that takes a gradient (a per-example loss's, bench W6) builds the same forward graph again on new buffers
# (and, inside vmap, a new RANGE), and the gradient rules rebuild its backward graph node by node: ~1 ms of W6's eager call, where the
# forward pass costs 0.5. The gradients are a function of the graph's structure and of its leaves (buffers, RANGEs), so they are kept
# per structure with a placeholder for each leaf (tinygrad/structure_template.py); a hit builds them on this graph's leaves. UOps are
# hash-consed, so the forward nodes a gradient reads come back as this graph's own. Only plain computations are kept: a graph with calls,
# assigns, copies or bound Variables takes the rules.
from __future__ import annotations
from dataclasses import dataclass
from tinygrad.uop import Ops, GroupOp
from tinygrad.uop.ops import UOp, ParamArg
from tinygrad.helpers import getenv
from tinygrad.transform_state import first_device
from tinygrad.structure_template import Structure, Template, KeptTemplates, TEMPLATE_CHECK, TEMPLATE_BUILT, anonymous, check_hit, make_template

# the ops a kept graph may hold besides its leaves, a buffer or a RANGE, which the key names by their place in the walk, not their number
_PLAIN_OPS = GroupOp.ALU | GroupOp.Movement | {Ops.CAST, Ops.CONST, Ops.STACK, Ops.REDUCE, Ops.CONTIGUOUS, Ops.DETACH,
                                               Ops.CONTIGUOUS_BACKWARD, Ops.SINK, Ops.VMAPIN, Ops.VMAPOUT}
GRADIENT_TEMPLATES = getenv("GRADIENT_TEMPLATES", 1)

# per structure, the gradients of its targets (in the order of the walk) on the placeholders, None where no gradient flows, and the
# backward metadata the rules gave each node
_templates = KeptTemplates(1024)

@dataclass
class KeptGradient:
  """what compute_gradient asks first: `grads` is the gradient of a structure seen before, on this graph's leaves; else keep() stores
  the rules' gradients as that structure's template (and, under TEMPLATE_CHECK, checks a hit's against them: `check`)"""
  key: tuple|None
  leaves: list[UOp]
  targets: list[UOp]
  grads: dict[UOp, UOp]|None = None
  check: Template|None = None

  def keep(self, grads:dict[UOp, UOp]) -> dict[UOp, UOp]:
    if self.check is not None:   # built after the rules, so the rules' backward metadata is what the nodes have
      got = _rebuild(self.check, self.leaves, self.targets)
      check_hit([got.get(t) for t in self.targets], [grads.get(t) for t in self.targets], "a gradient")
    if self.key is None or self.key in _templates: return grads
    _templates.keep(self.key, make_template([grads.get(t) for t in self.targets], self.leaves, metadata=True))
    return grads

def _leaf(u:UOp) -> tuple|None: return anonymous(u) if u.op is Ops.RANGE or (u.op is Ops.BUFFER and isinstance(u.arg, ParamArg)) else None

def kept_gradient(root:UOp, root_grad:UOp, targets:set[UOp]) -> KeptGradient:
  """the walk of root and root_grad (every node but a leaf's identity, and where the targets are) and, for a structure seen before, its
  gradients on this graph's leaves; a graph that isn't kept gets no key"""
  if not GRADIENT_TEMPLATES or not (walk:=Structure()).walk(UOp.sink(root, root_grad), _PLAIN_OPS, _leaf): return KeptGradient(None, [], [])
  ordered_targets = sorted(targets, key=lambda t: walk.index.get(t, -1))
  walk.key.append(tuple(walk.index.get(t, -1) for t in ordered_targets))
  ret = KeptGradient(key:=tuple(walk.key), walk.leaves, ordered_targets)
  if (t:=_templates.get(key)) is not None:
    if TEMPLATE_CHECK: ret.check = t   # the rules run, and keep() compares
    else: ret.grads = _rebuild(t, walk.leaves, ordered_targets)
  return ret

def _rebuild(t:Template, leaves:list[UOp], targets:list[UOp]) -> dict[UOp, UOp]:
  # each gradient's device found down to its first node that has one: Tensor.gradient wraps each in a Tensor, which asks it, and the
  # recursive property would compute it for every node the build made
  grads = {tg:g for tg,g in zip(targets, t.build(dict(zip(t.placeholders, leaves)))) if g is not None}
  built = tuple(leaves)
  for i,g in enumerate(t.built):
    if g is None: continue
    first_device(g:=grads[targets[i]])
    if g not in built: g.__dict__[TEMPLATE_BUILT] = (t, built, i)   # true of g for good: UOps don't change (a leaf would hold itself)
  return grads
