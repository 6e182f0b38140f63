"""vmap for tinygrad: `vmap(fn)` runs a function written for ONE example over a batch, as one batched kernel.

`vmap` is built on the VMAPIN/VMAPOUT bracket (`Tensor.vmapin` / `Tensor.vmapout`): a scope is opened by `x.vmapin(varg)` and closed by
`y.vmapout(varg)`. A varg has one entry per axis: a RANGE for a mapped (batch) axis, `KEPT` for a kept axis
(0.14: `UOp.const(0, dtypes.weakint)`; 0.12: `UOp.const(dtypes.index, 0)`). On 0.14 (the default line) `Tensor.vmapout` rebuilds the scope
over the batch, one batching rule per op (tinygrad/batching.py); on 0.12 the scheduler turns the scope into a loop over the RANGE inside the
kernel. Either way the batch is a loop inside the kernels. `vmap_range` and `varg` build a bracket by hand, the same code on both lines.
"""
from __future__ import annotations
import contextlib, functools, gc, inspect, operator, os, traceback, weakref
from dataclasses import dataclass, field
from typing import Any, Callable
from tinygrad.dtype import dtypes
from tinygrad.device import Device
from tinygrad.uop.ops import UOp, Ops, GroupOp, AxisType, sint
from tinygrad.fork_line import LINE_012
from tinygrad.tensor import Tensor, is_numpy_ndarray   # tensor.py has it on both lines (0.12 imports it from helpers)
from tinygrad.pytree import tree_map, tree_leaves
from tinygrad.transform_state import TRANSFORMS, KEPT, on_device

def vmap_range(size:sint, axis_type:AxisType=AxisType.LOOP) -> UOp:
  """a fresh RANGE for one vmap scope (an id of its own: TRANSFORMS.fresh_range). LOOP runs the batch as a loop inside the kernels; OUTER
  (0.12 only: 0.14's AxisType has no OUTER) runs the scope once per index."""
  return TRANSFORMS.fresh_range(size, axis_type)

def varg(ndim:int, mapped:dict[int, UOp]) -> tuple[UOp, ...]:
  """the varg of `ndim` entries with the RANGE `mapped[i]` at axis i and `CONST(0)` everywhere else"""
  if bad:=[i for i in mapped if not -ndim <= i < ndim]: raise ValueError(f"axis {bad[0]} is out of range for {ndim} axes")
  mapped = {i % ndim: r for i, r in mapped.items()}
  return tuple(mapped.get(i, KEPT) for i in range(ndim))

# *** the scopes of a vmapped call ***

RANDOMNESS = ("error", "same", "different")

@dataclass
class _Scope:
  """one vmap scope: the batch of `size` examples runs as a LOOP RANGE, or, chunked, as an OUTER RANGE over chunks around a LOOP RANGE.
  A chunked vmap whose batch doesn't divide runs a second scope for the tail: the examples start:start+size of a batch of `batch`."""
  size: int
  ranges: tuple[UOp, ...]   # (loop,) or (outer over chunks, loop in a chunk)
  randomness: str
  start: sint               # an int, or a bound Variable (a chunk's start on 0.14)
  batch: int
  took: list = field(default_factory=list)   # (weakref, old UOp) of the Tensors outside the scope that took a per-example value of it
  devices: tuple[str, ...]|None = None       # the devices of a batch sharded on its mapped axis

  def enter(self, x:Tensor, axis:int) -> Tensor:
    """one example of x, whose axis `axis` is this scope's batch"""
    if len(self.ranges) == 2: x = x.reshape(x.shape[:axis] + tuple(r.vmax+1 for r in self.ranges) + x.shape[axis+1:])
    return x.vmapin(varg(x.ndim, {axis+i: r for i,r in enumerate(self.ranges)}))

  def enter_from_batch(self, x:Tensor, axis:int) -> Tensor:
    """one example of x, whose axis `axis` is the whole batch: this scope's examples start:start+size of it, entered"""
    if self.size != self.batch: x = x.shrink(tuple((self.start, self.start+self.size) if i == axis else None for i in range(x.ndim)))
    return self.enter(x, axis)

  def exit(self, y:Tensor, axis:int) -> Tensor:
    """the batch of y, one example, with the batch axis at `axis`"""
    y = y.vmapout(varg(y.ndim+len(self.ranges), {axis+i: r for i,r in enumerate(self.ranges)}))
    return y.reshape(y.shape[:axis] + (self.size,) + y.shape[axis+len(self.ranges):]) if len(self.ranges) == 2 else y

