# line: 0.14.0 only (the first-numpy-graph topic hooks it into schedule/__init__.py's lower_sink_to_linear)
"""A function's first run as numpy over its tensor graph, no schedule at all: the step before engine/first_numpy.py. A realize's function
(the SINK of STOREs a CALL runs) is seen a first time in a process: rangeify and the kernel split cost ~0.6 ms a node in Python (bench
W4's vmap(jacfwd), 160 nodes: ~120 ms), while the graph is a few dozen movement ops and ALUs that numpy runs as they are: a movement op
a view (PAD a copy), an ALU as first_numpy's (C's integer semantics, transcendentals in float64 rounded), a REDUCE over the leading
axes, and a REDUCE ADD of a product (a matmul, a dot) an einsum that never makes the product. The linear is one CALL of a PROGRAM whose
runtime is that evaluation; it is kept nowhere (schedule cache, kept schedule, a realize template, a TinyJit capture): the function's
next realize schedules it as before, its kernels' first run then engine/first_numpy.py's, the one after compiled.

A kernel's CALL in the graph (scan_kernel.py's scan, a custom kernel) runs where engine/first_loop.py runs its kernel: on the function's
arrays, its inputs made contiguous, its output the buffer it writes (the lowering sees it as a built PROGRAM: nothing to compile).
Taken only where every buffer is a CPU one, every shape is concrete, every op is one numpy computes as the kernels would (up to the
order a float reduce adds in) and the work is small (first_numpy's bounds); anything else is scheduled as before. On when first_numpy
is (FIRST_GRAPH below), never while TinyJit captures. Tested in test/test_first_numpy.py (TestFirstGraph)."""
from __future__ import annotations
import time, functools
from typing import Any
from tinygrad.helpers import DEBUG, SPEC, ContextVar, to_mv, prod
from tinygrad.dtype import dtypes, AddrSpace
from tinygrad.uop.ops import Ops, UOp, GroupOp, ProgramInfo, KernelInfo, graph_rewrite
from tinygrad.uop.symbolic import sym
from tinygrad.renderer import Estimates
import contextlib
import tinygrad.engine.first_numpy as first_numpy
from tinygrad.engine.first_numpy import enabled, numpy_available, NP_DTYPES, UNARY, BINARY, MAX_WORK, _Run, _users
from tinygrad.engine.first_loop import LoopPlan, loop_plan

MOVEMENT = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP}
PASS = {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}   # a value as it is
# a Python constant's weak dtypes as the wide ones they compute in
GRAPH_DTYPES = {**NP_DTYPES, dtypes.weakfloat: "float64"}
SUPPORTED = UNARY | BINARY | MOVEMENT | PASS | {Ops.COPY, Ops.POW, Ops.WHERE, Ops.CAST, Ops.BITCAST, Ops.CONST, Ops.PARAM, Ops.STACK, Ops.REDUCE, Ops.STORE,
                                                Ops.AFTER, Ops.SINK, Ops.CALL}
# past this a value's pages (faulted in fresh) cost more than the schedule saves: the kernels' loops never make it (bench W5's 16M)
MAX_VALUE = 1 << 23
PREFIX = "npg_"   # a PROGRAM of this module's: its name

# FIRST_GRAPH=1 on, 0 off; left unset (-1) it is on where first_numpy is (FIRST_NUMPY, off while pytest runs a test)
FIRST_GRAPH = ContextVar("FIRST_GRAPH", -1)
def graph_enabled() -> bool:
  # SPEC=2 checks every UOp the scheduler makes: there is nothing to check
  return FIRST_GRAPH.value > 0 if FIRST_GRAPH.value >= 0 else enabled() and SPEC < 2

seen: set[bytes] = set()   # the functions seen once in this process: the next realize of one is scheduled
graph_spent: dict[bytes, float] = {}   # a function's key: the seconds its graph's runs took
SCHEDULE_S_PER_NODE = 0.6e-3   # what rangeify and the kernel split cost a node of a function (bench W4's vmap(jacfwd): 160 nodes, ~120 ms)
_runs_now: list[bool] = []
@contextlib.contextmanager
def runs_now():
  """around a realize's schedule: the linear runs at once (Tensor.schedule_linear's is looked at, a TinyJit capture's kept)"""
  _runs_now.append(True)
  try: yield
  finally: _runs_now.pop()

