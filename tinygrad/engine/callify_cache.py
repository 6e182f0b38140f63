# line: 0.14.0 only (the default line; its topics in patches-0.14.0/ hook it, the frozen 0.12.0 line never imports it)
# transform_to_call for a tensor graph whose structure was seen before (the callify-cache topic hooks it into Tensor.linear_with_vars on the
# 0.14.0 line). An eager call builds the same graph again on new buffers, and transform_to_call's four graph rewrites cost 0.4-1.8 ms on
# bench's graphs of 15-70 nodes. What it returns is a function of the graph's structure: the CALL's body names no buffer (its inputs are
# PARAMs), its args are the graph's input buffers and new output buffers, and the map sends nodes of the graph to views of those. So it
# is kept per structure; a hit builds the CALL on this graph's input buffers and new output buffers, and maps this graph's nodes.
# Only plain computations are kept: a graph with assigns, copies, calls, bound Variables, bitcasts or several devices takes the long way.
from __future__ import annotations
import itertools
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, Callable, cast
from tinygrad.uop import Ops, GroupOp
from tinygrad.uop.ops import UOp, ParamArg, sym_infer
from tinygrad.dtype import AddrSpace, DType, dtypes
from tinygrad.helpers import VIZ, DEBUG, BEAM, SCACHE, CAPTURING, VALIDATE_WITH_CPU, PROFILE, GlobalCounters, getenv, perf_counter_us
from tinygrad.uop.ops import buffers
from tinygrad.schedule import create_linear_with_vars
from tinygrad.engine.first_tier import has_quick
from tinygrad.engine.first_graph import runs_now
from tinygrad.engine.realize import capturing, compile_linear, link_linear, ExecContext, track_stats, pm_exec, estimate_uop, get_runtime
from tinygrad.device import Buffer
from tinygrad.codegen import to_program_config
from tinygrad.structure_template import Structure, KeptTemplates, TEMPLATE_CHECK, BUILT_FROM, anonymous, check_hit

# the ops a kept graph may hold besides its input BUFFERs; transform_to_call only tags, makes CONTIGUOUS a store into a new buffer and
# drops DETACH there
_PLAIN_OPS = GroupOp.ALU | GroupOp.Movement | {Ops.CAST, Ops.CONST, Ops.STACK, Ops.REDUCE, Ops.CONTIGUOUS, Ops.DETACH,
                                               Ops.CONTIGUOUS_BACKWARD, Ops.SINK}
# where a host buffer or a file is read or written, transform_to_call makes copies and views of its own
_SPECIAL_DEVICES = ("DISK", "TINYFS", "NPY")

@dataclass(frozen=True)
class NewBuffer:
  """a CALL arg that is a new buffer: what UOp.new_buffer needs"""
  device: str
  size: int
  dtype: DType

@dataclass(frozen=True)
class Launch:
  """a kernel of a kept schedule: what exec_kernel and track_stats derive on every run of it (~40 us a kernel), derived once"""
  runtime: Any
  device: str
  globals: tuple[int, ...]
  global_size: tuple[int, ...]
  local_size: tuple[int, ...]|None
  vals: tuple[int, ...]
  ops: int
  mem: int

@dataclass
class CallTemplate:
  body: UOp                             # the CALL's body: a SINK over PARAMs
  call_arg: Any
  args: tuple[int|NewBuffer, ...]       # per CALL arg: the index of a graph input buffer, or a new buffer
  placeholders: tuple[UOp, ...]         # per CALL arg, a BUFFER that stands for it in `becomes` and `linear` (never allocated)
  becomes: tuple[tuple[int, UOp], ...]  # (index of a node in the graph's toposort, what it becomes: a view of placeholders)
  order: tuple[UOp, ...]                # the nodes of what they become that read a placeholder, srcs first: what a hit builds anew
  linear: UOp|None = None               # the compiled schedule on placeholders (and never allocated intermediates), once realized from here
  linear_config: tuple = ()             # the codegen settings it was compiled with (to_program_config: NOOPT, DEVECTORIZE, ...)
  views: dict = field(default_factory=dict)   # a kernel arg of `linear` that is a view: where it lies in its buffer (contiguous_view), its size
  launches: tuple[Launch, ...]|None = None   # linear's kernels as launches (make_launches), None where they take exec_kernel
  plan: Plan|None = None                # where each launch's buffers come from (make_plan): a hit builds no linear, None where it does

