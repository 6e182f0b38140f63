# line: 0.12.0 only (the frozen line, the seeds' design; its topics in patches/ hook it, the 0.14.0 line never imports it)
"""Where a vmap becomes a loop: the scheduler's vmap pieces, hooked into upstream's scheduler by the vmap topic patches.

- rangeify (schedule/indexing.py, vmap-rangeify): vmap_scopes finds the scopes each node is in, so a buffer realized inside a scope gets
  the scope's RANGEs as axes; realized_vmapouts and vmapout_ranges give a realized VMAPOUT the output ranges that put the batch back.
- OUTER scopes (schedule/rangeify.py, vmap-outer-chunks): lower_outer_vmapout turns a scope over OUTER RANGEs (chunk_size) into an
  outer-world reduce, run once per chunk.
- the schedule (engine/schedule.py, vmap-outer-chunks): linearize_loops orders the kernels with each OUTER loop nested where it belongs.
- DEBUG_RANGEIFY=1 (schedule/indexing.py, vmap-viz): realize_reason says why a node is realized and which buffer it becomes.
docs/internals.md explains the whole path."""
from __future__ import annotations
from collections import deque
from typing import TYPE_CHECKING
from tinygrad.uop.ops import UOp, Ops, GroupOp, AxisType, resolve
from tinygrad.helpers import dedup, flatten
if TYPE_CHECKING: from tinygrad.schedule.indexing import IndexingContext

# *** rangeify

def vmap_scopes(toposort:list[UOp]) -> dict[UOp, tuple[UOp, ...]]:
  """the RANGEs of the vmap scopes each node is in, outermost first (a forward pass: VMAPIN opens its RANGEs, an op ending a RANGE
  (VMAPOUT, REDUCE) closes it, everything else is in the scopes of its srcs). Forward, so inputs that don't depend on the batch (an index
  buffer) stay unbatched. OUTER RANGEs are not scope axes: a sequential scope reuses its buffers"""
  scopes: dict[UOp, tuple[UOp, ...]] = {}
  if not any(x.op is Ops.VMAPIN for x in toposort): return scopes
  for x in toposort:
    rngs = [r for r in dedup(flatten(scopes.get(s, ()) for s in x.src)) if r not in x.ended_ranges]
    if x.op is Ops.VMAPIN: rngs += [a for a in x.src[1:] if a.op is Ops.RANGE and a.arg[-1] != AxisType.OUTER]
    if rngs: scopes[x] = tuple(rngs)
  return scopes

def realized_vmapouts(x:UOp, consumer_map:dict[UOp, dict[UOp, None]]) -> list[UOp]:
  """the VMAPOUTs whose buffer x realizes, outermost first: x itself if it's a VMAPOUT, or the one in a plain CONTIGUOUS or assigned
  (`buf[:, k].assign(vmap(f)(...))` writes f's results into the row, not into a temporary copied there), and each VMAPOUT directly
  inside those that has no other consumer (nested scopes that end together)"""
  ret: list[UOp] = []
  if x.op is Ops.CONTIGUOUS and len(x.src) == 1 and len(consumer_map[x.src[0]]) == 1: x = x.src[0]
  if x.op is Ops.ASSIGN and len(consumer_map[x.src[1]]) == 1: x = x.src[1]
  while x.op is Ops.VMAPOUT:
    ret.append(x)
    if len(consumer_map[x:=x.src[0]]) != 1: break
  return ret

def vmapout_ranges(vmapouts:list[UOp], new_range) -> list[UOp]:
  """the output ranges of the realized VMAPOUTs: each one's RANGE vargs on its mapped axes, new ranges on the axes of the innermost"""
  inner = iter(vmapout_ranges(vmapouts[1:], new_range) if len(vmapouts) > 1 else [new_range(s) for s in vmapouts[0].src[0].shape])
  # a RANGE not open in the src (a broadcast, or ended inside by a REDUCE over the batch) gets a new range: reusing one a REDUCE
  # ends puts two ENDs of it in one kernel, and codegen's control flow never terminates
  return [(a if a in vmapouts[0].src[0].ranges else new_range(a.vmax+1)) if a.op is Ops.RANGE else next(inner) for a in vmapouts[0].src[1:]]

# *** OUTER scopes

