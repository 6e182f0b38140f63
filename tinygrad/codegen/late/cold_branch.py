# Branch around the expensive arm of a WHERE (the linearized program, C-style CPU renderers only).
# A WHERE computes both arms. When one arm needs many ops nothing else needs (Payne-Hanek's reduction under sin/cos for |x| >= 30, which
# almost no input takes), the branch-free select pays for that arm on every element. Here the WHEREs that share a condition and such an
# arm become a register written with the other arm and, inside IF, overwritten with the expensive one: a predictable branch instead.
# A vector transcendental is decomposed as one and its WHEREs are split per lane: the lanes' WHEREs branch together, on any lane's condition.
import heapq
from collections import defaultdict
from tinygrad.uop.ops import UOp, Ops, GroupOp
from tinygrad.dtype import dtypes, AddrSpace
from tinygrad.fork_line import LINE_012

COLD_ARM_MIN_OPS = 48  # below this a mispredicted branch costs more than computing the arm
# the 0.12 line keeps vectors (GEP, VECTORIZE) and has DEFINE_REG; the 0.14 line devectorizes every ALU and a register is a REG BUFFER
VECTORS = LINE_012
MOVABLE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST} | ({Ops.GEP, Ops.VECTORIZE} if VECTORS else {Ops.STACK})

def _lane_of(x:UOp) -> UOp|None:
  """the vector whose lane x is (0.12: a GEP; 0.14: an INDEX of a value, vector_lanes' lanes and a vector load's elements), else None"""
  if VECTORS: return x.src[0] if x.op is Ops.GEP else None
  return x.src[0] if x.op is Ops.INDEX and x.src[0].addrspace is AddrSpace.ALU else None

def _movable(u:UOp) -> bool: return u.op in MOVABLE or _lane_of(u) is not None

def _const(dtype, v) -> UOp:
  # 0.14's lowered program holds a constant as a CAST of a weakint CONST (its renderer inlines the CAST and skips a bare CONST)
  return UOp.const(dtype, v) if VECTORS else UOp(Ops.CAST, dtype, (UOp.const(int(v), dtypes.weakint),), dtype)

def _first_reg(lst:list[UOp]) -> int:
  """the first register number no op of lst uses"""
  if VECTORS: return 1 + max([u.arg for u in lst if u.op is Ops.DEFINE_REG], default=-1)
  return 1 + max([u.arg.slot for u in lst if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.REG], default=-1)

def _registers(lst:list[UOp], group:list[UOp], first:int) -> tuple[list[UOp], list[UOp]]:
  """a register of one element per WHERE of group, numbered from first: the ops that define them, and the INDEX each is stored and
  loaded through"""
  zero = _const(dtypes.int, 0)
  if VECTORS:
    idxs = [UOp(Ops.DEFINE_REG, w.dtype.ptr(size=1, addrspace=AddrSpace.REG), arg=first+i).index(zero, ptr=True) for i,w in enumerate(group)]
    return [zero, *[i.src[0] for i in idxs], *idxs], idxs
  regs = [UOp.placeholder((1,), w.dtype, first+i, addrspace=AddrSpace.REG) for i,w in enumerate(group)]
  idxs = [r.index(zero) for r in regs]
  return [zero, *dict.fromkeys(s for r in regs for s in r.src), *regs, *idxs], idxs

def _load_after(idx:UOp, endif:UOp) -> list[UOp]:
  """the ops that load a register after the IF block (0.14 orders a load after the stores it reads with an AFTER)"""
  if VECTORS: return [idx.load()]
  return [after:=idx.src[0].after(endif), index:=after.index(idx.src[1]), index.load()]