def data_srcs(u:UOp) -> tuple[UOp, ...]:
  """the srcs whose values u reads (a movement op's others are its shape, a PARAM's its size)"""
  if u.op in MOVEMENT or u.op is Ops.REDUCE: return u.src[:1]
  if u.op in (Ops.PARAM, Ops.CONST, Ops.COPY): return ()   # a COPY is the linear's own CALL, before the graph's
  if u.op is Ops.CALL: return u.src[1:]   # a kernel's CALL (scan_kernel.py's): its buffers, the kernel is its own
  return u.src

def is_copy(u:UOp) -> bool:
  """a STORE of a COPY into a whole buffer (a Tensor made from numpy, realized): the linear copies it before the graph runs"""
  return u.op is Ops.STORE and u.src[1].op is Ops.COPY

def _whole(u:UOp) -> UOp|None:
  """the PARAM u is a RESHAPE of (its whole buffer), else None"""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u if u.op is Ops.PARAM else None

def refuse(why:str) -> None:
  if DEBUG >= 4: print(f"first_graph: scheduled, not run as numpy: {why}")

def _target_chain(t:UOp) -> list[UOp]|None:
  """a STORE's target from its PARAM up, when it is a view of the PARAM's buffer (RESHAPEs, SHRINKs, PERMUTEs and FLIPs numpy makes
  without a copy: tried on an array never written, whose pages are never touched), else None"""
  chain = [t]
  while chain[-1].op in MOVEMENT - {Ops.EXPAND, Ops.PAD}: chain.append(chain[-1].src[0])
  if chain[-1].op is not Ops.PARAM or chain[-1].arg.dtype not in NP_DTYPES: return None
  chain.reverse()
  import numpy as np
  base = np.empty(chain[0].shape, NP_DTYPES[chain[0].arg.dtype])
  try: view = functools.reduce(lambda x, u: _move(np, u, x), chain[1:], base)
  except ValueError: return None
  return chain if view.size == 0 or np.may_share_memory(view, base) else None

def _loop_kernel(call:UOp) -> LoopPlan|None:
  """the plan of a CALL's kernel where it is one engine/first_loop.py runs (a scan's): its output the CALL's first buffer, a whole PARAM"""
  if len(call.src) < 2 or call.src[1].op is not Ops.PARAM: return None
  if (k:=call.src[0]).op is Ops.PROGRAM and k.arg.name.startswith(PREFIX): kernel = k.src[0]   # graph_linear's, rewritten already
  elif k.op is Ops.SINK: kernel = graph_rewrite(k, sym, name="first numpy symbolic")   # as first_numpy rewrites a kernel: the codegen's folds
  else: return None
  if (lp:=loop_plan(kernel)) is None: return None
  # each PARAM of the kernel is the CALL's buffer of its slot, of its size and dtype; the kernel writes its first alone
  ps = {u.arg.slot: u for u in kernel.toposort() if u.op is Ops.PARAM}
  if sorted(ps) != list(range(len(call.src) - 1)) or any(
     ps[i].arg.dtype != b.dtype or not isinstance(ps[i].src[0].arg, int) or ps[i].src[0].arg != prod(b.shape) for i, b in enumerate(call.src[1:])):
    return refuse("a CALL whose buffers are not its kernel's")
  return lp