def lower_outer_vmapout(v:UOp) -> UOp|None:
  # a scope over OUTER RANGEs runs once per index: each result is padded into place and summed by the outer world REDUCE. one index is
  # just a scope: a RANGE of size 1 folds to 0, which would leave the REDUCE without its RANGE
  if not (outer:=[a for a in v.src[1:] if a.op is Ops.RANGE and a.arg[-1] == AxisType.OUTER and resolve(a.src[0] != 1)]): return None
  loop = tuple(a for a in v.src[1:] if a not in outer)
  ret = v.src[0].vmapout(loop) if any(a.op is Ops.RANGE for a in loop) else v.src[0]
  ret = ret.reshape(tuple(1 if a in outer else s for a,s in zip(v.src[1:], v.shape)))
  ret = ret.pad(tuple((a, a.vmax-a) if a in outer else (0, 0) for a in v.src[1:]))
  for a in outer: ret = ret.reduce(a, arg=Ops.ADD)
  return ret.rtag(v.tag)

def linearize_loops(in_degree:dict[UOp, int], children:dict[UOp, list[UOp]], writes:dict[UOp, set[UOp]]) -> list[tuple|UOp]:
  """the schedule's kernels in order, each OUTER loop (a RANGE closed by an END) one node of the toposort at its depth: RANGE, its kernels
  (recursively), END. upstream's single toposort works for one loop level; nested ones came out interleaved"""
  # an OUTER range closed by an END is a loop: the schedule re-runs RANGE..END for each index, so a kernel must be inside exactly the
  # loops it depends on. it is in the loops it binds or ends, in those of what it reads (a RANGE, a kernel in the loop but the one
  # that ends it) and, so an accumulator nested in a loop is zeroed on each pass, in those of a kernel updating its buffer in place
  kernels = [k for k in in_degree if k.op is not Ops.RANGE]
  ends = {k:set(k.src[1:]) if k.op is Ops.END else set() for k in kernels}
  loops: dict[UOp, set[UOp]] = {k:set() for k in kernels}
  parents: dict[UOp, list[UOp]] = {}
  for p,cs in children.items():
    for c in cs: parents.setdefault(c, []).append(p)
  if lrngs:=set().union(*ends.values()):
    for k in kernels:
      loops[k] = ends[k] | {s.src[1] for s in (k.src[0] if k.op is Ops.END else k).src
                            if s.op is Ops.BIND and s.src[1:] and s.src[1] in lrngs}
  while True:
    while lrngs:
      n = sum(len(v) for v in loops.values())
      for k in kernels:
        for p in parents.get(k, []): loops[k] |= ({p} & lrngs) if p.op is Ops.RANGE else loops[p] - ends[p]
      for k in reversed(kernels):
        for p in parents.get(k, []):
          if p.op is not Ops.RANGE and writes[p] & writes[k]: loops[p] |= loops[k] - ends[k]
      if n == sum(len(v) for v in loops.values()): break
    # a loop encloses the loops whose kernels are a subset of its own. But a kernel that ends a loop while inside another (an inner
    # vmap's chunk loop accumulating within the outer one's) needs that other loop outside the one it ends, even when the inner loop has
    # more kernels (those of a value that doesn't depend on the outer chunk): depth counts such enclosing loops
    size: dict[UOp, int] = {}
    for k in kernels:
      for r in loops[k]: size[r] = size.get(r, 0) + 1
    inside: dict[UOp, set[UOp]] = {r:set() for r in size}
    for k in kernels:
      for r in ends[k]: inside[r] |= loops[k] - ends[k]
    depth = dict.fromkeys(size, 0)
    for _ in range(len(size)): depth = {r:max([depth[s]+1 for s in inside[r]], default=0) for r in size}
    path = {k:tuple(sorted(loops[k], key=lambda r: (depth[r], -size[r], str(r.arg)))) for k in kernels}
    parent: dict[UOp, tuple[UOp, ...]] = {}
    # a loop inside another for some kernels but not for others (a nested vmap's chunk loop computing a value that doesn't depend on the
    # outer chunk): all its kernels go in the outer loop too, rerun per index like any loop nest, zero-init included
    if not (split:={r:set(parent[r]) ^ set(path[k][:i]) for k in kernels for i,r in enumerate(path[k])
                    if parent.setdefault(r, path[k][:i]) != path[k][:i]}): break
    for k in kernels: loops[k] |= set().union(*[o for r,o in split.items() if r in loops[k]])
  closer = {r:k.src[0].end(r) for k in kernels if k.op is Ops.END for r in k.src[1:]}

  # toposort of the kernels at each depth, a loop nested there is one node: RANGE, its kernels (recursively), END
  schedule: list[tuple|UOp] = [r for r in in_degree if r.op is Ops.RANGE and r not in lrngs]
  def linearize(depth:int, ks:list[UOp]):
    item = {k:k if len(path[k]) == depth else path[k][depth] for k in ks}
    deg: dict[UOp, int] = dict.fromkeys(item.values(), 0)
    kids: dict[UOp, list[UOp]] = {}
    inner: dict[UOp, list[UOp]] = {}
    for k in ks:
      if item[k] is not k: inner.setdefault(item[k], []).append(k)
      for c in children.get(k, []):
        if c in item and item[c] is not item[k]:
          kids.setdefault(item[k], []).append(item[c])
          deg[item[c]] += 1
    queue: deque[UOp] = deque(i for i,d in deg.items() if d == 0)
    while len(queue):
      i = queue.popleft()
      deg.pop(i)
      if i.op is Ops.RANGE:
        schedule.append(i)
        linearize(depth+1, inner[i])
        schedule.append(closer[i])
      else:
        if (k:=i.src[0] if i.op is Ops.END else i).op is not Ops.KERNEL: raise RuntimeError(f"can't schedule {k.op}")
        buf_uops = tuple(s.buf_uop for s in k.src if s.op is not Ops.BIND)
        bound_ranges = tuple(s for s in k.src if s.op is Ops.BIND and len(s.src) > 1 and s.src[1].op is Ops.RANGE)
        schedule.append((k.arg.ast, buf_uops, k.arg.metadata, {}, bound_ranges))
      for x in kids.get(i, []):
        deg[x] -= 1
        if deg[x] == 0: queue.append(x)
    if deg: raise RuntimeError(f"can't schedule {len(deg)} kernels, the outer ranges make a cycle")
  linearize(0, kernels)
  return schedule