def _swap_buffers(u:UOp, subs:dict[UOp, UOp], new:Callable[[UOp], UOp]|None=None) -> UOp:
  """u with the nodes in subs replaced and, with `new`, a new(b) for every other BUFFER b, the same one wherever b is (a view or a
  kernel's args: a few nodes, so no graph_rewrite)"""
  if (ret:=subs.get(u)) is not None: return ret
  if u.op is Ops.BUFFER and new is not None: ret = new(u)
  else: ret = u.replace(src=tuple(_swap_buffers(s, subs, new) for s in u.src)) if u.src else u
  subs[u] = ret
  return ret

def _new_like(b:UOp) -> UOp:
  if b.src[0].op is not Ops.CONST or not isinstance(b.device, str): raise _NotKept
  return UOp.new_buffer(b.device, b.src[0].arg, b.dtype)

class _NotKept(Exception): pass

def _input(u:UOp) -> tuple|None:
  """a BUFFER the graph reads, keyed without its number; None (not kept) for any op but the plain ones"""
  if u.op is not Ops.BUFFER or (a:=u.arg).addrspace is not AddrSpace.GLOBAL or a.vmin_vmax is not None or not isinstance(a.device, str) or \
     a.device.startswith(_SPECIAL_DEVICES) or u.src[0].op is not Ops.CONST: return None
  return anonymous(u)

def graph_structure(big_sink:UOp) -> tuple[tuple, list[UOp], list[UOp]]|None:
  """the graph's structure as a hashable key (every node but a buffer's number), its nodes in toposort order and its input buffers,
  or None for a graph that isn't kept"""
  if not (walk:=Structure()).walk(big_sink, _PLAIN_OPS, _input): return None
  return tuple(walk.key), list(walk.index), walk.leaves

def make_template(ret:UOp, becomes_map:dict[UOp, UOp], nodes:list[UOp], inputs:list[UOp]) -> CallTemplate|None:
  """what transform_to_call returned, with this graph's buffers as placeholders; None where it isn't buffers and views of them"""
  if ret.op is not Ops.CALL or any(u.op is Ops.BUFFER for u in ret.src[0].toposort()): return None
  input_index, node_index = {b:i for i,b in enumerate(inputs)}, {u:i for i,u in enumerate(nodes)}
  args: list[int|NewBuffer] = []
  for a in ret.src[1:]:
    if a.op is not Ops.BUFFER: return None
    if a in input_index: args.append(input_index[a])
    elif a not in node_index and a.src[0].op is Ops.CONST and isinstance(a.device, str): args.append(NewBuffer(a.device, a.src[0].arg, a.dtype))
    else: return None
  placeholders = {a:UOp.new_buffer(a.device, a.src[0].arg, a.dtype) for a in ret.src[1:]}
  becomes: list[tuple[int, UOp]] = []
  for k, v in becomes_map.items():
    if k not in node_index or any(u.op is Ops.BUFFER and u not in placeholders for u in v.toposort()): return None
    becomes.append((node_index[k], _swap_buffers(v, dict(placeholders))))
  reads, order, sink = set(placeholders.values()), [], UOp.sink(*[v for _,v in becomes])
  for x in sink.toposort():
    if x is not sink and x not in reads and any(s in reads for s in x.src): reads.add(x); order.append(x)
  return CallTemplate(ret.src[0], ret.arg, tuple(args), tuple(placeholders.values()), tuple(becomes), tuple(order))