def _exclusive_arm(order:dict[UOp, int], consumers:dict[UOp, list[UOp]], group:list[UOp], side:int) -> list[UOp]:
  """the ops (in list order) that only the arms `side` of the WHEREs in group consume, directly or through each other"""
  gset, cone = set(group), set()
  todo = [(-order[w.src[side]], w.src[side]) for w in group]
  heapq.heapify(todo)
  seen = {u for _,u in todo}
  while todo:  # consumers come later in the list: walking back from the arms, each op's consumers are decided before it
    u = heapq.heappop(todo)[1]
    if not _movable(u) or u in gset: continue
    if all(v in cone or (v in gset and all(j == side for j,s in enumerate(v.src) if s is u)) for v in consumers[u]):
      cone.add(u)
      for s in u.src:
        if s not in seen: seen.add(s); heapq.heappush(todo, (-order[s], s))
  return sorted(cone, key=order.__getitem__)

def _in_scope(lst:list[UOp]) -> bool:
  """every op reads only values defined in a RANGE/IF scope that is still open"""
  stack: list[UOp] = []
  scope: dict[UOp, int] = {}
  scope_of: dict[UOp, UOp|None] = {}
  for u in lst:
    for s in u.src:
      if (d:=scope.get(s)) is None or d > len(stack) or (d and stack[d-1] is not scope_of[s]): return False
    if u.op in (Ops.END, Ops.ENDIF): stack.pop()
    scope[u], scope_of[u] = len(stack), stack[-1] if stack else None
    if u.op in (Ops.RANGE, Ops.IF): stack.append(u)
  return True

def _block(lst:list[UOp], group:list[UOp], side:int, arm:list[UOp], first_reg:int) -> tuple[list[UOp], dict[UOp, UOp], int]:
  """the block that replaces group's WHEREs: registers written with the cheap arm, then under IF (the expensive arm's condition) with the
  expensive one, then loaded; and each WHERE's load"""
  conds = list(dict.fromkeys(w.src[0] for w in group))
  defs, idxs = _registers(lst, group, first_reg)
  block = [*defs, *[UOp.store(i, w.src[3-side]) for i,w in zip(idxs, group)]]
  if side == 2: block.append(true:=_const(dtypes.bool, True))
  block += (gates:=[c if side == 1 else c.ne(true) for c in conds])
  any_lane = gates[0]
  for g in gates[1:]: block.append(any_lane:=any_lane | g)
  # one condition: the IF is the arm's condition; lanes: any lane's, and each WHERE selects its own lane's arm inside it
  block += [mif:=UOp(Ops.IF, src=(any_lane, idxs[0])), *arm, *([] if len(conds) == 1 else group),
            *[UOp.store(i, w.src[side] if len(conds) == 1 else w) for i,w in zip(idxs, group)], endif:=UOp(Ops.ENDIF, src=(mif,))]
  loads = [_load_after(i, endif) for i in idxs]
  return block + [u for ld in loads for u in ld], {w:ld[-1] for ld,w in zip(loads, group)}, first_reg + len(group)

def _branch_groups(lst:list[UOp], order:dict[UOp, int], picks:list[tuple[list[UOp], int, list[UOp]]]) -> list[UOp]|None:
  """lst with each pick (group, side, arm) branched around, in one re-linearization (so many groups cost one pass, not one each)"""
  moved: dict[UOp, int] = {}
  for k, (group, _, arm) in enumerate(picks):
    gset = set(group)
    if any(s in gset for u in arm+group for s in u.src): return None  # a WHERE feeding another: left alone
    moved.update((u, k) for u in arm+group)
  blocks, replaced, reg = [], {}, _first_reg(lst)
  for group, side, arm in picks:
    block, loads, reg = _block(lst, group, side, arm, reg)
    blocks.append([u for u in block if u in moved or u not in order])  # a constant the list has stays where it is
    replaced.update(loads)
  # re-linearize with each block as one node, as close to the old order as the new dependencies allow
  node = lambda u: ~moved[u] if u in moved else u   # block k is the node ~k (an int: never a UOp)
  deps: dict = {u:{node(s) for s in u.src} - {u} for u in lst if u not in moved}
  for k, block in enumerate(blocks): deps[~k] = {node(s) for u in block for s in u.src} - set(block) - {~k}
  users: dict = defaultdict(list)
  for u,ds in deps.items():
    for d in ds: users[d].append(u)
  key = lambda u: order[picks[~u][0][0]] if isinstance(u, int) else order[u]
  ready = [(key(u), id(u), u) for u,ds in deps.items() if not ds]  # keys are unique: id() only keeps UOps out of the comparison
  heapq.heapify(ready)
  out: list[UOp] = []
  while ready:
    u = heapq.heappop(ready)[2]
    if isinstance(u, int): out += blocks[~u]
    else:
      if (nu:=u.replace(src=tuple(replaced.get(s, s) for s in u.src))) is not u: replaced[u] = nu
      out.append(nu)
    for v in users[u]:
      deps[v].discard(u)
      if not deps[v]: heapq.heappush(ready, (key(v), id(v), v))
  return out if len(out) == len(lst) - len(moved) + sum(map(len, blocks)) and _in_scope(out) else None

