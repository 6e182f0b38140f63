# line: 0.14.0 only (a custom kernel of 0.14's UOp API: a LOOP range, REG placeholders, AFTER-ordered stores)
"""A scan as ONE kernel: the carry lives in registers across a LOOP range over the steps; each step's x is loaded and its y stored
inside the loop. `scan_kernel(step, init_leaves, xs_leaves, length, reverse)` traces `step` once on per-step Tensors, evaluates its
small graph element by element into scalar UOps (the body), and wraps the body in the loop as a custom kernel: kernels per call do not
grow with the length. A body it cannot fuse (a realize inside, a large reduce, an op it does not know) returns None, and DEBUG>=2 says
why; the caller (tinygrad/scan.py) then runs its own lowering. docs/internals.md, "scan: a recursion as one kernel (0.14)"."""
from __future__ import annotations
import functools, importlib.util, math
from typing import Callable
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import UOp, Ops, GroupOp, KernelInfo, AxisType
from tinygrad.dtype import AddrSpace, dtypes
from tinygrad.helpers import DEBUG, GlobalCounters, getenv
from tinygrad.transform_state import TRANSFORMS

MAX_SCALARS = getenv("SCAN_KERNEL_MAX", 20000)   # scalar UOps a body may unroll to; more is a "large" body, left to the caller

class NoFuse(Exception): pass

def _objs(shape:tuple[int, ...], fn:Callable) -> np.ndarray:
  import numpy as np
  ret = np.empty(shape, dtype=object)
  for i in np.ndindex(*shape): ret[i] = fn(i)
  return ret
def _map(fn:Callable, *xs:np.ndarray) -> np.ndarray:
  import numpy as np
  xs = np.broadcast_arrays(*xs)
  return _objs(xs[0].shape, lambda i: fn(*(x[i] for x in xs)))

class _Scalarize:
  """evaluates a Tensor graph to an object array of scalar UOps per node: movement ops move the array, ALUs map over it, a REDUCE
  folds its leading axes. `leaves` maps a leaf's base UOp to the flat array of its elements (the loads in the kernel)."""
  def __init__(self, leaves:dict[UOp, np.ndarray]): self.memo, self.count = dict(leaves), 0
  def __call__(self, u:UOp) -> np.ndarray:
    if (r:=self.memo.get(u)) is not None: return r
    if not all(isinstance(s, int) for s in u.shape): raise NoFuse(f"symbolic shape {u.shape} at {u.op}")
    self.memo[u] = r = self._eval(u)
    if (n:=r.size) and self.count+n > MAX_SCALARS: raise NoFuse(f"the body is over {MAX_SCALARS} scalars (SCAN_KERNEL_MAX)")
    self.count += n
    return r
  def _eval(self, u:UOp) -> np.ndarray:
    import numpy as np
    if u.op is Ops.CONST: return _objs((), lambda _: u if not u.src else UOp.const(u.val, u.dtype))
    if u.op in {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}: return self(u.src[0])
    if u.op is Ops.BUFFER: raise NoFuse("a buffer the step did not get as a leaf")
    if u.op in GroupOp.ALU:
      return _map(lambda *a: UOp(u.op, u.dtype, a, u.arg), *[self(s) for s in u.src]).reshape(u.shape)
    if u.op in {Ops.CAST, Ops.BITCAST}:
      f = UOp.cast if u.op is Ops.CAST else UOp.bitcast
      return _map(lambda a: f(a, u.dtype), self(u.src[0])).reshape(u.shape)
    if u.op is Ops.STACK:
      return np.stack([np.broadcast_to(self(s), u.shape[1:]) for s in u.src]) if u.src else np.empty((0,), dtype=object)
    if u.op is Ops.REDUCE:
      x, (op, n) = self(u.src[0]), u.arg
      if n == 0: return x
      return _map(lambda *a: functools.reduce(lambda p, q: p.alu(op, q), a), *x.reshape((-1,)+x.shape[n:])).reshape(u.shape)
    if u.op in GroupOp.Movement:
      x, arg = self(u.src[0]), u.marg
      match u.op:
        case Ops.RESHAPE: return x.reshape(arg)
        case Ops.EXPAND: return np.broadcast_to(x, tuple(arg) + x.shape)   # 0.14: new leading axes
        case Ops.PERMUTE: return x.transpose(arg)
        case Ops.SHRINK: return x[tuple(slice(b, b+n) for b, n in arg)]   # 0.14: (begin, size)
        case Ops.FLIP: return np.flip(x, tuple(i for i, f in enumerate(arg) if f) if all(isinstance(f, bool) for f in arg) else arg)
        case Ops.PAD:
          ret = np.full(u.shape, UOp.const(0, u.dtype), dtype=object)   # 0.14: (before, new size)
          ret[tuple(slice(b, b+s) for (b, _), s in zip(arg, x.shape))] = x
          return ret
    raise NoFuse(f"{u.op} is not fused into a scan kernel")

