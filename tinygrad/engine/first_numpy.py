# line: 0.14.0 only (engine/first_tier.py asks it first; engine/realize.py's get_runtime finds its runtimes)
"""A CPU kernel's first run as numpy over the kernel's ranges, no codegen and no clang: the bottom tier of engine/first_tier.py. A cold
first call on 0.14 is ~25 codegen passes in Python and a clang process a schedule (50-600 ms); the kernel AST the scheduler hands the
codegen is small (20-100 nodes: RANGEs, INDEXes of PARAMs, ALUs, REDUCEs, STOREs), and numpy evaluates it a node at a time over whole
arrays: each value is an array with one axis a RANGE of the kernel (size 1 where it does not depend on it), an index that is a sum of
ranges times constants reads and writes a strided view of the buffer, and a REDUCE ADD of a product is a matmul or an einsum. The
next time the kernel is lowered (its second run, TinyJit's capture) it is built in full, as a quick build is.

Only kernels this module evaluates as the C program would (up to the order a float reduce adds in, clang's fused multiply-adds and the
last bit of a transcendental, computed in float64 and rounded) are taken; anything else (a Variable, an op or dtype numpy lacks, a
buffer read at other elements than it writes, a store whose index misses a range its value depends on, too much work) is built as
before. FIRST_NUMPY below says when it is on. Tested in test/test_first_numpy.py."""
from __future__ import annotations
import os, time, functools, importlib.util, contextlib
from dataclasses import replace
from typing import Any
from tinygrad.helpers import ContextVar, DEBUG, VIZ, PROFILE, to_mv, prod
from tinygrad.dtype import dtypes, DType, Invalid, AddrSpace
from tinygrad.uop.ops import Ops, UOp, ProgramInfo, KernelInfo, GroupOp, graph_rewrite
from tinygrad.renderer import Estimates
from tinygrad.uop.symbolic import sym
from tinygrad.engine.first_loop import loop_plan, LoopKernel

# FIRST_NUMPY=1 on, 0 off. Left unset (-1), on but while pytest runs a test (PYTEST_CURRENT_TEST: a test of the codegen, the compiler or
# the runtime, or one that mocks them, tests the compiled kernel; as the program cache), with DEBUG>=3 or VIZ (they show the codegen)
# and with PROFILE (its events are the runtime's)
FIRST_NUMPY = ContextVar("FIRST_NUMPY", -1)
def enabled() -> bool:
  if FIRST_NUMPY.value >= 0: return FIRST_NUMPY.value > 0
  return "PYTEST_CURRENT_TEST" not in os.environ and DEBUG < 3 and not VIZ and not PROFILE
# past these a compiled kernel is cheaper than numpy's passes over memory (~1-2 ns an element a node against clang's ~50-300 ms)
MAX_WORK, MAX_ELEMENTS = 1 << 26, 1 << 25   # element-ops of a kernel (every value's elements), elements of one value
# what a kernel's build (0.14's codegen in Python, then clang) costs, measured on the bench's kernels: 50 ms, and 0.5 ms an AST node (a
# scan's kernel of 1333 nodes 1 s). engine/first_loop.py weighs its Python loop against it; engine/first_tier.py a TinyJit first call's runs
BUILD_S, BUILD_S_PER_NODE = 0.05, 0.5e-3
# a TinyJit's first call runs its function eagerly and its second captures it, scheduling and building every kernel in full: in the first
# call a kernel lowered again (an iteration run twice) stays numpy's (engine/first_tier.py's stays_quick), a function realized again
# numpy's over its graph (engine/first_graph.py), while their runs took less than the build or schedule would
jit_first = 0   # TinyJit first calls running now
@contextlib.contextmanager
def jit_first_call(on:bool):
  global jit_first
  jit_first += on
  try: yield
  finally: jit_first -= on

NP_DTYPES = {dtypes.bool: "bool", dtypes.int8: "int8", dtypes.int16: "int16", dtypes.int32: "int32", dtypes.int64: "int64",
             dtypes.uint8: "uint8", dtypes.uint16: "uint16", dtypes.uint32: "uint32", dtypes.uint64: "uint64", dtypes.float16: "float16",
             dtypes.float32: "float32", dtypes.float64: "float64", dtypes.weakint: "int64"}