def plan(function:UOp) -> tuple[list[UOp], list[UOp], Estimates, dict[UOp, LoopPlan]]|None:
  """(the data nodes in order, the PARAMs by slot, the Estimates, each CALL's loop) when numpy can run the function as its kernels
  would, else None"""
  if function.op is not Ops.SINK or not numpy_available(): return None
  # only the data nodes: a movement op's shape srcs are never evaluated, a CALL's kernel is its own
  reached: set[UOp] = {function}
  for u in reversed(list(function.toposort())):
    if u in reached: reached.update(data_srcs(u))
  topo = [u for u in function.toposort() if u in reached]
  if (ops:={u.op for u in topo} - SUPPORTED): return refuse(f"{ops}")
  loops: dict[UOp, LoopPlan] = {}
  params: dict[int, UOp] = {}
  stored: set[UOp] = set()
  work, flops, mem, users = 0, 0, 0, _users(topo)
  lazy = _einsums(topo, users)[1]
  for u in topo:
    if u.op is Ops.SINK:
      if not all(s.op is Ops.AFTER for s in u.src): return refuse("a SINK of other than AFTERs")
      continue
    if u.op in (Ops.STORE, Ops.AFTER, Ops.CONST, Ops.PARAM) or u.op in MOVEMENT or u.op in PASS or u.op is Ops.STACK:
      if not all(isinstance(s, int) for s in u.shape): return refuse("a symbolic shape")
    if u.op in (Ops.PAD, Ops.SHRINK) and not all(isinstance(o, int) for o, _ in u.marg): return refuse("a symbolic offset")
    if u.op is Ops.PARAM:
      if u.addrspace == AddrSpace.ALU or not isinstance(u.arg.slot, int) or u.arg.slot < 0 or u.arg.dtype not in NP_DTYPES or \
         not isinstance(dev:=u.device, str) or dev.split(":")[0] != "CPU": return refuse(f"a parameter {u.arg}")
      if params.setdefault(u.arg.slot, u) is not u: return refuse("two parameters of one slot")
      mem += prod(u.shape) * u.arg.dtype.itemsize
      continue
    if u.op is Ops.CONST:
      if not isinstance(u.arg, (int, float, bool)): return refuse(f"a constant {u.arg!r}")
      continue
    if u.op is Ops.COPY:
      if (src:=_whole(u.src[0])) is None or not all(is_copy(c) and (dst:=_whole(c.src[0])) is not None and dst.device == u.arg and
              prod(dst.shape) == prod(src.shape) and dst.dtype == src.dtype == u.dtype for c in users.get(u, [])):
        return refuse("a COPY other than of a whole buffer into a whole buffer")
      continue
    if is_copy(u): continue
    if u.op is Ops.STORE:
      if _target_chain(u.src[0]) is None: return refuse("a store into other than a view of a parameter")
      if (root:=_root(u.src[0])) in stored: return refuse("two stores into one parameter")
      stored.add(root)
      continue
    if u.op is Ops.CALL:   # a kernel run on whole arrays: its inputs made contiguous, its output the buffer it writes
      if (lp:=_loop_kernel(u)) is None: return refuse("a CALL of other than a loop kernel")
      if u.src[1] in stored: return refuse("two stores into one parameter")
      if any(not all(isinstance(s, int) for s in b.shape) for b in u.src[1:]): return refuse("a symbolic shape")
      stored.add(u.src[1])
      loops[u] = lp
      flops, work = flops + lp.estimates.ops, work + lp.work
      continue
    if u.op is Ops.AFTER:   # the buffer (a view of it) after stores into it (into views of it), or after such AFTERs, or after a CALL's kernel
      if _target_chain(u.src[0]) is None or not all(d.op in (Ops.STORE, Ops.AFTER) and _root(d.src[0]) is _root(u.src[0]) or
                                                    d.op is Ops.CALL and d.src[1] is u.src[0] for d in u.src[1:]):
        return refuse("an AFTER of other than its buffer's stores")
      continue
    if u.dtype not in GRAPH_DTYPES or (u.op is Ops.POW and not dtypes.is_float(u.dtype)): return refuse(f"{u.op} of {u.dtype}")
    if not all(isinstance(s, int) for s in u.shape): return refuse("a symbolic shape")
    if u.op is Ops.REDUCE and u.arg[0] not in (Ops.ADD, Ops.MAX, Ops.MUL): return refuse(f"a REDUCE {u.arg}")
    n = prod(u.shape)
    if u.op in GroupOp.ALU: flops += n
    if u.op is Ops.REDUCE: flops += prod(u.src[0].shape)
    # views are free, a product only REDUCE ADDs read is an einsum there
    if u.op in MOVEMENT - {Ops.PAD} or u.op in PASS or u in lazy: continue
    if n > MAX_VALUE: return refuse(f"{n} elements in one value")
    work += n
  if not stored: return None
  if len({p.device for p in params.values()}) > 1: return refuse("buffers on several devices")   # one CALL runs on one device
  # a buffer is written, and read through its AFTER only (a read of it before the store, or stores that read each other, are the
  # schedule's to order or refuse)
  chains = {x for u in topo if u.op in (Ops.STORE, Ops.AFTER) for x in _target_chain(u.src[0]) or ()}
  if any(c not in chains and c.op not in (Ops.STORE, Ops.AFTER) and not (c.op is Ops.CALL and c.src[1] is x) for x in chains
         for c in users.get(x, [])):
    return refuse("a buffer read where it is written")
  if work > MAX_WORK: return refuse(f"{work} element-ops")
  return topo, [params[s] for s in sorted(params)], Estimates(flops, mem, mem), loops