def _closed_over(outs:list[UOp], placeholders:set[UOp], dev:str) -> list[UOp]:
  """the values the step's graph reads that it did not get as leaves (what it closes over), each the largest such part of the graph:
  inputs of the kernel. Constants (no device) stay in the body"""
  from tinygrad.batching import open_vmap_ranges
  dep: dict[UOp, bool] = {}
  for u in UOp.sink(*outs).toposort(): dep[u] = u in placeholders or any(dep[s] for s in u.src)
  closed: list[UOp] = []
  seen: set[UOp] = set()
  def visit(u:UOp):
    if u in seen or u in placeholders: return
    seen.add(u)
    if dep[u]:
      for s in u.src: visit(s)
    elif u.device is not None: closed.append(u)
  for o in outs: visit(o)
  for u in closed:
    if u.device != dev: raise NoFuse(f"the step closes over a value on {u.device}, the leaves are on {dev}")
    if not all(isinstance(s, int) for s in u.shape): raise NoFuse(f"the step closes over a value of symbolic shape {u.shape}")
    if u.numel() > MAX_SCALARS: raise NoFuse(f"the step closes over a value of {u.numel()} elements (SCAN_KERNEL_MAX)")
    if open_vmap_ranges(u): raise NoFuse("the step closes over a value of one example (in a vmap scope)")
  return closed

def _flat(p:UOp, lead:int) -> UOp: return p.reshape(p.shape[:lead] + (math.prod(p.shape[lead:]),))

def scan_kernel(step:Callable[[list[Tensor], list[Tensor]], tuple[list[Tensor], list[Tensor]]], init_leaves:list[Tensor],
                xs_leaves:list[Tensor], length:int, reverse:bool=False, batch:int|None=None,
                backward:Callable[[list[Tensor], list[Tensor]], tuple[list[Tensor], list[Tensor]]]|None=None,
                lower:Callable[[Callable, list[Tensor], list[Tensor]], tuple[list[Tensor], list[Tensor]]]|None=None,
                closed_out:list[UOp]|None=None, batched:list[bool]|None=None) -> tuple[list[Tensor], list[Tensor]]|None:
  """jax.lax.scan over flat leaves as one kernel, or None when the body cannot fuse. `step(carry_leaves, x_leaves) -> (carry_leaves,
  y_leaves)` works on one step's Tensors (x_leaves[i] has xs_leaves[i].shape[1:]); returns `(final_carry_leaves, ys_leaves)`, ys
  stacked on a new leading axis of size `length` (ys[t] belongs to xs[t], also when `reverse`). With `batch=B` every leaf has a leading
  batch axis of size B (init (B, ...), xs (B, length, ...)), `step` sees one example, and the results are (B, ...) and (B, length, ...):
  one kernel whose batch range is parallel (GLOBAL on a GPU). `backward(init_leaves, xs_leaves)` computes the same results as a graph
  that has a gradient (scan's unrolled lowering): a gradient through the kernel is that graph's, recomputed from the kernel's inputs.
  Without it a gradient through the kernel raises. `lower(step, init_leaves, xs_leaves)` runs another scan of the same length and
  direction over leaves shaped as these (scan's dispatch): forward mode through the kernel (jvp, jacfwd) is the scan of the step and its
  tangents, the tangent carry beside the carry in one loop (`_tangent_scan`). Without it a tangent through the kernel raises.
  A Tensor the step closes over (parameters, a realized table) is an input of the kernel, read whole; `closed_out`, where given, gets
  those values (UOps of the step's graph) appended, so a caller can differentiate through them too. With a batch, `batched` says for
  each leaf (init's, then xs') whether it has the batch axis: a leaf without is every example's, read by each (not copied B times)."""
  # the body is evaluated in numpy object arrays of scalar UOps: no numpy, no fused kernel (tinygrad itself needs none)
  if importlib.util.find_spec("numpy") is None: return None
  try: return _scan_kernel(step, list(init_leaves), list(xs_leaves), length, reverse, batch, backward, lower, closed_out, batched)
  except NoFuse as e:
    if DEBUG >= 2: print(f"scan_kernel: not one kernel, {e}")
    return None