UNARY = {Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.SIN, Ops.EXP2, Ops.LOG2, Ops.TRUNC}
BINARY = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
          Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
SUPPORTED = UNARY | BINARY | {Ops.WHERE, Ops.MULACC, Ops.CAST, Ops.BITCAST, Ops.CONST, Ops.RANGE, Ops.PARAM, Ops.INDEX, Ops.STORE, Ops.END,
                              Ops.REDUCE, Ops.SINK}

@functools.cache
def numpy_available() -> bool: return importlib.util.find_spec("numpy") is not None

def _gated(idx:UOp) -> tuple[UOp, UOp|None]:
  """an INDEX's index or a stored value as (it, gate): `gate.where(it, Invalid)` is a gated access"""
  return (idx.src[1], idx.src[0]) if idx.op is Ops.WHERE and idx.src[2].is_invalid else (idx, None)

def _users(topo:list[UOp]) -> dict[UOp, list[UOp]]:
  users: dict[UOp, list[UOp]] = {}
  for u in topo:
    for x in u.src: users.setdefault(x, []).append(u)
  return users

def _gates(topo:list[UOp]) -> set[UOp]:
  """the WHEREs that gate an access: an INDEX's gated index, a STORE's gated value (the element is left as it is where it is false)"""
  return {u.src[1] for u in topo if u.op in (Ops.INDEX, Ops.STORE) and _gated(u.src[1])[1] is not None}

def _stored_param(store:UOp) -> UOp|None:
  """the global parameter a STORE writes (through a RESHAPE), None for a register"""
  p = store.src[0].src[0]
  while p.op in (Ops.RESHAPE, Ops.AFTER): p = p.src[0]
  return p if p.op is Ops.PARAM else None

def cos_args(topo:list[UOp]) -> dict[UOp, UOp]:
  """Tensor.cos is sin(pi/2 - x): each such SIN's x, whose cos is taken (as the codegen's decomposition takes it)"""
  from tinygrad.codegen.decomp.transcendental import _cos_arg
  return {u: x for u in topo if u.op is Ops.SIN and (x:=_cos_arg(u.src[0])) is not None}

def refuse(why:str) -> None:
  if DEBUG >= 4: print(f"first_numpy: built, not run as numpy: {why}")

