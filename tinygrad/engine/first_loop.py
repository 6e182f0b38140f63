# line: 0.14.0 only (engine/first_numpy.py asks it for a kernel with a LOOP range that first_numpy's plan refuses)
"""A kernel with a LOOP range (scan_kernel.py's scan: the carry in registers across the steps) run the first time as numpy, the loop in
Python and every other range an axis of the arrays. A scan kernel is a step's graph unrolled to scalars (100-2000 ALUs), and its codegen
and clang cost 0.1-1 s at a first call (W7's and W8's backward and forward passes); numpy evaluates the step's scalars over the batch
once a step. The body is a list of (slot, function, argument slots) run in order each step: ~1 µs an ALU.

Taken only where every op is one this module runs as the C program would (engine/first_numpy.py's ALUs: the same dtypes, the
transcendentals in float64 rounded), the registers are indexed by constants, no other range is inside the loop and no buffer is read
where it is written; anything else is built as before. Tested in test/test_first_numpy.py (TestLoopKernel)."""
from __future__ import annotations
import operator
from typing import Any, Callable
from tinygrad.helpers import prod, to_mv
from tinygrad.dtype import dtypes, AddrSpace, Invalid
from tinygrad.uop.ops import Ops, UOp, AxisType
from tinygrad.renderer import Estimates

def loop_range(ast:UOp) -> UOp|None:
  """the kernel's LOOP range, if it has one"""
  return next((u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[-1] is AxisType.LOOP), None)

# numpy ufuncs for a float ALU whose operands are of its dtype (or constants made so): the C operator's result
_FLOAT_UFUNCS = {Ops.ADD: "add", Ops.SUB: "subtract", Ops.MUL: "multiply", Ops.FDIV: "divide", Ops.NEG: "negative", Ops.SQRT: "sqrt",
                 Ops.RECIPROCAL: "reciprocal", Ops.CMPLT: "less", Ops.CMPNE: "not_equal", Ops.CMPEQ: "equal"}
_INDEX_MATH = {Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.NEG: operator.neg}
LOOP_OPS = {Ops.BUFFER, Ops.LOAD, Ops.AFTER, Ops.GROUP, Ops.STACK, Ops.RESHAPE}
STEP_S, ELEMENT_S = 2e-6, 2e-9   # what a step of the body costs in Python, and an element in numpy (measured: W7's scans)