def _record_taken_example(t:Tensor, v:Tensor):
  """t (no buffer, outside a scope) takes v, a per-example value: fine for a Tensor made in the function, refused if it outlives it"""
  for s in TRANSFORMS.vmap_scopes:
    if any(r in v.uop.ranges and r not in t.uop.ranges for r in s.ranges): s.took.append((weakref.ref(t), t.uop))

def _restore_old_values(took:list) -> list[Tensor]:
  """the Tensors of `took` still alive, with their old values back"""
  for t, old in (alive:=[(t, old) for ref, old in took if (t:=ref()) is not None]): t.uop = old
  return [t for t,_ in alive]

def _refuse_escaped(scope:_Scope):
  """the Tensors that took a per-example value and are still alive once the function and its outputs are done with were closed over:
  every example would write them. Give them their old value back and raise"""
  if not any(ref() is not None for ref,_ in scope.took): return
  gc.collect()   # a local Tensor kept alive only by a reference cycle isn't an escape
  if not (bad:=_restore_old_values(scope.took)): return
  raise RuntimeError(f"vmap: a Tensor that outlives the vmapped function (shape {bad[0].shape}: closed over, like a module's running "
                     "statistics, or stored outside it) was given a value that depends on the example (assign, setitem, +=): every example "
                     "would write it. Return the per-example value from the function instead, or update the Tensor outside the vmap")

def _rand_in_scope(shape:tuple[int, ...], **kwargs) -> Tensor|None:
  """Tensor.rand inside vmapped functions: refused ("error"), one draw for every example ("same"), or a draw per example ("different")"""
  if not TRANSFORMS.vmap_scopes: return None
  if any(s.randomness == "error" for s in TRANSFORMS.vmap_scopes):
    raise RuntimeError("vmap: random numbers (Tensor.rand/randn/randint/dropout, ...) inside a vmapped function need a randomness mode: "
                       "vmap(fn, randomness='same') shares one draw across the batch, randomness='different' draws per example")
  different = [s for s in TRANSFORMS.vmap_scopes if s.randomness == "different"]
  sharded = [s for s in TRANSFORMS.vmap_scopes if s.devices is not None]
  if not different and not _draws and not sharded: return None
  if (replay:=next((d for d in _draws if d.replaying), None)) is not None and replay.pos < len(replay.drawn): ret = replay.drawn[replay.pos]
  else:
    TRANSFORMS.rand_hook = None
    try:
      # the draws of every example of the whole batch, taken outside the scopes; each scope takes its examples, then one of them
      ret = Tensor.rand(*[s.batch for s in different], *shape, **kwargs)
      # with a batch sharded on several devices, its examples' draws are sharded with them, and a draw they share is on each device
      if sharded: ret = ret.to(sharded[0].devices) if (k:=next((i for i,d in enumerate(different) if d is sharded[0]), None)) is None else \
        ret.shard(sharded[0].devices, axis=k)
    finally: TRANSFORMS.rand_hook = _rand_in_scope
  if replay is not None: replay.pos += 1
  for d in _draws:
    if not d.replaying: d.drawn.append(ret)
  for s in different: ret = s.enter_from_batch(ret, 0)
  return ret

@dataclass
class _Draws:
  """the random draws of a chunked vmap's chunks, taken again by its tail: the tail's examples get the draws of the same batch (one
  shared draw with "same", their own examples' with "different"). The outermost replaying vmap decides: it retraces all inside it."""
  drawn: list[Tensor]
  replaying: bool = False
  pos: int = 0

# the draws of the chunked vmaps being traced, outermost first
_draws: list[_Draws] = []