def _einsums(topo:list[UOp], users:dict[UOp, list[UOp]]) -> tuple[dict[UOp, UOp], set[UOp]]:
  """(each REDUCE ADD of a product (through PERMUTEs) read by REDUCE ADDs alone: that product, the products and PERMUTEs never made)"""
  def reduces(x:UOp) -> list[UOp]|None:   # the REDUCE ADDs x reaches through PERMUTEs, None where another op reads it
    ret: list[UOp] = []
    for c in users.get(x, []):
      if c.op is Ops.PERMUTE and (r:=reduces(c)) is not None: ret += r
      elif c.op is Ops.REDUCE and c.arg[0] is Ops.ADD: ret.append(c)
      else: return None
    return ret
  einsums: dict[UOp, UOp] = {}
  lazy: set[UOp] = set()
  for m in topo:
    if m.op is Ops.MUL and dtypes.is_float(m.dtype) and m.dtype in NP_DTYPES and (rs:=reduces(m)):
      einsums.update((r, m) for r in rs)
      lazy.add(m)
      lazy.update(x for r in rs for x in _permutes(r))
  return einsums, lazy

def _permutes(r:UOp) -> list[UOp]:
  ret, x = [], r.src[0]
  while x.op is Ops.PERMUTE: ret.append(x); x = x.src[0]
  return ret

def _seen_key(function:UOp) -> bytes:
  """the function's key, a kernel's CALL without its CallInfo: scan_kernel's gradient function is a new closure each trace, the kernel
  the same"""
  calls = {c: c.replace(arg=None) for c in function.toposort() if c.op is Ops.CALL and c.arg is not None}
  return function.substitute(calls).key if calls else function.key

def graph_linear(function:UOp) -> UOp|None:
  """the function's linear as one numpy PROGRAM where it is seen the first time (and numpy can run it), else None: scheduled as before"""
  if not _runs_now or not graph_enabled(): return None
  from tinygrad.engine.realize import capturing
  if capturing: return None
  # seen before: scheduled, but in a TinyJit's first call (its capture schedules it next) while its graph's runs cost less than a schedule
  if (again:=(key:=_seen_key(function)) in seen) and not first_numpy.jit_first: return None
  if len(seen) > 1 << 16: seen.clear(); graph_spent.clear()   # a process of many one-off functions (a new constant each step) forgets them
  seen.add(key)
  if (p:=plan(function)) is None or (again and graph_spent.get(key, 1e9) >= SCHEDULE_S_PER_NODE * len(p[0])): return None
  topo, params, est, _ = p
  # the COPYs first, as the schedule makes them: CALL(COPY, dst, src), on the function's PARAMs as the graph's CALL
  copies = tuple(UOp(Ops.CALL, dtypes.void, (u.src[1], _whole(u.src[0]), _whole(u.src[1].src[0]))) for u in topo if is_copy(u))
  name = PREFIX + "_".join(str(s) for s in next(s for s in topo if s.op is Ops.AFTER).shape) if topo else PREFIX
  # a CALL's kernel as a built PROGRAM (the lowering builds no CALL inside this one), the kernel loop_plan planned
  body = function.substitute({c: c.replace(src=(UOp(Ops.PROGRAM, src=(lp.ast, UOp(Ops.BINARY, arg=b"")), arg=ProgramInfo(PREFIX + "loop")),
                                                *c.src[1:])) for c, lp in p[3].items()}).replace(arg=KernelInfo(name=name, estimates=est))
  _planned[body] = (p, key)   # for graph_runtime, when get_runtime makes the runtime next
  outs = tuple(i for i, p in enumerate(params) if any(u.op is Ops.STORE and not is_copy(u) and _root(u.src[0]) is p or
                                                      u.op is Ops.CALL and u.src[1] is p for u in topo))
  # a PROGRAM with a BINARY is built: the lowering leaves it, get_runtime makes its runtime here (graph_runtime)
  prg = UOp(Ops.PROGRAM, src=(body, UOp(Ops.BINARY, arg=b"")), arg=ProgramInfo(name, globals=tuple(range(len(params))), outs=outs,
                                                                              ins=tuple(i for i in range(len(params)) if i not in outs)))
  return UOp(Ops.LINEAR, src=copies + (UOp(Ops.CALL, dtypes.void, (prg, *params)),))