def plan(ast:UOp) -> tuple[dict[UOp, int], tuple[int, ...], Estimates]|None:
  """(each RANGE's axis, the axes' sizes, its Estimates as the loop's) when numpy can run this kernel as the C program would, else None"""
  if ast.op is not Ops.SINK or not numpy_available(): return None
  topo = ast.toposort()
  if (ops:={u.op for u in topo} - SUPPORTED): return refuse(f"{ops}")
  ranges = [u for u in topo if u.op is Ops.RANGE]
  if not all(r.src[0].op is Ops.CONST and isinstance(r.src[0].arg, int) and r.src[0].arg > 0 for r in ranges): return refuse("a symbolic range")
  axes, sizes = {r: i for i, r in enumerate(ranges)}, tuple(r.src[0].arg for r in ranges)
  targets, gated, users = {u.src[0] for u in topo if u.op is Ops.STORE}, _gates(topo), _users(topo)
  deps: dict[UOp, frozenset[int]] = {}
  read, written, work, flops, lds, mem = set(), set(), 0, 0, 0, {}
  for u in topo:
    if u.op is Ops.CONST:
      if u.arg is not Invalid and not isinstance(u.arg, (int, float, bool)): return refuse(f"a constant {u.arg!r}")
    elif u.op is Ops.PARAM:
      if u.addrspace == AddrSpace.ALU or u.arg.dtype not in NP_DTYPES or u.src[0].op is not Ops.CONST: return refuse(f"a parameter {u.arg}")
    elif u.op not in (Ops.SINK, Ops.END, Ops.STORE) and u.dtype not in NP_DTYPES: return refuse(f"{u.op} of {u.dtype}")
    if u.op is Ops.WHERE and u.src[2].is_invalid and u not in gated: return refuse("an Invalid that is not a gated access")
    if u.op is Ops.CONST and u.arg is Invalid and not all(c in gated and c.src[2] is u for c in users[u]): return refuse("an Invalid")
    if u.op is Ops.INDEX:
      if len(u.src) != 2 or u.src[0].op is not Ops.PARAM: return refuse("an INDEX that is not one index into a parameter")
      # an element read where it is written (x += 1) is read before it is written, in numpy as in the loop
      if u in targets: written.add(u.src[0].arg.slot)
      else: read.add(u.src[0].arg.slot)
    d = frozenset([axes[u]]) if u.op is Ops.RANGE else frozenset().union(*[deps[x] for x in u.src if x in deps])
    if u.op is Ops.REDUCE:
      if u.arg[0] not in (Ops.ADD, Ops.MAX, Ops.MUL) or not all(x.op is Ops.RANGE for x in u.src[1:]): return refuse(f"a REDUCE {u.arg}")
      d = d - {axes[x] for x in u.src[1:]}
    # each element a STORE writes is written once: its index depends on every range its value does
    if u.op is Ops.STORE and (u.src[0].op is not Ops.INDEX or not deps[_gated(u.src[1])[0]] <= deps[_gated(u.src[0].src[1])[0]]):
      return refuse("a store whose index misses a range its value depends on")
    deps[u] = frozenset() if u.op in (Ops.END, Ops.STORE) else d
    if u.op not in (Ops.CONST, Ops.SINK, Ops.END, Ops.PARAM, Ops.RANGE):
      n = prod(sizes[a] for a in d)
      # GlobalCounters' estimates: an op an element of each value but the index math, the bytes each load and store moves
      if u.op in GroupOp.ALU and u.dtype is not dtypes.weakint and u not in gated: flops += n * (2 if u.op is Ops.MULACC else 1)
      if u.op is Ops.REDUCE: flops += prod(sizes[a] for a in deps[u.src[0]])
      if (u.op is Ops.INDEX and u not in targets) or u.op is Ops.STORE:
        buf, n = (u if u.op is Ops.INDEX else u.src[0]).src[0], n if u.op is Ops.INDEX else prod(sizes[a] for a in deps[u.src[0]])
        lds += n * buf.arg.dtype.itemsize
        mem[(buf, u.op)] = min(mem.get((buf, u.op), 0) + n * buf.arg.dtype.itemsize, buf.src[0].arg * buf.arg.dtype.itemsize)
      # a product only a REDUCE ADD uses is a matmul or an einsum there: never stored
      if not (u.op is Ops.MUL and all(c.op is Ops.REDUCE and c.arg[0] is Ops.ADD for c in users[u])):
        if n > MAX_ELEMENTS: return refuse(f"{n} elements in one value")
        work += n
  if read & written: return refuse("a buffer read at other elements than it writes")
  if work > MAX_WORK: return refuse(f"{work} element-ops")
  return (axes, sizes, Estimates(flops, lds, sum(mem.values()))) if written else None

def numpy_program(ast:UOp) -> UOp|None:
  """the kernel as a PROGRAM whose runtime is numpy, or None where it is off or plan refuses it"""
  if not enabled(): return None
  # the codegen's first rewrite of the AST (symbolic's algebra, which can turn an inf*0 into a 1-1/(1+x)): numpy computes what it does
  ast = graph_rewrite(ast, sym, name="first numpy symbolic")
  if (p:=plan(ast)) is not None: est, name = p[2], "np_" + "_".join(str(s) for s in p[1])   # numpy's, over ranges of these sizes
  elif (lp:=loop_plan(ast)) is not None:   # a scan's kernel: its loop in Python (engine/first_loop.py)
    est, name = lp.estimates, "npl_" + "_".join(str(s) for s in (*lp.sizes, lp.nsteps))
  else: return None
  if isinstance(ast.arg, KernelInfo): ast = ast.replace(arg=replace(ast.arg, estimates=est))   # what track_stats counts
  topo = ast.toposort()
  slots = sorted({u.arg.slot for u in topo if u.op is Ops.PARAM and u.addrspace is not AddrSpace.REG})
  outs = tuple(sorted({p.arg.slot for u in topo if u.op is Ops.STORE and (p:=_stored_param(u)) is not None}))
  # only its kernel's AST: a compiled PROGRAM has its LINEAR, SOURCE and BINARY too
  return UOp(Ops.PROGRAM, src=(ast,), arg=ProgramInfo(name, globals=tuple(slots), outs=outs, ins=tuple(s for s in slots if s not in outs)))