@contextlib.contextmanager
def _open_scope(scope:_Scope):
  """while fn runs on the examples of `scope`: the scope is open, Tensor.rand and assign ask it (rand_hook, took_example_hook), and a
  failed call leaves what it wrote to intact"""
  TRANSFORMS.vmap_scopes.append(scope)
  prev_hook, TRANSFORMS.rand_hook = TRANSFORMS.rand_hook, _rand_in_scope
  TRANSFORMS.took_example_hook = _record_taken_example
  try: yield
  except BaseException:
    _restore_old_values(scope.took)
    raise
  finally:
    TRANSFORMS.vmap_scopes.pop()
    TRANSFORMS.rand_hook = prev_hook
    if not TRANSFORMS.vmap_scopes: TRANSFORMS.took_example_hook = None

# *** vmap, in the steps of torch's vmap_impl: check the options, process the batched inputs, then a flat or a chunked vmap ***

def _check_options(fn, in_axes, axis_size, chunk_size, randomness):
  """vmap's own arguments, checked when it wraps fn"""
  if not callable(fn): raise TypeError(f"vmap expects a function, got {fn!r}")
  if not (in_axes is None or isinstance(in_axes, (int, tuple, list))) or isinstance(in_axes, bool):
    raise TypeError(f"vmap in_axes must be an int, None, or a tuple/list with an entry per positional argument, got {in_axes!r}")
  if randomness not in RANDOMNESS: raise ValueError(f"vmap randomness must be one of {RANDOMNESS}, got {randomness!r}")
  # numpy's integers are ints here, as JAX takes them
  if chunk_size is not None and ((n:=_as_int(chunk_size)) is None or n < 1):
    raise ValueError(f"vmap chunk_size must be a positive int or None, got {chunk_size!r}")
  if axis_size is not None and ((n:=_as_int(axis_size)) is None or n < 0):
    raise ValueError(f"vmap axis_size must be a non-negative int or None, got {axis_size!r}")
  return None if axis_size is None else _as_int(axis_size), None if chunk_size is None else _as_int(chunk_size)

def _as_int(i) -> int|None:
  """i as an int when it is one (numpy's integers too, as JAX takes them), else None"""
  try: return None if isinstance(i, bool) else operator.index(i)
  except TypeError: return None

def _arg_names(fn:Callable) -> Callable[[int], list[str]]:
  """the names errors give the positional arguments of fn: `argument x` from its signature, `args[i]` past it"""
  try: params = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  except (TypeError, ValueError): params = []
  return lambda n: [f"argument {p.name}" for p in params[:n]] + [f"args[{i}]" for i in range(len(params), n)]

def _from_numpy(x):
  """a numpy array or numpy scalar (np.float64 is a float, np.float32 isn't) as a Tensor of its dtype, anything else as it is"""
  if type(x).__module__ == "numpy" and not is_numpy_ndarray(x) and hasattr(x, "__array__"): x = x.__array__()
  return Tensor(x) if is_numpy_ndarray(x) else x

def _arrays_to_tensors(tree):
  """numpy arrays and scalars among the arguments become Tensors, as jax.vmap takes them as arrays: mapped by in_axes like Tensors"""
  return tree_map(lambda leaf, _spec, _path: _from_numpy(leaf), tree)

@dataclass(frozen=True)
class _BatchedInputs:
  """the arguments of a vmapped call (numpy arrays as Tensors), the batch axis of each of their leaves (None: not mapped), the batch
  size, and the devices of a batch sharded on its mapped axis"""
  args: tuple
  kwargs: dict[str, Any]
  arg_axes: list          # a tree of axes for each positional argument
  kwarg_axes: dict[str, Any]
  size: int
  devices: tuple[str, ...]|None
  device: str|tuple[str, ...]   # where a constant output goes (on_device): the batch's devices, else a mapped input's, else the default