def is_graph_program(prg:UOp) -> bool: return prg.op is Ops.PROGRAM and isinstance(prg.arg, ProgramInfo) and prg.arg.name.startswith(PREFIX)

_planned: dict[UOp, tuple] = {}
def graph_runtime(prg:UOp) -> NumpyGraph|None:
  if not is_graph_program(prg): return None
  p, key = _planned.pop(prg.src[0], None) or (plan(prg.src[0]), None)
  return None if p is None else NumpyGraph(p[0], p[1], p[3], key)

ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}

class NumpyGraph:
  """a function's runtime: its tensor graph evaluated by numpy over the buffers it is called with (its PARAMs in slot order).
  Each region of elementwise ops is one expression over its leaves (the values it reads: loads, reduces, movement ops), rewritten by
  symbolic as the codegen rewrites a kernel (x/x is 1, x*(1/(1+x)) is 1-1/(1+x), pi/2-(pi/2-x) is x): numpy computes what the
  kernels compute. Only its roots (the values something else reads) are made"""
  def __init__(self, topo:list[UOp], params:list[UOp], loops:dict[UOp, LoopPlan], key:bytes|None=None):
    self.topo, self.params, self.loops, self.key = topo, params, loops, key
    users = _users(topo)
    self.einsums, self.lazy = _einsums(topo, users)
    self.stored = {_root(u.src[0]) for u in topo if u.op is Ops.STORE and not is_copy(u)} | {u.src[1] for u in loops}
    # the elementwise regions as expressions: a leaf a Variable of its dtype (as a kernel's load: any value of it)
    leaves: dict[UOp, UOp] = {}
    expr: dict[UOp, UOp] = {}
    for u in topo:
      if u.op not in ELEMENTWISE: continue
      srcs = []
      for x in u.src:
        if x.op not in ELEMENTWISE and x.op is not Ops.CONST and x not in leaves:
          leaves[x] = UOp.variable(f"leaf{len(leaves)}", x.dtype.min, x.dtype.max, x.dtype, param=True)
        srcs.append(expr[x] if x in expr else leaves.get(x, x))
      expr[u] = UOp(u.op, u.dtype, tuple(srcs), u.arg)
    self.roots = [u for u in topo if u in expr and any(c.op not in ELEMENTWISE for c in users.get(u, []))]
    if self.roots:
      try: simplified = graph_rewrite(UOp.sink(*[expr[r] for r in self.roots]), sym, name="first graph symbolic").src
      except Exception: simplified = ()
      # numpy computes what symbolic made of the regions, else the regions as they are
      if len(simplified) != len(self.roots) or any(x.op not in SUPPORTED and x.op is not Ops.PARAM for e in simplified for x in e.toposort()):
        simplified = tuple(expr[r] for r in self.roots)
      self.expr = dict(zip(self.roots, simplified))
    else: self.expr = {}
    self.leaf_of = {v: k for k, v in leaves.items()}
    from tinygrad.codegen.decomp.transcendental import _cos_arg
    self.cos_of = {x: c for e in self.expr.values() for x in e.toposort() if x.op is Ops.SIN and (c:=_cos_arg(x.src[0])) is not None}
    # each value freed after its last read: a leaf where the last root that reads it is made, an expression's node after its last root
    at = {u: i for i, u in enumerate(topo)}
    for u in reversed(topo):   # a product is made where its REDUCE is
      if u in self.lazy: at[u] = max(at[c] for c in users[u])
    reads: dict[UOp, list[UOp]] = {}
    expr_last: dict[UOp, int] = {}
    for r, e in self.expr.items():
      for x in list(e.toposort()) + [y for x in e.toposort() if x in self.cos_of for y in self.cos_of[x].toposort()]:
        expr_last[x] = max(expr_last.get(x, 0), at[r])
        if x in self.leaf_of: reads.setdefault(self.leaf_of[x], []).append(r)
    for u in topo:
      if u.op not in ELEMENTWISE:
        for x in (data_srcs(u) if u.op is Ops.CALL else u.src if u.op is not Ops.PARAM else ()): reads.setdefault(x, []).append(u)
    self.free_after: dict[int, list[UOp]] = {}
    for u in topo:
      if u in reads and u.op is not Ops.CONST: self.free_after.setdefault(max(at[c] for c in reads[u]), []).append(u)
    self.free_expr: dict[int, list[UOp]] = {}
    for x, i in expr_last.items(): self.free_expr.setdefault(i, []).append(x)

  def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait=False, timeout=None):
    import numpy as np
    from tinygrad.device import Device
    for d in sorted(Device._opened_devices): Device[d].synchronize()   # as first_numpy's: numpy reads once every queue is done
    st = time.perf_counter()
    raw = {p: np.frombuffer(to_mv(b.va_addr, b.size), np.uint8).view(NP_DTYPES[p.arg.dtype])[:prod(p.shape)].reshape(p.shape)
           for p, b in zip(self.params, bufs)}
    with np.errstate(all="ignore"): _GraphRun(self, np, raw)
    et = time.perf_counter() - st
    if self.key is not None: graph_spent[self.key] = graph_spent.get(self.key, 0.0) + et
    return et if wait else None