# *** DEBUG_RANGEIFY

def realize_reason(x:UOp, out_rngs:tuple[UOp, ...], consumer_rngs:list[tuple[UOp, ...]], ending_ranges:dict[UOp, list[UOp]],
                  rctx:IndexingContext, consumer_map:dict[UOp, dict[UOp, None]], always_realized:set[UOp], tsink:UOp) -> str:
  """DEBUG_RANGEIFY: why x is realized, and the axes of its buffer: the RANGEs of the vmap scopes x is in, then its realized ranges"""
  reasons: list[str] = []
  ended, outputs = dedup(flatten(ending_ranges.get(u, []) for u in consumer_map[x])), [s.base for s in tsink.src]
  if x in always_realized:
    if (vmapouts:=realized_vmapouts(x, consumer_map)):
      reasons.append("VMAPOUT of scope " + ", ".join(a.render() for v in vmapouts for a in v.src[1:] if a.op is Ops.RANGE) +
                     (" (realized by its CONTIGUOUS)" if x.op is Ops.CONTIGUOUS else ""))
    elif x.op is Ops.CONTIGUOUS: reasons.append("explicit contiguous")
    elif x in outputs: reasons.append("an output")
    elif x.op in {Ops.COPY, Ops.BUFFER_VIEW, Ops.STORE, Ops.ENCDEC, Ops.ASSIGN, Ops.REDUCE}: reasons.append(f"always ({x.op.name})")
    else: reasons.append("input of " + ", ".join(dedup(c.op.name for c in consumer_map[x])))
  if x not in always_realized and len(consumer_rngs) > 1:
    idxs = [(i, dedup(r.get_idx() for r in rs)) for i,rs in enumerate(zip(*consumer_rngs))]
    if (differ:=[f"axis {i}: {' vs '.join(r.render() for r in rs)}" for i,rs in idxs if len(rs) > 1]):
      reasons.append(f"multi-consumer: {len(consumer_rngs)} consumers index it differently ({', '.join(differ)})")
  if x not in always_realized and ended and x.op in GroupOp.Elementwise|{Ops.REDUCE_AXIS}:
    reasons.append(f"reduce indexed again (expanded along {', '.join(r.render() for r in UOp.sink(*ended).ranges)} downstream)")
  if len(realized:=rctx.realize_map[x] or []) != len(x.shape): return "; ".join(reasons) + f" -> local buffer on axes {realized}, no scope RANGEs"
  scope = rctx.vmap_map.get(x, ())
  where = ("inside scope " + ", ".join(r.render() for r in scope)) if scope else "outside any scope"
  buf = "".join(f"[{r.render()}]" for r in scope+tuple(out_rngs[i] for i in realized))
  return "; ".join(reasons) + f"; {where} -> buffer {buf} ({'x'.join(str(s) for s in [r.vmax+1 for r in scope]+[x.shape[i] for i in realized])})"