def _batch_size(mapped:list[tuple[str, int, Tensor]], axis_size:int|None) -> int:
  """the size of the batch: the mapped axes of the inputs and axis_size must agree on it"""
  sizes = [(path, axis, x.shape[axis]) for path,axis,x in mapped]
  if len(set(s for _,_,s in sizes) | ({axis_size} if axis_size is not None else set())) > 1:
    raise ValueError("vmap got inconsistent sizes for array axes to be mapped: " + ", ".join(f"axis {a} of {p} had size {s}" for p,a,s in sizes) +
                     (f", but axis_size={axis_size}" if axis_size is not None else ""))
  if not sizes and axis_size is None:
    raise ValueError("vmap must have at least one non-None value in in_axes, or an axis_size, to know the batch size")
  n = sizes[0][2] if sizes else axis_size
  assert isinstance(n, int), f"vmap needs a concrete batch size, got {n}"
  return n

def _batch_devices(mapped:list[tuple[str, int, Tensor]]) -> tuple[str, ...]|None:
  """the devices of a batch sharded on its mapped axis, which all its mapped inputs must be sharded on; None for a batch on one device"""
  sharded = [x.device for _,_,x in mapped if isinstance(x.device, tuple)]
  if sharded and (single:=[(path, x.device) for path,_,x in mapped if isinstance(x.device, str)]):
    raise RuntimeError(f"vmap over a sharded batch: an input mapped with it is on {single[0][1]}, not on the batch's devices {sharded[0]}: "
                       f"{single[0][0]} (shard it on its mapped axis)")
  if len(set(sharded)) > 1:
    raise RuntimeError(f"vmap over a sharded batch: its mapped inputs are sharded on different devices, {sharded[0]} and "
                       f"{next(d for d in sharded if d != sharded[0])}: shard them on the same devices")
  return sharded[0] if sharded else None

def _process_batched_inputs(args:tuple, kwargs:dict[str, Any], in_axes, axis_size:int|None, names:list[str]) -> _BatchedInputs:
  """in_axes over the arguments: the batch axis of every leaf, checked against its rank, and the batch size and devices they agree on"""
  # Tensors as the arguments, each with an int or None of in_axes: what the tree_maps below give, a leaf each (~3 us a tree_map)
  flat = not kwargs and all(type(a) is Tensor for a in args) and \
    all(a is None or type(a) is int for a in (in_axes if isinstance(in_axes, (tuple, list)) and len(in_axes) == len(args) else (in_axes,)))
  if not flat: args, kwargs = _arrays_to_tensors(args), {k: _arrays_to_tensors(v) for k,v in kwargs.items()}
  if isinstance(in_axes, (tuple, list)) and len(in_axes) != len(args):
    raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding to the positional arguments passed to the "
                     f"function, but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
  mapped: list[tuple[str, int, Tensor]] = []   # (path, batch axis, leaf) of every mapped leaf
  def batch_axis(x, axis:int|None, path:str) -> int|None:
    if axis is None or not isinstance(x, Tensor): return None
    if not -x.ndim <= axis < x.ndim:
      raise ValueError(f"vmap was requested to map {path} along axis {axis}, which implies that its rank should be at least "
                       f"{axis+1 if axis >= 0 else -axis}, but is only {x.ndim} (its shape is {x.shape})")
    mapped.append((path, axis % x.ndim, x))
    return axis % x.ndim
  if flat: arg_axes = [batch_axis(a, in_axes[i] if isinstance(in_axes, (tuple, list)) else in_axes, names[i]) for i,a in enumerate(args)]
  else: arg_axes = [tree_map(batch_axis, a, in_axes[i] if isinstance(in_axes, (tuple, list)) else in_axes, names[i], "vmap in_axes")
                    for i,a in enumerate(args)]
  kwarg_axes = {k: tree_map(batch_axis, v, 0, f"argument {k}", "vmap in_axes") for k,v in kwargs.items()}
  devices = _batch_devices(mapped)
  device = devices or next((x.device for _,_,x in mapped if x.device is not None), None) or \
    next((x.device for x in tree_leaves([args, kwargs]) if isinstance(x, Tensor) and x.device is not None), Device.DEFAULT)
  return _BatchedInputs(args, kwargs, arg_axes, kwarg_axes, _batch_size(mapped, axis_size), devices, device)

