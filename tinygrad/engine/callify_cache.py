# transform_to_call for a tensor graph whose structure was seen before (the eager-cost topic hooks it into Tensor.linear_with_vars on the
# 0.14.0 line). An eager call builds the same graph again on new buffers, and transform_to_call's four graph rewrites cost 0.4-1.8 ms on
# bench's graphs of 15-70 nodes. What it returns is a function of the graph's structure: the CALL's body names no buffer (its inputs are
# PARAMs), its args are the graph's input buffers and new output buffers, and the map sends nodes of the graph to views of those. So it
# is kept per structure; a hit builds the CALL on this graph's input buffers and new output buffers, and maps this graph's nodes.
# Only plain computations are kept: a graph with assigns, copies, calls, bound Variables, bitcasts or several devices takes the long way.
from __future__ import annotations
from dataclasses import dataclass, replace
from typing import Any, Callable
from tinygrad.uop import Ops, GroupOp
from tinygrad.uop.ops import UOp
from tinygrad.dtype import AddrSpace, DType, dtypes
from tinygrad.helpers import VIZ

# the ops a kept graph may hold; transform_to_call only tags, makes CONTIGUOUS a store into a new buffer and drops DETACH there
_PLAIN_OPS = GroupOp.ALU | GroupOp.Movement | {Ops.CAST, Ops.CONST, Ops.STACK, Ops.REDUCE, Ops.BUFFER, Ops.CONTIGUOUS, Ops.DETACH,
                                               Ops.CONTIGUOUS_BACKWARD, Ops.SINK}
# where a host buffer or a file is read or written, transform_to_call makes copies and views of its own
_SPECIAL_DEVICES = ("DISK", "TINYFS", "NPY", "PYTHON")

@dataclass(frozen=True)
class NewBuffer:
  """a CALL arg that is a new buffer: what UOp.new_buffer needs"""
  device: str
  size: int
  dtype: DType

@dataclass(frozen=True)
class CallTemplate:
  body: UOp                             # the CALL's body: a SINK over PARAMs
  call_arg: Any
  args: tuple[int|NewBuffer, ...]       # per CALL arg: the index of a graph input buffer, or a new buffer
  placeholders: tuple[UOp, ...]        # per CALL arg, a BUFFER that stands for it in `becomes` (never allocated)
  becomes: tuple[tuple[int, UOp], ...]  # (index of a node in the graph's toposort, what it becomes: a view of placeholders)

def _rebuild(u:UOp, subs:dict[UOp, UOp]) -> UOp:
  """u with subs replaced (a view: a short chain of movement ops, so no graph_rewrite)"""
  if (ret:=subs.get(u)) is not None: return ret
  ret = subs[u] = u.replace(src=tuple(_rebuild(s, subs) for s in u.src)) if u.src else u
  return ret

def graph_structure(big_sink:UOp) -> tuple[tuple, list[UOp], list[UOp]]|None:
  """the graph's structure as a hashable key (every node but a buffer's number), its nodes in toposort order and its input buffers,
  or None for a graph that isn't kept"""
  index: dict[UOp, int] = {}
  key: list[tuple] = []
  inputs: list[UOp] = []
  for u in big_sink.toposort():
    if u.op not in _PLAIN_OPS: return None
    if u.op is Ops.BUFFER:
      if (a:=u.arg).addrspace is not AddrSpace.GLOBAL or a.vmin_vmax is not None or not isinstance(a.device, str) or \
         a.device.startswith(_SPECIAL_DEVICES) or u.src[0].op is not Ops.CONST: return None
      key.append((Ops.BUFFER, replace(a, slot=0), u.tag, index[u.src[0]]))
      inputs.append(u)
    else: key.append((u.op, u.dtype, u.arg, u.tag, tuple(index[s] for s in u.src)))
    index[u] = len(index)
  return tuple(key), list(index), inputs

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
    becomes.append((node_index[k], _rebuild(v, dict(placeholders))))
  return CallTemplate(ret.src[0], ret.arg, tuple(args), tuple(placeholders.values()), tuple(becomes))

def instantiate(t:CallTemplate, nodes:list[UOp], inputs:list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  args = tuple(inputs[a] if isinstance(a, int) else UOp.new_buffer(a.device, a.size, a.dtype) for a in t.args)
  subs = dict(zip(t.placeholders, args))
  return UOp(Ops.CALL, dtypes.void, (t.body,)+args, t.call_arg), {nodes[i]:_rebuild(v, subs) for i,v in t.becomes}

_templates: dict[tuple, CallTemplate|None] = {}
def cached_transform_to_call(big_sink:UOp, transform_to_call:Callable[[UOp], tuple[UOp, dict[UOp, UOp]]]) -> tuple[UOp, dict[UOp, UOp]]:
  if VIZ or (structure:=graph_structure(big_sink)) is None: return transform_to_call(big_sink)
  key, nodes, inputs = structure
  if key in _templates:
    if (t:=_templates[key]) is not None: return instantiate(t, nodes, inputs)
    return transform_to_call(big_sink)
  ret, becomes_map = transform_to_call(big_sink)
  _templates[key] = make_template(ret, becomes_map, nodes, inputs)
  return ret, becomes_map