numpy_spent: dict[UOp, float] = {}   # a numpy PROGRAM: the seconds its runs took (engine/first_tier.py's stays_quick)

def numpy_runtime(prg:UOp) -> NumpyKernel|None:
  """the runtime of a PROGRAM numpy_program made (here or in a compile worker), for engine/realize.py's get_runtime, which keeps it"""
  from tinygrad.engine.first_graph import graph_runtime, is_graph_program
  if is_graph_program(prg): return graph_runtime(prg)
  if len(prg.src) != 1 or prg.src[0].op is not Ops.SINK: return None
  if (p:=plan(prg.src[0])) is not None: return NumpyKernel(prg.src[0], *p[:2], list(prg.arg.globals), prg)
  if (lp:=loop_plan(prg.src[0])) is not None: return LoopKernel(lp, list(prg.arg.globals), prg)
  return None

class Affine:
  """an index that is a constant plus ranges times constants: read and written as a strided view, never materialized"""
  __slots__ = ("coefs", "c")
  def __init__(self, coefs:dict[int, int], c:int): self.coefs, self.c = coefs, c
  def add(self, o:Affine) -> Affine:
    coefs = dict(self.coefs)
    for a, k in o.coefs.items(): coefs[a] = coefs.get(a, 0) + k
    return Affine(coefs, self.c + o.c)
  def mul(self, k:int) -> Affine: return Affine({a: v*k for a, v in self.coefs.items()}, self.c*k)

class NumpyKernel:
  """a kernel's runtime: its AST evaluated by numpy over the buffers it is called with"""
  def __init__(self, ast:UOp, axes:dict[UOp, int], sizes:tuple[int, ...], slots:list[int], prg:UOp|None=None):
    self.axes, self.sizes, self.slots, self.topo, self.prg = axes, sizes, slots, ast.toposort(), prg
    users, self.gated = _users(self.topo), _gates(self.topo)
    # Tensor.cos is sin(pi/2 - x): cos of x itself, as the codegen's decomposition takes it (pi/2 - x rounds to x's precision)
    self.cos_of = cos_args(self.topo)
    # a product only REDUCE ADDs use is evaluated there: a matmul or an einsum, never the product itself
    self.lazy = {u for u in self.topo if u.op is Ops.MUL and dtypes.is_float(u.dtype) and
                 all(c.op is Ops.REDUCE and c.arg[0] is Ops.ADD and c.src[0] is u for c in users[u])}
    self.lazy_reduces = {c for u in self.lazy for c in users[u]}
    # each value freed after its last read, so the next array reuses its memory (a new one faults its pages in: ~1.5 ns an element, as
    # much as the arithmetic). A load, a gated index or value and a lazy product are read where their users are evaluated
    for u, x in self.cos_of.items():
      for y in (x, *x.src): users.setdefault(y, []).append(u)
    deferred, at = {u for u in self.topo if u.op is Ops.INDEX} | self.gated | self.lazy, {u: i for i, u in enumerate(self.topo)}
    for u in reversed(self.topo):
      if u in deferred: at[u] = max((at[c] for c in users.get(u, ())), default=at[u])
    self.free_after: dict[int, list[UOp]] = {}
    for u in self.topo:
      if u.op not in (Ops.CONST, Ops.RANGE) and u in users: self.free_after.setdefault(max(at[c] for c in users[u]), []).append(u)

  def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait=False, timeout=None):
    et = run_numpy(self.prg, lambda np: _Run(self, np, {slot: np.frombuffer(to_mv(b.va_addr, b.size), np.uint8) for slot, b in zip(self.slots, bufs)}))
    return et if wait else None