def _is_filled_const(u:UOp) -> bool:
  """a fresh buffer filled with a value made of constants (0.14's Tensor.ones/full: AFTER(BUFFER, STORE(BUFFER, const)), not yet realized)"""
  return u.op is Ops.AFTER and len(u.src) == 2 and u.src[0].base.op is Ops.BUFFER and u.src[1].op is Ops.STORE and u.src[1].src[0] is u.src[0] \
    and not getattr(u, "is_bound_var", False) \
    and not any(x.op in (Ops.BUFFER, Ops.COPY) for x in u.src[1].src[1].toposort())

_WRITTEN_BY = (Ops.STORE, Ops.AFTER, Ops.COPY, Ops.CONTIGUOUS, Ops.MSELECT, Ops.MSTACK)
# a new value, never a view of its sources: what is done to it (made contiguous, written) isn't done to the constant it read
_NEW_VALUE = GroupOp.ALU | {Ops.CAST, Ops.REDUCE_AXIS if LINE_012 else Ops.REDUCE}
def _filled_consts(roots:list[UOp]) -> dict[UOp, UOp]|None:
  """what _filled_consts_as_values makes of each node of the roots' graph (fn's outputs together: one toposort, not one an output), or
  None where a constant is written somewhere in it, which each output then decides alone"""
  if not LINE_012:   # results of one gradient template whose graph has no AFTER (its leaves, buffers and RANGEs, have none): none filled
    from tinygrad.structure_template import built_by, template_has
    if (b:=built_by(roots[0])) is not None and all((c:=built_by(r)) is not None and c[0] is b[0] and c[1] is b[1] for r in roots) \
       and not template_has(b[0], Ops.AFTER): return {}
  topo = (roots[0] if len(roots) == 1 else UOp.sink(*roots)).toposort()
  if not (filled:=[u for u in topo if _is_filled_const(u)]): return {}
  consumers: dict[UOp, list[UOp]] = {}
  for x in topo:
    for s in x.src: consumers.setdefault(s, []).append(x)
  # written[x]: a consumer path from x reaches a write (srcs last, so one pass: a DFS from each constant walked the graph once each)
  written: dict[UOp, bool] = {}
  for x in reversed(topo):
    # stored into another buffer (a clone of it) is read; stored into is written again
    written[x] = any(c.op in _WRITTEN_BY or written[c] for c in consumers.get(x, ())
                     if not (c.op is Ops.STORE and c.src[0] is not x) and c.op not in _NEW_VALUE)
  if any(written[u] for u in filled): return None
  new = {u: u.src[1].src[1].cast(u.dtype) for u in filled}
  # the graph with those read as values: one pass in topo's order (a substitute's graph_rewrite cost ~0.3 ms a call in bench W4)
  for x in topo:
    if x not in new and any(s in new for s in x.src): new[x] = x.replace(src=tuple(new.get(s, s) for s in x.src))
  return new

def _filled_consts_as_values(y:Tensor, shared:tuple[dict[UOp, UOp]|None, set[UOp]]|None=None) -> Tensor:
  """y with each constant it made in a fresh buffer (0.14's Tensor.full/ones/zeros/full_like: a kernel of its own, on one device) read as
  the value itself where it is only read: `x.full_like(0.0)` in a vmapped function is a const in the batched kernels, not a kernel, and
  has no device (a sharded batch). A buffer that is written again (setitem, rand's counter), copied or made contiguous keeps its kernel.
  `shared`: _filled_consts of fn's outputs and those outputs"""
  new = shared[0] if shared is not None and y.uop in shared[1] else _filled_consts([y.uop])
  if new is None: return _filled_consts_one_by_one(y)
  return y if (u:=new.get(y.uop)) is None else Tensor(u)

def _filled_consts_one_by_one(y:Tensor) -> Tensor:
  """_filled_consts_as_values where some constant is written: each one that is only read is read as its value"""
  topo = y.uop.toposort()
  if not (filled:=[u for u in topo if _is_filled_const(u)]): return y
  consumers: dict[UOp, list[UOp]] = {}
  for x in topo:
    for s in x.src: consumers.setdefault(s, []).append(x)
  def only_read(f:UOp) -> bool:
    stack, seen = [f], {f}
    while stack:
      x = stack.pop()
      for c in consumers.get(x, []):
        if (c.op is Ops.STORE and c.src[0] is not x) or c.op in _NEW_VALUE: continue
        if c.op in _WRITTEN_BY: return False
        if c not in seen: seen.add(c); stack.append(c)
    return True
  if not (new:={u: u.src[1].src[1].cast(u.dtype) for u in filled if only_read(u)}): return y
  for x in topo:
    if x not in new and any(s in new for s in x.src): new[x] = x.replace(src=tuple(new.get(s, s) for s in x.src))
  return Tensor(new.get(y.uop, y.uop))