class LoopPlan:
  """what numpy runs: the steps before the loop, the loop's body (once a step), the steps after it, and each slot's initial value"""
  def __init__(self, ast:UOp):
    from tinygrad.engine.first_numpy import SUPPORTED, NP_DTYPES, MAX_WORK, BUILD_S, BUILD_S_PER_NODE, refuse, cos_args, _Run
    self.ok, self.ast, topo = False, ast, list(ast.toposort())
    if ops:={u.op for u in topo} - (SUPPORTED - {Ops.REDUCE}) - LOOP_OPS: return refuse(f"{ops} in a loop kernel")
    loops = [u for u in topo if u.op is Ops.RANGE and u.arg[-1] is AxisType.LOOP]
    ranges = [u for u in topo if u.op is Ops.RANGE and u not in loops]
    if len(loops) != 1: return refuse("not one LOOP range")
    if not all(r.src[0].op is Ops.CONST and isinstance(r.src[0].arg, int) and r.src[0].arg > 0 for r in ranges + loops):
      return refuse("a symbolic range")
    loop, self.nsteps = loops[0], loops[0].src[0].arg
    self.axes, self.sizes = {r: i for i, r in enumerate(ranges)}, tuple(r.src[0].arg for r in ranges)
    # inside the loop: what depends on its range, up to the END that closes it
    inside, after = set(), set()
    for u in topo:
      if u.op is Ops.END and loop in u.src[1:]: after.add(u)
      elif u is loop or any(s in inside for s in u.src):
        if any(s in after for s in u.src): return refuse("a value of the loop read after it")
        inside.add(u)
      elif any(s in after for s in u.src): after.add(u)
    if any(r in inside for r in ranges) or any(u.op is Ops.END and u in inside for u in topo): return refuse("a range inside the loop")
    # the other ranges are axes: each example's registers an element of an array, so each must be stored before the loop reads it (in
    # C one register would carry a value from one example to the next)
    self.np_alu = _Run.__new__(_Run)   # first_numpy's ALUs (arr, alu) over these axes, without a kernel of its own
    import numpy
    self.np_alu.sizes, self.np_alu.np = self.sizes, numpy
    slot: dict[UOp, int] = {}
    self.init: list[Any] = []   # each slot's value before a run (constants, the ranges' aranges); None where a step or the call sets it
    self.params: dict[int, int] = {}   # a global parameter's slot number -> its slot
    self.param_dtypes: dict[int, Any] = {}
    index_param: dict[UOp, UOp] = {}   # an INDEX into a global parameter: the parameter
    regs: dict[tuple[UOp, int], int] = {}   # (a register BUFFER, an element) -> the slot holding it
    pre, body, post, reg_loads, reg_stores = [], [], [], [], set()
    stored: dict[int, list] = {}   # a register's slot -> the lists of steps that store it
    deps: dict[UOp, frozenset[int]] = {}
    read, written, work, flops, mem = set(), set(), 0, 0, {}
    def new(v:Any=None) -> int:
      self.init.append(v)
      return len(self.init) - 1
    def base(u:UOp) -> UOp:
      while u.op is Ops.AFTER: u = u.src[0]
      return u
    nodes = set(topo)   # Tensor.cos is cos of its x (first_numpy's cos_args) where x is a value of the kernel
    cos_of = {u: x for u, x in cos_args(topo).items() if x in nodes}
    for u in topo:
      dt = u.dtype
      if u.op not in (Ops.SINK, Ops.END, Ops.STORE, Ops.GROUP, Ops.AFTER, Ops.BUFFER, Ops.PARAM, Ops.RESHAPE, Ops.STACK) and \
         dt not in NP_DTYPES and not (u.op is Ops.CONST and dt in dtypes.weaks): return refuse(f"{u.op} of {dt}")
      if u.op is Ops.CONST and (u.arg is Invalid or not isinstance(u.arg, (int, float, bool))): return refuse(f"a constant {u.arg!r}")
      d = frozenset([self.axes[u]]) if u.op is Ops.RANGE and u is not loop else frozenset().union(*[deps.get(x, frozenset()) for x in u.src])
      deps[u] = d
      steps = body if u in inside else post if u in after else pre
      n = prod(self.sizes[a] for a in d) * (self.nsteps if u in inside else 1)
      if u.op is Ops.CONST: slot[u] = new(u.arg)
      elif u.op is Ops.RANGE: slot[u] = new(None if u is loop else self._arange(u))
      elif u.op is Ops.PARAM:
        if u.addrspace is not AddrSpace.GLOBAL or u.arg.dtype not in NP_DTYPES or u.src[0].op is not Ops.CONST: return refuse(f"a parameter {u.arg}")
        slot[u] = self.params[u.arg.slot] = new()
        self.param_dtypes[u.arg.slot] = NP_DTYPES[u.arg.dtype]
      elif u.op is Ops.BUFFER:
        if u.addrspace is not AddrSpace.REG or u.arg.dtype not in NP_DTYPES or u.src[0].op is not Ops.CONST: return refuse(f"a buffer {u.arg}")
      elif u.op in (Ops.STACK, Ops.RESHAPE):
        if not (u.op is Ops.STACK and all(s.op is Ops.CONST and isinstance(s.arg, int) for s in u.src)) and \
           not (u.op is Ops.RESHAPE and u.src[0].op is Ops.PARAM and u.src[1].op is Ops.STACK): return refuse(f"a {u.op} that is not a shape")
      elif u.op is Ops.INDEX:
        buf = base(u.src[0])
        if buf.op is Ops.BUFFER:   # an element of a register: a slot of its own
          if len(u.src) != 2 or u.src[1].op is not Ops.CONST or not 0 <= u.src[1].arg < buf.src[0].arg: return refuse("a register's index")
          slot[u] = regs.setdefault((buf, u.src[1].arg), new(self.np_alu.arr(0, buf.arg.dtype)))
          continue
        p = buf if buf.op is Ops.PARAM else buf.src[0] if buf.op is Ops.RESHAPE else None
        if p is None or p.op is not Ops.PARAM or u.src[0].op is Ops.AFTER: return refuse("an INDEX that is not into a parameter")
        shape = tuple(s.arg for s in buf.src[1].src) if buf.op is Ops.RESHAPE else (p.src[0].arg,)
        if len(shape) != len(u.src) - 1 or prod(shape) != p.src[0].arg: return refuse("an INDEX of another rank")
        strides = tuple(prod(shape[i+1:]) for i in range(len(shape)))
        slot[u] = new()
        steps.append((slot[u], self._flat_index(strides), tuple(slot[s] for s in u.src[1:])))
        index_param[u] = p
      elif u.op is Ops.LOAD:
        if (idx:=u.src[0]).op is not Ops.INDEX or idx not in slot: return refuse("a LOAD that is not of an INDEX")
        if base(idx.src[0]).op is Ops.BUFFER and not any(l is pre or (l is body and steps is post) for l in stored.get(slot[idx], ())):
          return refuse("a register read before the loop stores it")
        slot[u] = new()
        # a register's value as the step began (scan_kernel.py: every store of the carry waits for every load of it; symbolic drops the
        # loads from the AFTERs that said so): the loads of the body run first
        if base(idx.src[0]).op is Ops.BUFFER: (reg_loads if steps is body else steps).append((slot[u], lambda x: x, (slot[idx],)))
        else:
          p = index_param[idx]
          read.add(p.arg.slot)
          mem[p.arg.slot] = p.src[0].arg * p.arg.dtype.itemsize
          steps.append((slot[u], self._load, (self.params[p.arg.slot], slot[idx])))
      elif u.op is Ops.STORE:
        idx, val = u.src[0], u.src[1]
        if idx.op is not Ops.INDEX or idx not in slot or val not in slot: return refuse("a STORE that is not to an INDEX")
        if base(idx.src[0]).op is Ops.BUFFER:
          if steps is body and slot[idx] in reg_stores: return refuse("a register stored twice a step")
          if steps is body: reg_stores.add(slot[idx])
          stored.setdefault(slot[idx], []).append(steps)
          steps.append((slot[idx], self._cast(base(idx.src[0]).arg.dtype), (slot[val],)))
        else:
          p = index_param[idx]
          # each element written once a step: the index depends on every range the value does
          if not deps[val] <= deps[idx]: return refuse("a store whose index misses a range its value depends on")
          written.add(p.arg.slot)
          mem[p.arg.slot] = p.src[0].arg * p.arg.dtype.itemsize
          steps.append((-1, self._store, (self.params[p.arg.slot], slot[idx], slot[val])))
      elif u.op in (Ops.AFTER, Ops.GROUP, Ops.END, Ops.SINK): continue
      else:   # an ALU, CAST, BITCAST, WHERE or MULACC
        srcs = (cos_of[u],) if u in cos_of else u.src
        if any(s not in slot for s in srcs): return refuse(f"an operand of {u.op} that is not a value")
        slot[u] = new()
        steps.append((slot[u], self._alu(u, cos=u in cos_of), tuple(slot[s] for s in srcs)))
        if dtypes.is_float(dt): flops += n
      if u.op not in (Ops.CONST, Ops.PARAM, Ops.RANGE, Ops.BUFFER, Ops.STACK, Ops.RESHAPE): work += n
    if read & written: return refuse("a buffer read where it is written")
    if work > MAX_WORK: return refuse(f"{work} element-ops")
    # the loop costs ~2 µs a step of the body (Python and numpy's call) and ~2 ns an element: past a build of the kernel, it is built
    if (cost:=(len(body) + len(reg_loads)) * self.nsteps * STEP_S + work * ELEMENT_S) > (build:=BUILD_S + BUILD_S_PER_NODE * len(topo)):
      return refuse(f"the loop's ~{cost*1e3:.0f} ms over a build's ~{build*1e3:.0f} ms")
    if not written: return None
    self.pre, self.body, self.post, self.loop_slot, self.work = pre, reg_loads + body, post, slot[loop], work
    self.estimates = Estimates(flops, sum(mem.values()), sum(mem.values()))
    self.ok = True

  def _arange(self, r:UOp):
    import numpy as np
    return np.arange(r.src[0].arg, dtype=np.int64).reshape([s if i == self.axes[r] else 1 for i, s in enumerate(self.sizes)])

  @staticmethod
  def _flat_index(strides:tuple[int, ...]) -> Callable:
    if len(strides) == 1: return lambda i: i
    def flat(*idx):
      ret = 0
      for i, s in zip(idx, strides): ret = ret + i * s
      return ret
    return flat

  @staticmethod
  def _load(buf, idx):
    import numpy as np
    return buf[idx] if isinstance(idx, int) else np.take(buf, idx, mode="clip")

  @staticmethod
  def _store(buf, idx, val):
    import numpy as np
    if isinstance(idx, int): buf[idx:idx+1] = np.ravel(val)
    else:
      ix, x = np.broadcast_arrays(idx, val)
      buf[ix.ravel()] = x.ravel()

  def _cast(self, dt) -> Callable:
    arr = self.np_alu.arr
    return lambda x: arr(x, dt)

  def _alu(self, u:UOp, cos:bool) -> Callable:
    import numpy as np
    run, dt = self.np_alu, u.dtype
    if cos: return lambda x: run.arr(np.cos(np.asarray(x, dtype=np.float64)), dt)
    if dt is dtypes.weakint and u.op in _INDEX_MATH and all(s.dtype is dtypes.weakint for s in u.src): return _INDEX_MATH[u.op]
    sdt = u.src[0].dtype if u.src else dt
    if u.op in _FLOAT_UFUNCS and sdt in (dtypes.float32, dtypes.float64) and all(s.dtype is sdt or s.op is Ops.CONST for s in u.src) \
       and (dt is sdt or dt is dtypes.bool) and sum(s.op is Ops.CONST for s in u.src) < len(u.src):
      f, npdt = getattr(np, _FLOAT_UFUNCS[u.op]), run.npdt(sdt)
      consts = [npdt.type(s.arg) if s.op is Ops.CONST else None for s in u.src]
      if any(c is not None for c in consts):
        if len(consts) == 2 and consts[0] is None: return lambda x, _, c=consts[1]: f(x, c)
        if len(consts) == 2 and consts[1] is None: return lambda _, y, c=consts[0]: f(c, y)
      return f
    return lambda *xs: run.alu(u, list(xs))

  def run(self, raw:dict[int, Any]) -> None:
    v = list(self.init)
    for s, buf in raw.items(): v[self.params[s]] = buf
    for o, f, a in self.pre: v[o] = f(*[v[i] for i in a])
    body, t = self.body, self.loop_slot
    for step in range(self.nsteps):
      v[t] = step
      for o, f, a in body: v[o] = f(*[v[i] for i in a])
    for o, f, a in self.post: v[o] = f(*[v[i] for i in a])

def loop_plan(ast:UOp) -> LoopPlan|None:
  """the plan of a kernel with a LOOP range where this module runs it, else None"""
  import importlib.util
  if loop_range(ast) is None or importlib.util.find_spec("numpy") is None: return None
  return p if (p:=LoopPlan(ast)).ok else None

class LoopKernel:
  """a loop kernel's runtime: its plan run by numpy over the buffers it is called with"""
  def __init__(self, plan:LoopPlan, slots:list[int], prg:UOp|None=None): self.plan, self.slots, self.prg = plan, slots, prg
  def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait=False, timeout=None):
    from tinygrad.engine.first_numpy import run_numpy
    dts = self.plan.param_dtypes
    et = run_numpy(self.prg, lambda np: self.plan.run({s: np.frombuffer(to_mv(b.va_addr, b.size), np.uint8).view(dts[s])
                                                       for s, b in zip(self.slots, bufs) if s in dts}))
    return et if wait else None