def cold_branches(lst:list[UOp]) -> list[UOp]:
  done: set[UOp] = set()
  while True:
    order = {u:i for i,u in enumerate(lst)}
    consumers: dict[UOp, list[UOp]] = defaultdict(list)
    for u in lst:
      for s in u.src: consumers[s].append(u)
    groups: dict[UOp, list[UOp]] = {}
    for u in lst:
      if u.op is Ops.WHERE and (not VECTORS or u.dtype.count == 1) and u.src[0] not in done: groups.setdefault(u.src[0], []).append(u)
    # the lanes of one vector: WHEREs whose arms are GEPs of one vector join one group
    root: dict[UOp, UOp] = {c:c for c in groups}
    def find(c:UOp) -> UOp: return c if root[c] is c else find(root[c])
    first_lane: dict[tuple[int, UOp], UOp] = {}
    for cond, group in groups.items():
      for k in [(side, v) for w in group for side in (1, 2) if (v:=_lane_of(w.src[side])) is not None]:
        if (other:=first_lane.setdefault(k, cond)) is not cond: root[find(cond)] = find(other)
    for cond in [c for c in groups if find(c) is not c]: groups[find(cond)] += groups.pop(cond)
    # every group worth a branch, those that don't touch each other, branched in one pass
    picks: list[tuple[list[UOp], int, list[UOp]]] = []
    taken, wheres, read = set(), set(), set()   # the picked groups' ops (WHEREs and arms), their WHEREs, and what their ops read
    for group in [sorted(g, key=order.__getitem__) for g in groups.values()]:
      done.update(w.src[0] for w in group)
      # an arm that is a constant (or a load) in every WHERE has no ops of its own: most groups (sin's inf/nan masks) end here, cheaply
      if any(all(not _movable(w.src[side]) for w in group) for side in (1, 2)): continue
      arms = [(_exclusive_arm(order, consumers, group, side), side) for side in (1, 2)]
      (other, _), (arm, side) = sorted(arms, key=lambda x: len(x[0]))
      # both arms must have work of their own: a WHERE picking a constant is a mask or a special case, its condition no hint of a rare path
      if not (len(other) and len(arm) >= COLD_ARM_MIN_OPS): continue
      ops, srcs = set(arm) | set(group), {s for u in arm+group for s in u.src}
      if ops & taken or srcs & wheres or set(group) & read:   # touches a picked group: tried again next round, after it is branched
        done.difference_update(w.src[0] for w in group)
        continue
      picks.append((group, side, arm))
      taken, wheres, read = taken | ops, wheres | set(group), read | srcs
    if not picks: return lst
    if (new:=_branch_groups(lst, order, picks)) is None:
      # one at a time, as they were found: the first that branches, the others tried again in the next round
      k, new = next(((k, n) for k, p in enumerate(picks) if (n:=_branch_groups(lst, order, [p])) is not None), (len(picks), None))
      done.difference_update(w.src[0] for g, _, _ in picks[k+1:] for w in g)
      if new is None: continue
    lst = new