def _check_on_devices(y:Tensor, devices:tuple[str, ...], path:str):
  """a Tensor on one device used with a sharded batch fails deep in the scheduler: name it here (consts and aranges are fine, buffers not)"""
  def on_many(u:UOp) -> bool: return u.op in (Ops.MSTACK, Ops.MSELECT) or (u.op is Ops.COPY and isinstance(u.device, tuple))
  if single:=[u for u in y.uop.toposort(gate=lambda u: not on_many(u)) if u.op in (Ops.BUFFER, Ops.COPY) and isinstance(u.device, str)]:
    raise ValueError(f"vmap over a batch sharded on {devices}: {path} uses a Tensor on {single[-1].device} of shape {single[-1].shape} "
                     f"(closed over, or made from data inside the function): put it on the batch's devices with .to({devices}) or .shard")

def _call_on_examples(fn:Callable, inputs:_BatchedInputs, scope:_Scope):
  """fn on one example inside `scope`: a mapped leaf enters it (the scope's examples of it), the others are passed as they are"""
  def example(x, axis:int|None, _path): return x if axis is None else scope.enter_from_batch(x, axis)
  with _open_scope(scope):
    try: return fn(*[tree_map(example, a, axes) for a,axes in zip(inputs.args, inputs.arg_axes)],
                   **{k: tree_map(example, v, inputs.kwarg_axes[k]) for k,v in inputs.kwargs.items()})
    except RuntimeError as e:
      if not str(e).startswith("can't read a tensor inside a vmap scope") or (op:=_reading_op(e)) is None: raise
      raise RuntimeError(f"vmap: Tensor.{op} reads the value of one example inside the vmapped function, where it isn't computed yet: "
                         f"{_READ_WHY.get(op, 'return the value from fn and read it after')} ({e})") from e

# Tensor methods that read values, and why that can't be batched (a shape or a Python value that depends on the data)
_READ_WHY = {
  "masked_select": "its output has as many elements as the mask has True, a shape that depends on each example's data, which vmap can't "
                   "batch (as in JAX); keep the shape with x.masked_fill(mask.logical_not(), 0) or mask.where(x, 0)" +
                   ("" if LINE_012 else ", or pass size=N (fill_value pads), as jnp.nonzero's size= under jax.vmap"),
  "nonzero": "its output has a row for each nonzero element, a shape that depends on each example's data, which vmap can't batch (as in "
             "JAX)" + ("" if LINE_012 else "; pass size=N (fill_value pads), as jnp.nonzero's size= under jax.vmap"),
  "one_hot": "without num_classes it reads the number of classes from the data; pass num_classes",
  "allclose": "it returns a Python bool; isclose(...).all() is a Tensor of each example's answer"}

def _reading_op(e:BaseException) -> str|None:
  """the Tensor method fn called that raised e by reading a value: the outermost frame of the traceback in tinygrad's Tensor code"""
  for f, _ in traceback.walk_tb(e.__traceback__):
    name, file = f.f_code.co_name, f.f_code.co_filename
    # tensor.py's metadata wrapper wraps every method: the method is the frame after it
    if (file.endswith(os.path.join("tinygrad", "tensor.py")) or os.path.join("tinygrad", "mixin", "") in file) and name != "wrapper" and \
       not name.startswith("_"): return name
  return None