def _scan_kernel(step, init, xs, length, reverse, batch, backward, lower, closed_out, batched):
  # the batch axis in front of each leaf (1) or none (0): without a batch, or a leaf every example shares
  if batched is not None and len(batched) != len(init) + len(xs): raise ValueError(f"batched has {len(batched)} flags for {len(init)+len(xs)} leaves")
  leads = [int(batch is not None and (batched is None or b)) for b in (batched or [True]*(len(init)+len(xs)))]
  lc, lx = leads[:len(init)], leads[len(init):]
  # length 1: the LOOP range folds away and codegen's coalescing trips on what is left (one step is one kernel unrolled anyway)
  if not isinstance(length, int) or length < 2: raise NoFuse(f"length {length} is not an int of at least 2")
  if not init: raise NoFuse("no carry")
  if len(devs:={t.device for t in init+xs if t.device is not None}) != 1 or not isinstance(dev:=devs.pop(), str):
    raise NoFuse("leaves on several devices (or sharded)")
  # a Tensor of constants has no device on 0.14: a number is a constant of the kernel, not a buffer it reads. Over a batch only one
  # value for every example is (the kernel's constant is the first example's): a batch of constants (jacfwd's basis) is read as a buffer
  const = [t.device is None and (not l or t.uop.base.op is Ops.CONST) for t, l in zip(init, lc)]
  init = [Tensor(t.uop.clone(device=dev)) if t.device is None and not k else t for t, k in zip(init, const)]
  xs = [Tensor(t.uop.clone(device=dev)) if t.device is None else t for t in xs]
  if any(l and (not t.ndim or t.shape[0] != batch) for t, l in zip(init+xs, leads)): raise NoFuse(f"a leaf without the leading batch axis {batch}")
  if any(t.ndim <= l or t.shape[l] != length for t, l in zip(xs, lx)): raise NoFuse(f"an xs leaf whose scanned axis is not {length}")
  c_shapes, x_shapes = [t.shape[l:] for t, l in zip(init, lc)], [t.shape[l+1:] for t, l in zip(xs, lx)]
  if not all(isinstance(s, int) for shp in c_shapes+x_shapes for s in shp): raise NoFuse("symbolic shapes")
  if (n:=sum(math.prod(s) for s in c_shapes+x_shapes)) > MAX_SCALARS: raise NoFuse(f"{n} elements a step in the leaves (SCAN_KERNEL_MAX)")
  # trace the step once on placeholder leaves; a kernel run while tracing is a realize inside the step
  c_in = [Tensor.empty(*s, dtype=t.dtype, device=dev) for s, t in zip(c_shapes, init)]
  x_in = [Tensor.empty(*s, dtype=t.dtype, device=dev) for s, t in zip(x_shapes, xs)]
  kernels = GlobalCounters.kernel_count
  c_out, y_out = step(c_in, x_in)
  c_out, y_out = list(c_out), list(y_out)
  if GlobalCounters.kernel_count != kernels: raise NoFuse("the step realizes")
  if len(c_out) != len(init) or any(o.shape != i.shape or o.dtype != i.dtype for o, i in zip(c_out, c_in)):
    raise NoFuse("the carry out of the step differs from the carry in (shapes, dtypes)")
  y_shapes = [y.shape for y in y_out]
  closed = _closed_over([o.uop for o in c_out + y_out], {t.uop.base for t in c_in + x_in}, dev)
  # one output buffer, the carry's leaves then the ys' one after the other, each whole (batch and all, so each is a contiguous view):
  # the CALL's one output, so a gradient through it comes to grad_fxn as one Tensor
  nb = batch or 1
  sizes = [max(1, math.prod(s)) for s in c_shapes] + [length * max(1, math.prod(s)) for s in y_shapes]
  offs = [nb * sum(sizes[:i]) for i in range(len(sizes))]
  off_c, off_y = offs[:len(c_shapes)], offs[len(c_shapes):]

  def kernel(*p:UOp) -> UOp:
    ni, nx = len(bufs), len(xs)
    out, ins_c, ins_x, ins_k = p[0], iter(p[1:1+ni]), p[1+ni:1+ni+nx], p[1+ni+nx:]
    b = () if batch is None else (UOp.range(batch, 0),)     # WEAK: the optimizer makes it GLOBAL where there are threads
    t = UOp.range(length, 1, AxisType.LOOP)                  # LOOP: never upcast, unrolled or made parallel
    ti = (length - 1 - t) if reverse else t
    accs = [UOp.placeholder((max(1, math.prod(s)),), c.dtype, slot=len(p)+i, addrspace=AddrSpace.REG) for i, (s, c) in enumerate(zip(c_shapes, init))]
    def elems(n:int, fn:Callable[[int], UOp]) -> np.ndarray: return _objs((n,), lambda j: fn(j[0]))
    # the carry starts as init (per batch index), is read at the top of each step and written at its end
    def at(l:int, *idx:UOp|int) -> tuple: return (*b, *idx) if l else idx   # a shared leaf is read at the same place by every example
    init_vals = [_Scalarize({})(c.uop).reshape(-1)[:a.shape[0]] if k else
                 elems(a.shape[0], lambda j, c=next(ins_c), l=l: _flat(c, l)[at(l, j)].load()) for c, a, k, l in zip(init, accs, const, lc)]
    inits = [UOp.group(*[a.after(*b)[j].store(v) for j, v in enumerate(vs)]) for a, vs in zip(accs, init_vals)]
    cur = [a.after(i, t) for a, i in zip(accs, inits)]
    loads = [elems(c.shape[0], lambda j, c=c: c[j].load()) for c in cur]
    leaves = {ci.uop.base: l.reshape(ci.uop.base.shape) for ci, l in zip(c_in, loads)}
    leaves |= {xi.uop.base: elems(max(1, math.prod(s)), lambda j, x=x, l=l: _flat(x, l+1)[at(l, ti, j)].load()).reshape(xi.uop.base.shape)
               for xi, x, s, l in zip(x_in, ins_x, x_shapes, lx)}
    leaves |= {u: elems(max(1, u.numel()), lambda j, k=k: _flat(k, 0)[j].load()).reshape(u.shape) for u, k in zip(closed, ins_k)}
    ev = _Scalarize(leaves)
    new_c, new_y = [ev(o.uop).reshape(-1) for o in c_out], [ev(y.uop).reshape(-1) for y in y_out]
    # every store of the carry waits for every load of it, so no element is read after it was written this step
    every_load = [l for ls in loads for l in ls.tolist()]
    stores = [a.after(*every_load)[j].store(v) for a, nv in zip(accs, new_c) for j, v in enumerate(nv)]
    bi = b[0] if b else 0
    stores += [out[o + bi*n + ti*(n//length) + j].store(v) for o, n, nv in zip(off_y, sizes[len(c_shapes):], new_y) for j, v in enumerate(nv)]
    loop = UOp.group(*stores).end(t)
    fin = [out[o + bi*a.shape[0] + j].store(a.after(loop)[j].load()) for o, a in zip(off_c, accs) for j in range(a.shape[0])]
    return UOp.group(*fin).end(*b).sink(arg=KernelInfo(name=f"scan{'_rev' if reverse else ''}", opts_to_apply=()))

  bufs = [t for t, k in zip(init, const) if not k]
  bs = () if batch is None else (batch,)
  if len({t.dtype for t in init} | {y.dtype for y in y_out}) != 1: raise NoFuse("leaves of several dtypes (one output buffer holds them)")
  out = Tensor.empty(nb * sum(sizes), dtype=init[0].dtype, device=dev)

  def as_batch(leaves:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """init's and xs' leaves, the shared ones expanded to the batch: backward and lower map every leaf"""
    ts = [t.unsqueeze(0).expand(batch, *t.shape) if batch is not None and not l else t for t, l in zip(leaves, leads)]
    return ts[:len(init)], ts[len(init):]

  def grad_fxn(g:UOp, call:UOp) -> tuple[UOp|None, ...]:
    if backward is None: raise NotImplementedError("scan_kernel: no gradient through the kernel without a backward (scan passes one)")
    ins = iter(ins_t:=[Tensor(u) for u in call.src[2:2+len(bufs)+len(xs)]])
    c, y = backward(*as_batch([t if k else next(ins) for t, k in zip(init, const)] + list(ins)))
    packed = Tensor.cat(*[v.reshape(-1) for v in list(c) + list(y)])
    # the unrolled graph reads a closed-over value itself (its step closes over the same Tensor): its gradient is that value's
    wrt = ins_t + [Tensor(u) for u in closed]
    return (None, *[d.uop for d in (packed * Tensor(g).detach()).sum().gradient(*wrt)])   # g may read the kernel: not through it again

  res = out.custom_kernel(*[t.contiguous() for t in bufs+xs+[Tensor(u) for u in closed]], fxn=kernel, grad_fxn=grad_fxn)[0]
  if closed_out is not None: closed_out.extend(closed)
  if lower is not None and dtypes.is_float(init[0].dtype):
    assert res.uop.op is Ops.AFTER and res.uop.src[1].op is Ops.CALL, f"a custom kernel's output is AFTER(buffer, CALL), got {res.uop.op}"
    TRANSFORMS.call_tangents[res.uop.src[1]] = functools.partial(_tangent_scan, step, init, const, len(xs), closed, as_batch, lower)
  parts = [res[o:o+nb*n] for o, n in zip(offs, sizes)]
  return ([v.reshape(bs + s) for v, s in zip(parts[:len(c_shapes)], c_shapes)],
          [v.reshape(bs + (length,) + s) for v, s in zip(parts[len(c_shapes):], y_shapes)])

def scan_tangents(step:Callable, init:list[Tensor], xs:list[Tensor], t_init:list[UOp|None], t_xs:list[UOp|None], lower:Callable,
                  closed:list[UOp]=[], t_closed:list[UOp|None]=[]) -> list[Tensor]|None:
  """the tangents of a scan's final carry and ys leaves when its init and xs leaves move along t_init and t_xs (None: zero; None back
  when nothing moves): the scan of (carry, its tangent) over (xs, the moving xs' tangents) whose step is `step` and its jvp, run by
  `lower(step, init, xs)` (one kernel again where it fuses: the tangent carry in the same loop as the carry). `closed` are values the
  step closes over, moving along t_closed"""
  from tinygrad.jvp import jvp_tensors
  moving = [i for i, t in enumerate(t_xs) if t is not None]
  still = [(u, t) for u, t in zip(closed, t_closed) if t is not None]
  if all(t is None for t in t_init) and not moving and not still: return None
  nc, nx = len(init), len(xs)
  def aug_step(carry:list[Tensor], x:list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    c, dc, xp, dx = carry[:nc], carry[nc:], x[:nx], x[nx:]
    c_out, y_out = step(c, xp)
    ts = jvp_tensors(list(c_out) + list(y_out), c + [xp[i] for i in moving] + [Tensor(u) for u, _ in still], dc + dx + [Tensor(t) for _, t in still])
    return list(c_out) + ts[:nc], ts[nc:]
  dc0 = [p.zeros_like() if t is None else Tensor(t) for p, t in zip(init, t_init)]
  carry, dys = lower(aug_step, list(init) + dc0, list(xs) + [Tensor(t_xs[i]) for i in moving])
  return list(carry[nc:]) + list(dys)

def _tangent_scan(step:Callable, init:list[Tensor], const:list[bool], n_xs:int, closed:list[UOp], as_batch:Callable, lower:Callable,
                  ctx:tuple[UOp|None, ...], call:UOp) -> UOp|None:
  """the tangent of a scan kernel's packed output from ctx, the tangents of its CALL's srcs (the output buffer, the init leaves that are
  buffers, the xs leaves), packed as the kernel packs its output"""
  nk = len(closed)
  ins, t_ins, t_closed = [Tensor(u) for u in call.src[2:len(call.src)-nk]], list(ctx[2:len(ctx)-nk]), list(ctx[len(ctx)-nk:])
  it, t_it = iter(ins[:len(ins)-n_xs]), iter(t_ins[:len(t_ins)-n_xs])
  prim_init, t_init = zip(*[(c, None) if k else (next(it), next(t_it)) for c, k in zip(init, const)])
  # a leaf every example shares, and its tangent, expanded to the batch: `lower` maps every leaf
  prims, t_all = list(prim_init) + ins[len(ins)-n_xs:], list(t_init) + t_ins[len(t_ins)-n_xs:]
  (prim_init, xs), (t_init, t_xs) = as_batch(prims), as_batch([p.zeros_like() if t is None else Tensor(t) for p, t in zip(prims, t_all)])
  ts = scan_tangents(step, prim_init, xs, [t.uop for t in t_init], [None if t0 is None else t.uop for t, t0 in zip(t_xs, t_all[len(init):])],
                     lower, closed, t_closed)
  return None if ts is None else Tensor.cat(*[v.reshape(-1) for v in ts]).uop