class _GraphRun(_Run):
  """one evaluation: each value an array of its node's shape or one that broadcasts to it (a constant is a scalar)"""
  def __init__(self, g:NumpyGraph, np, raw:dict[UOp, Any]):
    self.g, self.np, self.v, self.ev = g, np, {}, {}
    # a buffer sharing memory with one a store writes is read as a copy: its reads are before the store
    written = [(b.ctypes.data, b.ctypes.data + b.nbytes) for p, b in raw.items() if p in g.stored]
    def shares(b) -> bool: return any(lo < b.ctypes.data + b.nbytes and b.ctypes.data < hi for lo, hi in written)
    self.raw, self.reads = raw, {p: b.copy() if p not in g.stored and shares(b) else b for p, b in raw.items()}
    for i, u in enumerate(g.topo):
      self.step(u)
      for x in g.free_after.get(i, ()): self.v.pop(x, None)
      for x in g.free_expr.get(i, ()): self.ev.pop(x, None)

  def step(self, u:UOp) -> None:
    g, np = self.g, self.np
    if u.op is Ops.CONST: self.v[u] = self.arr(u.arg, u.dtype)
    elif u.op is Ops.PARAM: self.v[u] = self.reads[u]
    elif u in g.lazy or u.op in (Ops.SINK, Ops.COPY) or is_copy(u) or (u.op in ELEMENTWISE and u not in g.expr): return
    elif u.op in ELEMENTWISE:   # symbolic may have folded leaves away (x*0): the value broadcasts to the node's shape
      v = np.asarray(self.arr(self.evaluate(g.expr[u]), u.dtype))
      self.v[u] = v if v.shape == u.shape else np.broadcast_to(v, u.shape)
    elif u.op is Ops.STORE:
      view = self.target(u.src[0])
      view[...] = np.asarray(self.v[u.src[1]]).astype(view.dtype, copy=False)
    elif u.op is Ops.AFTER: self.v[u] = self.target(u.src[0])
    elif u.op is Ops.CALL:   # the kernel over flat arrays: its inputs' values made contiguous, its output the buffer itself
      bufs = [self.raw[u.src[1]].reshape(-1)] + [np.ascontiguousarray(np.broadcast_to(self.v[b], b.shape), NP_DTYPES[b.dtype]).reshape(-1)
                                                 for b in u.src[2:]]
      g.loops[u].run(dict(enumerate(bufs)))
    elif u.op in PASS: self.v[u] = self.v[u.src[0]]
    elif u.op in MOVEMENT: self.v[u] = _move(np, u, np.asarray(self.v[u.src[0]]))
    elif u.op is Ops.STACK:
      self.v[u] = np.stack([np.broadcast_to(self.arr(self.v[s], u.dtype), u.shape[1:]) for s in u.src])
    elif u.op is Ops.REDUCE: self.v[u] = self.reduce(u)
    else: raise RuntimeError(f"first_graph: no value for {u.op}")

  def evaluate(self, e:UOp):
    """an expression's value over its leaves' values (kept in self.ev until its last root is made)"""
    g, np = self.g, self.np
    for x in e.toposort():
      if x in self.ev or x.dtype is dtypes.void: continue   # (a leaf's shape src is not a value)
      if x in g.leaf_of: self.ev[x] = self.v[g.leaf_of[x]]
      elif x.op is Ops.CONST: self.ev[x] = self.arr(x.arg, x.dtype)
      elif x in g.cos_of: self.ev[x] = self.arr(np.cos(np.asarray(self.evaluate(g.cos_of[x]), dtype=np.float64)), x.dtype)
      elif x.op is Ops.POW:   # in float64, rounded (as a transcendental); x**2 is x*x, rounded once either way
        b, p = self.ev[x.src[0]], self.ev[x.src[1]]
        if x.src[1].op is Ops.CONST and float(x.src[1].arg) == 2.0: self.ev[x] = np.square(self.arr(b, x.dtype))
        else: self.ev[x] = self.arr(np.power(np.asarray(b, dtype=np.float64), np.asarray(p, dtype=np.float64)), x.dtype)
      else: self.ev[x] = self.alu(x, [self.ev[s] for s in x.src])
    return self.ev[e]

  def npdt(self, dt): return self.np.dtype(GRAPH_DTYPES[dt])

  def target(self, t:UOp):
    """the view of a STORE's target into its buffer"""
    if t.op is Ops.PARAM: return self.raw[t]
    return _move(self.np, t, self.target(t.src[0]))

  def reduce(self, u:UOp):
    np, (op, k) = self.np, u.arg[:2]
    if (m:=self.g.einsums.get(u)) is not None:
      # axis i of the permuted product is the product's axis perm[i]: the first k are summed
      perm, x = list(range(len(m.shape))), u.src[0]
      while x.op is Ops.PERMUTE: perm, x = [x.arg[i] for i in perm], x.src[0]
      e = self.g.expr[m]
      if e.op is not Ops.MUL:   # symbolic made it other than a product: it is made, then summed
        return np.add.reduce(np.broadcast_to(self.arr(self.evaluate(e), u.dtype), m.shape).transpose(perm), axis=tuple(range(k)))
      args: list = []
      for a in (self.arr(self.evaluate(s), u.dtype) for s in e.src):
        a = np.asarray(a).reshape((1,)*(len(m.shape)-np.ndim(a)) + np.shape(a))
        keep = [i for i in range(a.ndim) if a.shape[i] == m.shape[i]]   # a size-1 axis the product broadcasts is not the operand's
        args += [a.reshape([a.shape[i] for i in keep]), keep]
      return np.einsum(*args, perm[k:], optimize=True)
    x = np.asarray(self.arr(self.v[u.src[0]], u.dtype))
    x = np.broadcast_to(x, u.src[0].shape)
    axes = tuple(range(k))
    if op is Ops.MAX and x.dtype.kind == "f": return np.fmax.reduce(x, axis=axes, initial=-np.inf).astype(x.dtype, copy=False)
    return {Ops.ADD: np.add, Ops.MAX: np.maximum, Ops.MUL: np.multiply}[op].reduce(x, axis=axes)

def _move(np, u:UOp, x):
  """x moved as the movement op u moves it: a view but for PAD"""
  marg = u.marg
  if u.op is Ops.RESHAPE: return x.reshape(marg)
  if u.op is Ops.EXPAND: return np.broadcast_to(x, tuple(marg) + x.shape)
  if u.op is Ops.PERMUTE: return x.transpose(marg)
  if u.op is Ops.FLIP: return np.flip(x, tuple(i for i, f in enumerate(marg) if f))
  if u.op is Ops.SHRINK: return x[tuple(slice(o, o+s) for o, s in marg)]
  out = np.zeros(tuple(s for _, s in marg), dtype=x.dtype)   # PAD: x at each axis' offset, zeros around it
  out[tuple(slice(o, o+s) for (o, _), s in zip(marg, x.shape))] = x
  return out

def _root(t:UOp) -> UOp:
  while t.op in MOVEMENT: t = t.src[0]
  return t