def run_numpy(prg:UOp|None, run) -> float:
  """run(np) once every open device is done, its seconds added to numpy_spent[prg]: a CPU device runs its queue on a thread, and a copy
  into its buffers on either device's queue, so numpy reads once every device finished what it was given before this kernel (a compiled
  kernel would wait for those in its own queue)"""
  import numpy as np
  from tinygrad.device import Device
  for d in sorted(Device._opened_devices): Device[d].synchronize()
  st = time.perf_counter()
  with np.errstate(all="ignore"): run(np)
  et = time.perf_counter() - st
  if prg is not None: numpy_spent[prg] = numpy_spent.get(prg, 0.0) + et
  return et

class _Run:
  """one evaluation: each node's value an array over the kernel's axes (size 1 on those it does not depend on), a Python constant, or an
  Affine index"""
  def __init__(self, k:NumpyKernel, np, raw:dict[int, Any]):
    self.k, self.np, self.raw, self.sizes, self.v = k, np, raw, k.sizes, {}
    for i, u in enumerate(k.topo):
      self.step(u)
      for x in k.free_after.get(i, ()): self.v.pop(x, None)

  def step(self, u:UOp) -> None:
    k, np = self.k, self.np
    if u.op is Ops.CONST: self.v[u] = u.arg
    elif u.op is Ops.RANGE: self.v[u] = Affine({k.axes[u]: 1}, 0)
    elif u.op in (Ops.PARAM, Ops.SINK, Ops.END, Ops.INDEX) or u in k.lazy or u in k.gated: return   # an INDEX is read where it is used
    elif u.op is Ops.STORE: self.store(*u.src)
    elif u.op is Ops.REDUCE: self.v[u] = self.reduce(u)
    elif u in k.cos_of: self.v[u] = self.arr(np.cos(np.asarray(self.value(k.cos_of[u]), dtype=np.float64)), u.dtype)
    else: self.v[u] = self.alu(u, [self.value(x) for x in u.src])

  def npdt(self, dt:DType): return self.np.dtype(NP_DTYPES[dt])

  def arr(self, x, dt:DType|None=None):
    """a value as an array (an Affine index summed from its ranges), of dt if given"""
    np = self.np
    if isinstance(x, Affine):
      out = np.full((1,)*len(self.sizes), x.c, dtype=np.int64)
      for a, c in x.coefs.items():
        if c: out = out + np.arange(self.sizes[a], dtype=np.int64).reshape([s if i == a else 1 for i, s in enumerate(self.sizes)]) * c
      x = out
    if dt is None: return x
    if isinstance(x, (np.ndarray, np.generic)): return np.asarray(x).astype(self.npdt(dt), copy=False)
    if isinstance(x, int) and (d:=self.npdt(dt)).kind in "iu":   # a Python int wraps to the dtype's bits, as C's conversion does
      x &= (1 << (bits:=8*d.itemsize)) - 1
      return d.type(x - (1 << bits) if d.kind == "i" and x >> (bits-1) else x)
    return self.npdt(dt).type(x)

  def view(self, p:UOp, idx):
    """(the elements of p's buffer an index names, None) as a strided view where it is Affine and in bounds, else (the buffer, an index
    array)"""
    buf = self.raw[p.arg.slot].view(self.npdt(p.arg.dtype))
    if isinstance(idx, Affine):
      lo = idx.c + sum(c*(self.sizes[a]-1) for a, c in idx.coefs.items() if c < 0)
      hi = idx.c + sum(c*(self.sizes[a]-1) for a, c in idx.coefs.items() if c > 0)
      if 0 <= lo and hi < buf.size:
        strides = [0]*len(self.sizes)
        for a, c in idx.coefs.items(): strides[a] = c*buf.itemsize
        shape = tuple(s if strides[i] else 1 for i, s in enumerate(self.sizes))
        return self.np.lib.stride_tricks.as_strided(buf[idx.c:], shape=shape, strides=tuple(strides)), None
    return buf, self.arr(idx)

  def value(self, u:UOp):
    """a source's value: an INDEX is a load, kept for its other users"""
    if u in self.v: return self.v[u]
    if u.op is Ops.CONST: return u.arg
    np = self.np
    if u.op is not Ops.INDEX:   # a lazy product, or cos's x where it was y*-c (folded from -(y*c))
      self.v[u] = ret = self.alu(u, [self.value(x) for x in u.src])
      return ret
    idx, gate = _gated(u.src[1])
    elems, ix = self.view(u.src[0], self.v[idx])
    if ix is not None: elems = np.take(elems, ix if gate is None else np.where(self.arr(self.v[gate]), ix, 0), mode="clip")
    self.v[u] = ret = elems if gate is None else np.where(self.arr(self.v[gate]), elems, elems.dtype.type(0))
    return ret

  def store(self, index:UOp, val:UOp) -> None:
    np = self.np
    (idx, gate), (val, val_gate) = _gated(index.src[1]), _gated(val)
    x = self.arr(self.value(val), index.src[0].arg.dtype)
    gates = [self.arr(self.v[g], dtypes.bool) for g in (gate, val_gate) if g is not None]
    g = (gates[0] & gates[1] if len(gates) == 2 else gates[0]) if gates else None
    if g is not None and np.all(g): g = None   # a gate true everywhere (a lane of a stack that covers the output): a plain copy
    elems, ix = self.view(index.src[0], self.v[idx])
    if ix is None and np.broadcast_shapes(elems.shape, np.shape(x), np.shape(g) if g is not None else ()) == elems.shape:
      if g is None: elems[...] = x
      else: np.copyto(elems, x, where=g)
      return
    if ix is None: elems, ix = self.view(index.src[0], self.arr(self.v[idx]))   # a gate over more ranges than the index: an index array
    full = np.broadcast_shapes(np.shape(ix), np.shape(x), np.shape(g) if g is not None else ())
    ix, x = np.broadcast_to(ix, full), np.broadcast_to(x, full)
    if g is None: elems[ix.ravel()] = x.ravel()
    else:
      m = np.broadcast_to(g, full)
      elems[ix[m]] = x[m]

  def reduce(self, u:UOp):
    np, nd, op = self.np, len(self.sizes), u.arg[0]
    axes = tuple(self.k.axes[r] for r in u.src[1:])
    if op is Ops.ADD and u in self.k.lazy_reduces:
      a, b = (self.arr(self.value(x), u.dtype) for x in u.src[0].src)
      if np.ndim(a) == nd and np.ndim(b) == nd:
        # a reduced axis neither operand depends on adds the same product that many times
        scale = prod(self.sizes[i] for i in axes if a.shape[i] == 1 and b.shape[i] == 1)
        if (out:=self.matmul(a, b, axes)) is None:   # no outer product in it: one pass of einsum, the product never stored
          kept = [i for i in range(nd) if i not in axes]
          out = np.einsum(a, list(range(nd)), b, list(range(nd)), kept).reshape([max(a.shape[i], b.shape[i]) if i in kept else 1 for i in range(nd)])
        return out * out.dtype.type(scale) if scale > 1 else out
    x = self.arr(self.value(u.src[0]), u.dtype)
    x = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), tuple(s if i in axes else 1 for i, s in enumerate(self.sizes))))
    if op is Ops.MAX and x.dtype.kind == "f":   # the loop's max(acc, x) is acc<x ? x : acc from -inf: a NaN never wins
      return np.fmax.reduce(x, axis=axes, keepdims=True, initial=-np.inf).astype(x.dtype, copy=False)
    return {Ops.ADD: np.add, Ops.MAX: np.maximum, Ops.MUL: np.multiply}[op].reduce(x, axis=axes, keepdims=True)

  def matmul(self, a, b, axes:tuple[int, ...]):
    """a REDUCE ADD of a product with an outer product in it as np.matmul: batch axes, a's own, the reduced, b's own; None without one"""
    A, B, R = {i for i, s in enumerate(a.shape) if s > 1}, {i for i, s in enumerate(b.shape) if s > 1}, set(axes)
    batch, red, m, n = sorted(A & B - R), sorted(A & B & R), sorted(A - B - R), sorted(B - A - R)
    if not (m and n): return None
    # a reduced axis only one operand has is summed there first
    if (R & A) - B: a = a.sum(axis=tuple(sorted((R & A) - B)), keepdims=True)
    if (R & B) - A: b = b.sum(axis=tuple(sorted((R & B) - A)), keepdims=True)
    rest = [i for i in range(len(self.sizes)) if i not in batch + m + n]
    sz = lambda ax: prod(self.sizes[i] for i in ax)
    am = a.transpose(batch + m + red + [i for i in range(a.ndim) if i not in batch + m + red]).reshape(sz(batch), sz(m), sz(red))
    bm = b.transpose(batch + red + n + [i for i in range(b.ndim) if i not in batch + red + n]).reshape(sz(batch), sz(red), sz(n))
    order = batch + m + n + rest
    out = self.np.matmul(am, bm).reshape([self.sizes[i] for i in batch + m + n] + [1]*len(rest))
    return out.transpose([order.index(i) for i in range(len(self.sizes))])

  def alu(self, u:UOp, xs:list):
    np, arr, op, dt = self.np, self.arr, u.op, u.dtype
    if dt is dtypes.weakint and op in (Ops.ADD, Ops.MUL, Ops.SUB, Ops.NEG):
      a = [x if isinstance(x, Affine) else Affine({}, x) if isinstance(x, int) else None for x in xs]
      if all(x is not None for x in a):
        if op is Ops.ADD: return a[0].add(a[1])
        if op is Ops.SUB: return a[0].add(a[1].mul(-1))
        if op is Ops.NEG: return a[0].mul(-1)
        if not a[0].coefs: return a[1].mul(a[0].c)
        if not a[1].coefs: return a[0].mul(a[1].c)
    if op is Ops.CAST: return arr(xs[0], dt)
    if op is Ops.BITCAST:
      return np.ascontiguousarray(arr(xs[0], u.src[0].dtype)).view(np.dtype(NP_DTYPES[dt]))
    if op is Ops.WHERE: return np.where(arr(xs[0], dtypes.bool), arr(xs[1], dt), arr(xs[2], dt))
    if op is Ops.MULACC: return arr(arr(xs[0], dt) * arr(xs[1], dt) + arr(xs[2], dt), dt)
    # an ALU's operands are of its dtype (the codegen casts a float ALU's others: RECIPROCAL of an int is 1.0/x), a comparison's of its
    # strong operand's
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): sdt = u.src[0].dtype if u.src[0].dtype not in dtypes.weaks else u.src[1].dtype
    else: sdt = dt
    if sdt in dtypes.weaks: sdt = dtypes.weakint if dtypes.is_int(sdt) else dtypes.float64
    a = [arr(x, sdt) for x in xs]
    if op in UNARY:
      x = a[0]
      if op is Ops.NEG: r = -x if dt is not dtypes.bool else np.logical_not(x)
      elif op is Ops.RECIPROCAL: r = np.reciprocal(x)
      elif op is Ops.SQRT: r = np.sqrt(x)
      elif op is Ops.TRUNC: r = np.trunc(x)
      else:   # transcendentals in float64, rounded to the kernel's float
        wide = np.asarray(x, dtype=np.float64)
        r = np.sin(wide) if op is Ops.SIN else np.exp2(wide) if op is Ops.EXP2 else np.log2(wide)
      return arr(r, dt)
    x, y = a
    if op is Ops.ADD: r = x + y
    elif op is Ops.SUB: r = x - y
    elif op is Ops.MUL: r = x * y
    elif op is Ops.FDIV: r = x / y
    elif op is Ops.MAX: r = np.where(x < y, y, x)
    elif op is Ops.CMPLT: r = x < y
    elif op is Ops.CMPNE: r = x != y
    elif op is Ops.CMPEQ: r = x == y
    elif op is Ops.AND: r = x & y
    elif op is Ops.OR: r = x | y
    elif op is Ops.XOR: r = x ^ y
    elif op is Ops.SHL: r = x << y
    elif op is Ops.SHR: r = x >> y
    elif op is Ops.FLOORDIV: r = x // y
    elif op is Ops.FLOORMOD: r = x % y
    elif op is Ops.CMOD: r = np.fmod(x, y)
    else:   # CDIV: C's division truncates toward zero
      q = x // y
      r = np.where((q < 0) & (q * y != x), q + 1, q) if dtypes.is_int(sdt) else x / y
    return arr(r, dt)