def _batch_of_output(scope:_Scope, y, axis:int|None, path:str, filled:tuple[dict[UOp, UOp]|None, set[UOp]]|None=None):
  """the batch of y, an output leaf of fn (one example), with its batch axis at `axis`, or with axis None y itself, which mustn't depend
  on the batch. None is an empty subtree (as in JAX); a Python number, a numpy array or a numpy scalar doesn't depend on the batch"""
  if y is None: return None
  if isinstance(y:=_from_numpy(y), (int, float)): y = Tensor(y)
  if not isinstance(y, Tensor):
    raise TypeError(f"vmap: fn must return a Tensor, a Python number, None or a tuple/list/dict of those, got {type(y).__name__} at {path}")
  if axis is None:
    if any(r in y.uop.ranges for r in scope.ranges):
      raise ValueError(f"vmap has mapped output but out_axes is None for {path}: it depends on the batch")
    return y
  y = _filled_consts_as_values(y, filled)
  if scope.devices is not None: _check_on_devices(y, scope.devices, path)
  if not -(y.ndim+1) <= axis <= y.ndim:
    raise ValueError(f"vmap out_axes {axis} for {path} is out of range: the batched output has {y.ndim+1} axes (shape {(scope.batch,)+y.shape})")
  return scope.exit(y, axis % (y.ndim+1))

def _outputs_share_batching():
  """0.14's vmapout rebuilds its scope's graph over the batch (tinygrad/batching.py): fn's outputs share what they rebuilt. 0.12 lowers a
  scope in rangeify, for all its outputs at once"""
  if LINE_012: return contextlib.nullcontext()
  from tinygrad.batching import shared_batching
  return shared_batching()

def _flat_vmap(fn:Callable, inputs:_BatchedInputs, out_axes, scope:_Scope):
  """fn over the examples of `scope` at once: the inputs enter the scope, fn runs in it, and its outputs leave it at out_axes"""
  out = _call_on_examples(fn, inputs, scope)
  filled = (_filled_consts(roots), set(roots)) if (roots:=[t.uop for t in tree_leaves(out) if isinstance(t, Tensor)]) else None
  with _outputs_share_batching():
    ret = tree_map(functools.partial(_batch_of_output, scope, filled=filled), out, out_axes, "output", "vmap out_axes")
  del out   # fn's own output Tensors: the batch is ret, those are one example
  if scope.took: _refuse_escaped(scope)
  return ret

def _join_chunks(main, tails:list, out_axes):
  """the outputs of the first chunk(s) and of the later ones, joined on each leaf's batch axis (a leaf with out_axes None is main's)"""
  leaves = [iter(tree_leaves(t)) for t in tails]
  def join(m:Tensor, axis:int|None, _path) -> Tensor:
    ts = [next(t) for t in leaves]
    return m if axis is None or m is None else m.cat(*ts, dim=axis % m.ndim)
  return tree_map(join, main, out_axes, "output", "vmap out_axes")

def _chunk_by_chunk(fn:Callable, inputs:_BatchedInputs, out_axes, chunk_size:int, randomness:str):
  """chunks without OUTER ranges (tinygrad 0.14): a scope per chunk, each the examples start:start+chunk_size of the batch, whose
  outputs are joined; the later chunks replay the first one's random draws (each takes its own examples of them). A whole chunk's start
  is a Variable bound to its value: the chunks' kernels differ only in it, so they are one kernel each, compiled once (each CALL binds
  its chunk's start), however many chunks there are"""
  n = inputs.size
  start_var = UOp.variable(f"vmap_chunk_start{len(_draws)}", 0, n - chunk_size)   # one name per nesting depth of chunked vmaps
  _draws.append(draws:=_Draws([]))
  try:
    outs = []
    for start in range(0, n, chunk_size):
      draws.replaying, draws.pos = start > 0, 0
      size = min(chunk_size, n-start)
      outs.append(_flat_vmap(fn, inputs, out_axes, _Scope(size, (vmap_range(size),), randomness, start_var.bind(start) if size == chunk_size else start, n)))
  finally: _draws.pop()
  return _join_chunks(outs[0], outs[1:], out_axes)