def instantiate(t:CallTemplate, nodes:list[UOp], inputs:list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  return instantiate_on(t, [nodes[i] for i,_ in t.becomes], inputs)
def instantiate_on(t:CallTemplate, becoming:list[UOp], inputs:list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """the CALL on this graph's input buffers and new output buffers, and what each node of t.becomes (`becoming`, this graph's) becomes"""
  # a new output buffer is UOp.new_buffer's, from its placeholder (UOp's dtype rule for a BUFFER walks ~40 match cases: ~10 us a buffer)
  args = tuple(inputs[a] if isinstance(a, int) else UOp(Ops.BUFFER, p.dtype, p.src, ParamArg(next(UOp.unique_num), a.dtype, device=a.device))
               for a,p in zip(t.args, t.placeholders))
  memo = dict(zip(t.placeholders, args))
  for u in t.order: memo[u] = UOp(u.op, u.dtype, tuple([memo.get(s, s) for s in u.src]), u.arg, u.tag)
  return UOp(Ops.CALL, dtypes.void, (t.body,)+args, t.call_arg), {n:memo.get(v, v) for n,(_,v) in zip(becoming, t.becomes)}

def check_instantiated(got:tuple[UOp, dict[UOp, UOp]], want:tuple[UOp, dict[UOp, UOp]]) -> None:
  """TEMPLATE_CHECK: a hit's CALL and map are transform_to_call's, but for the new output buffers each makes (one for one)"""
  renamed: dict[UOp, UOp] = {}
  for g,w in zip(got[0].src[1:], want[0].src[1:]):
    if g is not w and g.op is w.op is Ops.BUFFER and g.src == w.src and replace(g.arg, slot=0) == replace(w.arg, slot=0): renamed[w] = g
  if set(got[1]) != set(want[1]): raise AssertionError("a realize's CALL: a hit maps other nodes than transform_to_call")
  check_hit([got[0], *[got[1][k] for k in want[1]]], [_swap_buffers(w, renamed) for w in (want[0], *want[1].values())], "a realize's CALL")

# per structure, what transform_to_call returned, None where it isn't kept
_templates = KeptTemplates(4096)
def cached_transform_to_call(big_sink:UOp, transform_to_call:Callable[[UOp], tuple[UOp, dict[UOp, UOp]]]) -> tuple[UOp, dict[UOp, UOp]]:
  if VIZ or (structure:=graph_structure(big_sink)) is None: return transform_to_call(big_sink)
  key, nodes, inputs = structure
  if key in _templates:
    if (t:=_templates[key]) is None: return transform_to_call(big_sink)
    ret = instantiate(t, nodes, inputs)
    if TEMPLATE_CHECK: check_instantiated(ret, transform_to_call(big_sink))
    return ret
  ret, becomes_map = transform_to_call(big_sink)
  _templates.keep(key, make_template(ret, becomes_map, nodes, inputs))
  return ret, becomes_map

# *** the schedule too: a realize from a template with its compiled linear skips create_linear_with_vars and compile_linear (0.2-0.7 ms)

def make_linear_template(linear:UOp, args:tuple[UOp, ...], placeholders:tuple[UOp, ...]) -> UOp|None:
  """the compiled linear with the CALL's args as their placeholders and each intermediate buffer as one never allocated; None where
  it isn't kernels on single-device buffers"""
  if not all(c.op is Ops.CALL and c.src[0].op is Ops.PROGRAM for c in linear.src): return None
  def placeholder(b:UOp) -> UOp:
    if b in buffers and buffers[b].is_allocated(): raise _NotKept   # only the CALL's args hold data
    return _new_like(b)
  subs = dict(zip(args, placeholders))
  try: return linear.replace(src=tuple(c.replace(src=(c.src[0],)+tuple(_swap_buffers(b, subs, placeholder) for b in c.src[1:])) for c in linear.src))
  except _NotKept: return None

_BUFFER_THROUGH = {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.RESHAPE, Ops.UNSHARD, Ops.DETACH, Ops.AFTER}   # UOp.buffer's
def instantiate_linear(t:CallTemplate, args:tuple[UOp, ...]) -> UOp:
  assert t.linear is not None
  subs = dict(zip(t.placeholders, args))
  def arg(b:UOp) -> UOp:
    ret = v = _swap_buffers(b, subs, _new_like)
    # a view's Buffer is its buffer's at the view's offset, which UOp.buffer finds with a graph_rewrite (~0.4 ms a kernel arg): the
    # template's view (below what UOp.buffer looks through) lies where this one does
    while b.op in _BUFFER_THROUGH: b, v = b.src[0], v.src[0]
    if (b is not b.base or b.op is Ops.BITCAST) and v not in buffers:   # the memory planner's intermediates are BITCASTs of a shared buffer
      # kept with the view's size: v is b on other buffers, of b's shape
      if (cv:=t.views.get(b, False)) is False: cv = t.views[b] = (b.contiguous_view(), prod(b.max_shape))
      if cv[0] is not None: buffers[v] = subs[cv[0][0].base].buffer.view(cv[1], v.dtype, cv[0][1]*cv[0][0].dtype.itemsize)
    return ret
  return t.linear.replace(src=tuple(c.replace(src=(c.src[0],)+tuple(arg(b) for b in c.src[1:])) for c in t.linear.src))

def make_launches(linear:UOp) -> tuple[Launch, ...]|None:
  """the kept schedule's kernels as launches; None where one needs exec_kernel (a Variable, a bound one, several devices)"""
  ret: list[Launch] = []
  for c in linear.src:
    if (ast:=c.src[0]).op is not Ops.PROGRAM or ast.arg.vars or any(s.is_bound_var for s in c.src[1:]) or not isinstance(c.src[1].device, str):
      return None
    est = estimate_uop(c)
    ret.append(Launch(get_runtime(c.src[1].device, ast), c.src[1].device, tuple(ast.arg.globals), *ast.arg.launch_dims({}), ast.arg.vals({}),
                      sym_infer(est.ops, {}), sym_infer(est.mem, {})))
  return tuple(ret)

@dataclass(frozen=True)
class Plan:
  """where the Buffers of a kept schedule's kernels come from, so a hit launches it without building its linear (instantiate_linear,
  ~0.08 ms of bench W6's eager call) or asking UOp.buffer of each kernel arg: per kernel global, (CALL arg j or intermediate k, its view)"""
  fresh: tuple[tuple[str, int, DType], ...]                                       # per intermediate: what UOp.buffer allocates for it
  where: tuple[tuple[tuple[bool, int, tuple[int, DType, int]|None], ...], ...]   # per kernel, per global: (intermediate?, index, view)

def make_plan(t:CallTemplate) -> Plan|None:
  """t's kept schedule as a Plan: each kernel global through what UOp.buffer looks through to a CALL arg's placeholder or an intermediate
  BUFFER, or to a view of one at its place (UOp.buffer's); None where one is something else"""
  assert t.linear is not None and t.launches is not None
  arg_index, fresh = {p:j for j,p in enumerate(t.placeholders)}, {}
  where = []
  for c, l in zip(t.linear.src, t.launches):
    kernel = []
    for i in l.globals:
      b, view = c.src[1+i], None
      while b.op in _BUFFER_THROUGH: b = b.src[0]
      if b is not b.base or b.op is Ops.BITCAST:
        if (cv:=b.contiguous_view()) is None: return None
        view, b = (prod(b.max_shape), b.dtype, cv[1]*cv[0].dtype.itemsize), cv[0].base
      if b.op is not Ops.BUFFER or not isinstance(b.device, str): return None
      if b in arg_index: kernel.append((False, arg_index[b], view))
      else: kernel.append((True, fresh.setdefault(b, len(fresh)), view))
    where.append(tuple(kernel))
  return Plan(tuple((b.device, b.max_numel(), b.dtype) for b in fresh), tuple(where))

def plan_buffers(plan:Plan, args:tuple[UOp, ...], new_args:tuple[int|NewBuffer, ...]) -> list[list[Buffer]]:
  """the Buffers each kernel of a kept schedule runs on, for a realize whose CALL args are `args`: the args' own (UOp.buffer, where the
  realized Tensors find them: a new one made here as UOp.buffer makes it, without its ~10 us) and new intermediates, and views of those,
  each made once"""
  argbufs: dict[int, Any] = {}
  for j,(u,a) in enumerate(zip(args, new_args)):
    if isinstance(a, NewBuffer) and u not in buffers: buffers[u] = argbufs[j] = Buffer(a.device, a.size, u.dtype).ref(1)
  fresh = [Buffer(d, n, dt).ref(1) for d,n,dt in plan.fresh]
  views: dict[tuple, Buffer] = {}
  ret = []
  for kernel in plan.where:
    bufs = []
    for spec in kernel:
      inter, j, view = spec
      if inter: b = fresh[j]
      elif (b:=argbufs.get(j)) is None: b = argbufs[j] = args[j].buffer
      if view is not None and (b:=views.get(spec)) is None: b = views[spec] = (fresh[j] if inter else argbufs[j]).view(*view)
      bufs.append(b)
    ret.append(bufs)
  return ret

def check_plan(got:list[list[Buffer]], linear:UOp, launches:tuple[Launch, ...]) -> None:
  """TEMPLATE_CHECK: a plan's Buffers are those the instantiated linear's args give (UOp.buffer), an intermediate one for one"""
  bases: dict[int, Buffer] = {}
  back: dict[int, Buffer] = {}
  for c, l, bufs in zip(linear.src, launches, got, strict=True):
    for i, g in zip(l.globals, bufs, strict=True):
      w = c.src[1+i].buffer
      if (g.device, g.size, g.dtype, g.offset) != (w.device, w.size, w.dtype, w.offset) or bases.setdefault(id(g.base), w.base) is not w.base \
         or back.setdefault(id(w.base), g.base) is not g.base:
        raise AssertionError(f"a kept schedule's kernel {c.src[0].arg.name}: its plan's buffer {g} isn't the linear's {w}")

def launch(launches:tuple[Launch, ...], bufs:list[list[Buffer]], update_stats:bool) -> None:
  """run_linear of a kept schedule with no Variables on each kernel's Buffers: exec_kernel's launch and track_stats's counters, no DEBUG
  lines"""
  for l, kbufs in zip(launches, bufs):
    if not all(isinstance(b, Buffer) for b in kbufs): raise RuntimeError(f"a kept schedule's kernel on {l.device} is on several devices")
    et = l.runtime(*[b.ensure_allocated().get_buf(l.device) for b in kbufs], global_size=l.global_size, local_size=l.local_size, vals=l.vals,
                   wait=False, timeout=None)
    if update_stats:
      GlobalCounters.kernel_count += 1
      GlobalCounters.global_ops += l.ops
      GlobalCounters.global_mem += l.mem
      if et is not None: GlobalCounters.time_sum_s += et

def _schedule_kept() -> bool:
  # DEBUG prints what scheduling does, BEAM, VALIDATE_WITH_CPU and HCQ2 change how the linear compiles, a TinyJit capture takes the linear
  return not (VIZ or DEBUG >= 1 or BEAM >= 1 or VALIDATE_WITH_CPU or getenv("HCQ2") or not SCACHE or (CAPTURING and len(capturing)))

def _apply_becomes(becomes_map:dict[UOp, UOp], apply_map_to_tensors:Callable[[dict[UOp, UOp], str], None]) -> None:
  """_apply_map_to_tensors(becomes_map): every Tensor on a node of the map now on what the node becomes. Where each such Tensor is a key
  of the map (the realized Tensors themselves, an eager call's outputs), that is the map's value, with no graph_rewrite of them all
  (~0.1 ms in bench W6); a Tensor built on a key (a view of one, an op after it) takes the rewrite"""
  from tinygrad.tensor import all_tensors, _realize_undo
  in_map: dict[UOp, bool] = dict.fromkeys(becomes_map, True)   # a Tensor on a key isn't walked (the realized ones: their whole graph)
  def visitor(node:UOp) -> bool: return any(in_map.get(s, False) for s in node.src)
  touched = [t for tref in list(all_tensors) if (t:=tref()) is not None and t.uop.topovisit(visitor, in_map)]
  if not (fast:=all(t.uop in becomes_map for t in touched)) or TEMPLATE_CHECK:
    want = {t: becomes_map[t.uop] for t in touched} if fast else {}
    apply_map_to_tensors(becomes_map, "buffers")
    if want: check_hit([t.uop for t in want], list(want.values()), "a realize's Tensors")
    return
  for t in touched:
    if (new:=becomes_map[t.uop]) is t.uop: continue
    if _realize_undo: _realize_undo[-1].append((t, t.uop))
    t.uop = new

# *** a realize of a vmap call's outputs: the scope's templates built them (batching.batch_scope keeps (template, leaves) on each, BUILT_FROM),
# so the realize's structure is a function of those templates and of the leaves, which are buffers: kept per those, a realize of them
# needs no walk of the graph (graph_structure, 0.07 ms of bench W6's eager call)

@dataclass(frozen=True)
class FromBatch:
  batch: tuple                 # the scope templates that built the realized Tensors, held (their ids are the key)
  key: tuple                   # the realize's structure (graph_structure's key)
  call: CallTemplate
  inputs: tuple[int, ...]      # per input buffer of the realize, its place among the scope's leaves
  becoming: tuple[int, ...]    # per node of call.becomes, the place of the realized Tensor on it

_LEAF_KEPT = "_callify_leaf"   # where a scope's leaf keeps its own structure (its walk's key, numbered, and buffers), False where it isn't kept
_leaf_keys, _leaf_numbers = KeptTemplates(4096), itertools.count()   # a number is never given twice: a key dropped comes back as a new one
def _leaf_structure(u:UOp) -> tuple[int, tuple[UOp, ...]]|bool:
  """a scope's leaf as graph_structure walks it, kept as the leaf's: an eager call's closed-over values (a weight's transpose, its
  gradient's masks) are the very UOps each call, only a new input's view is walked anew. The key by its number: hashed once"""
  if (ret:=u.__dict__.get(_LEAF_KEPT)) is None:
    if (walk:=Structure()).walk(u, _PLAIN_OPS, _input):
      if (n:=_leaf_keys.get(key:=tuple(walk.key))) is None: _leaf_keys.keep(key, n:=next(_leaf_numbers))
      ret = (n, tuple(walk.leaves))
    else: ret = False
    u.__dict__[_LEAF_KEPT] = ret
  return ret

def _built_from(tensors:list) -> tuple[tuple, list, list[UOp]]|None:
  """the key of Tensors that one vmap scope's templates built on leaves a kept graph may read: (the templates' ids, each leaf's own
  structure, which of their buffers are the same); with the templates and the buffers"""
  batch, leaves = [], None
  for x in tensors:
    if (b:=x.uop.__dict__.get(BUILT_FROM)) is None or (leaves is not None and b[1] is not leaves): return None
    batch.append(b[0])
    leaves = b[1]
  if leaves is None: return None
  keys, bufs, same = [], {}, []
  for u in leaves:
    if (ls:=_leaf_structure(u)) is False: return None
    keys.append(ls[0])
    same.extend([bufs.setdefault(b, len(bufs)) for b in ls[1]])
  return (tuple([id(b) for b in batch]), tuple(keys), tuple(same)), batch, list(bufs)

_from_batch = KeptTemplates(4096)
def _keep_from_batch(built:tuple[tuple, list, list[UOp]], tensors:list, t:CallTemplate, key:tuple, nodes:list[UOp], inputs:list[UOp]) -> None:
  """what a realize from the templates took, per those templates: where its inputs (among the leaves' buffers) and the nodes of its
  CALL's map are"""
  leaf_place, tensor_place = {u:i for i,u in enumerate(built[2])}, {}
  for i,x in enumerate(tensors): tensor_place.setdefault(x.uop, i)
  ins, becoming = [leaf_place.get(u) for u in inputs], [tensor_place.get(nodes[i]) for i,_ in t.becomes]
  if None not in ins and None not in becoming: _from_batch.keep(built[0], FromBatch(tuple(built[1]), key, t, tuple(ins), tuple(becoming)))

def _from_built(tensors:list) -> tuple[CallTemplate, list[UOp], list[UOp]]|None:
  """a kept realize of Tensors the same scope templates built: its template, the nodes of its CALL's map and the input buffers; else
  None, and a realize of such Tensors that walks the graph keeps what it finds"""
  if (built:=_built_from(tensors)) is None: return None
  if (fb:=_from_batch.get(built[0])) is None or not all(a is b for a,b in zip(fb.batch, built[1])): return None
  inputs, becoming = [built[2][i] for i in fb.inputs], [tensors[i].uop for i in fb.becoming]
  if TEMPLATE_CHECK:   # what the walk finds
    key, nodes, want = cast(tuple, graph_structure(UOp.sink(*[x.uop for x in tensors])))
    if key != fb.key or want != inputs or [nodes[i] for i,_ in fb.call.becomes] != becoming:
      raise AssertionError("a realize from a vmap scope's templates: its structure isn't the walk's")
  return fb.call, becoming, inputs

def realize_from_template(tensors:list, update_stats:bool) -> bool:
  """realize the Tensors from a kept template, schedule and all; False where they take the long way (Tensor.linear_with_vars)"""
  if not _schedule_kept(): return False
  if (hit:=_from_built(tensors)) is not None:
    t = hit[0]
    ret, becomes_map = instantiate_on(*hit)
  else:
    if (structure:=graph_structure(UOp.sink(*[x.uop for x in tensors]))) is None: return False
    if (t:=_templates.get(key:=structure[0])) is None: return False
    ret, becomes_map = instantiate(t, *structure[1:])
    if (built:=_built_from(tensors)) is not None: _keep_from_batch(built, tensors, t, key, *structure[1:])
  from tinygrad.tensor import _apply_map_to_tensors, transform_to_call
  if TEMPLATE_CHECK: check_instantiated((ret, becomes_map), transform_to_call(UOp.sink(*[x.uop for x in tensors])))
  _apply_becomes(becomes_map, _apply_map_to_tensors)
  config = tuple(x.value for x in to_program_config)
  if t.linear is not None and t.linear_config == config:
    if t.plan is not None and not PROFILE:   # PROFILE records an event a kernel: exec_kernel and track_stats do that
      bufs = plan_buffers(t.plan, ret.src[1:], t.args)
      if TEMPLATE_CHECK:
        check_plan(bufs, instantiate_linear(t, ret.src[1:]), cast(tuple, t.launches))
        for u in ret.src[1:]:   # each new one as UOp.buffer makes it
          if (b:=buffers[u]).device != u.device or b.size != u.max_numel() or b.dtype != u.dtype: raise AssertionError(f"{b} for {u}")
      launch(cast(tuple, t.launches), bufs, update_stats)
      return True
    linear, var_vals = instantiate_linear(t, ret.src[1:]), {}
  else:
    with runs_now(): linear, var_vals = create_linear_with_vars(ret)
    linear = link_linear(compile_linear(linear, quick=True))
    # a linear of quick builds is not kept: the next realize lowers it again, which builds them in full (engine/first_tier.py)
    if not var_vals and not has_quick(linear):
      t.linear, t.linear_config = make_linear_template(linear, ret.src[1:], t.placeholders), config
      t.launches = None if t.linear is None else make_launches(t.linear)
      t.plan = None if t.launches is None else make_plan(t)
  if t.launches is not None and not var_vals and not PROFILE:
    launch(t.launches, [[c.src[1+i].buffer for i in l.globals] for c, l in zip(linear.src, t.launches)], update_stats)
  else:
    ctx = ExecContext(var_vals, (), update_stats)
    for call in linear.src: track_stats(ctx, call, perf_counter_us(), pm_exec.rewrite(call, ctx))
  return True