def _chunked_vmap(fn:Callable, inputs:_BatchedInputs, out_axes, chunk_size:int, randomness:str):
  """fn over the batch `chunk_size` examples at a time: one scope runs the whole chunks (an OUTER range over them around a LOOP range in
  one), a second the tail of a batch that doesn't divide, with the same random draws; their outputs are joined"""
  if inputs.devices is not None:
    raise NotImplementedError(f"vmap chunk_size with a batch sharded on {inputs.devices}: each device runs its shard as one loop already, "
                              "drop chunk_size (or pass fewer examples per call)")
  if not LINE_012: return _chunk_by_chunk(fn, inputs, out_axes, chunk_size, randomness)
  n, (chunks, rest) = inputs.size, divmod(inputs.size, chunk_size)
  _draws.append(draws:=_Draws([]))
  try:
    chunked = _Scope(chunks*chunk_size, (vmap_range(chunks, AxisType.OUTER), vmap_range(chunk_size)), randomness, 0, n)
    main = _flat_vmap(fn, inputs, out_axes, chunked)
    if rest == 0: return main
    draws.replaying = True
    tail = _flat_vmap(fn, inputs, out_axes, _Scope(rest, (vmap_range(rest),), randomness, chunks*chunk_size, n))
  finally: _draws.pop()
  return _join_chunks(main, [tail], out_axes)

def vmap(fn:Callable|None=None, in_axes:int|None|tuple|list=0, out_axes:Any=0, axis_size:int|None=None, chunk_size:int|None=None,
         randomness:str="error") -> Callable:
  """
  Vectorizes `fn`, written for ONE example, over a batch: the returned function maps the axes `in_axes` of its arguments, runs `fn` on
  every example as one batched kernel (not a Python loop), and stacks the results at `out_axes`. JAX's semantics:

  - `in_axes`: an int or None (for every positional argument), or a tuple/list with an entry per positional argument; an entry is an int
    (the batch axis, negative counts from the end), None (not mapped: every example sees all of it) or a tuple/list/dict matching the
    argument's structure, where an int or None stands for a whole subtree. Keyword arguments are mapped over axis 0. Non-Tensor leaves
    (Python numbers, None) are passed to every example as they are.
  - `out_axes`: the same for the output of `fn` (a Tensor or a tuple/list/dict of them, nested); None only for outputs that don't depend
    on the batch. Negative axes count from the end of the batched output.
  - `axis_size`: the batch size, needed when no argument is mapped.
  - `chunk_size`: run the batch `chunk_size` examples at a time, so buffers realized inside `fn` hold `chunk_size` examples, not the whole
    batch. `chunk_size=1` is a sequential map, like `jax.lax.map`. On 0.14 each chunk is a scope of its own whose start is a bound
    Variable (its kernels compile once, each chunk binds its start), the outputs joined with cat; on 0.12 an OUTER range over the chunks
    runs around a loop inside each chunk. A batch that doesn't divide ends with a shorter chunk.
  - `randomness`: what Tensor.rand & co inside `fn` do: "error" (refuse), "same" (one draw for every example), "different" (a draw each).

  ```python exec="true" source="above" session="tensor" result="python"
  from tinygrad import vmap
  xs, w = Tensor.arange(6).reshape(3, 2), Tensor([10, 100])
  print(vmap(lambda x, w: (x * w).sum(), in_axes=(0, None))(xs, w).numpy())
  ```
  """
  if fn is None: return functools.partial(vmap, in_axes=in_axes, out_axes=out_axes, axis_size=axis_size, chunk_size=chunk_size, randomness=randomness)
  axis_size, chunk_size = _check_options(fn, in_axes, axis_size, chunk_size, randomness)
  arg_names = _arg_names(fn)
  @functools.wraps(fn)
  def vmapped(*args, **kwargs):
    inputs = _process_batched_inputs(args, kwargs, in_axes, axis_size, arg_names(len(args)))
    if inputs.size == 0 or chunk_size is None or chunk_size >= inputs.size:
      ret = _flat_vmap(fn, inputs, out_axes, _Scope(inputs.size, (vmap_range(inputs.size),), randomness, 0, inputs.size, devices=inputs.devices))
    else: ret = _chunked_vmap(fn, inputs, out_axes, chunk_size, randomness)
    return tree_map(lambda y, axis, _path: on_device(y, inputs.device, axis), ret, out_axes, "output", "vmap out_axes")
  return vmapped
