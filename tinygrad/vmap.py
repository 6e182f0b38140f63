"""vmap for tinygrad: `vmap(fn)` runs a function written for ONE example over a batch, as one batched kernel.

`vmap` is built on the VMAPIN/VMAPOUT bracket (`Tensor.vmapin` / `Tensor.vmapout`): a scope is opened by `x.vmapin(varg)` and closed by
`y.vmapout(varg)`. A varg has one entry per axis: a RANGE for a mapped (batch) axis, `UOp.const(dtypes.index, 0)` for a kept axis. The
scheduler turns the scope into a loop over the RANGE inside the kernel. `vmap_range` and `varg` are the helpers to build a bracket by hand.
"""
from __future__ import annotations
import functools, gc, inspect, itertools, weakref
from dataclasses import dataclass, field
from typing import Any, Callable
from tinygrad.dtype import dtypes
from tinygrad.helpers import is_numpy_ndarray
from tinygrad.uop.ops import UOp, Ops, AxisType, sint
from tinygrad.tensor import Tensor
import tinygrad.tensor

# every scope gets a RANGE id of its own, so nested and repeated scopes never alias. Negative, like upstream's outer world ranges.
_range_ids = itertools.count(-1, -1)
# vmap() takes its ids from far away, so they can't collide with a RANGE someone builds by hand (UOp.range(n, -1)). The schedule cache renames
# RANGEs before it keys a graph, so fresh ids on every call don't cost a re-schedule.
_vmap_range_ids = itertools.count(-(1 << 20), -1)

def vmap_range(size:sint, axis_type:AxisType=AxisType.LOOP) -> UOp:
  """a fresh RANGE for one vmap scope. LOOP runs the batch as a loop inside the kernels, OUTER runs the scope once per index."""
  return UOp.range(size, next(_range_ids), axis_type)

def varg(ndim:int, mapped:dict[int, UOp]) -> tuple[UOp, ...]:
  """the varg of `ndim` entries with the RANGE `mapped[i]` at axis i and `CONST(0)` everywhere else"""
  if bad:=[i for i in mapped if not -ndim <= i < ndim]: raise ValueError(f"axis {bad[0]} is out of range for {ndim} axes")
  mapped = {i % ndim: r for i, r in mapped.items()}
  return tuple(mapped.get(i, UOp.const(dtypes.index, 0)) for i in range(ndim))

# *** pytrees: tuples, lists and dicts of leaves ***

def _is_node(x) -> bool: return isinstance(x, (tuple, list, dict))
def _children(x) -> list[tuple[str, Any]]:
  return [(f"[{k!r}]", v) for k,v in x.items()] if isinstance(x, dict) else [(f"[{i}]", v) for i,v in enumerate(x)]
def _rebuild(like, values:list):
  if isinstance(like, dict):
    if type(like) is dict: return dict(zip(like.keys(), values))
    # an OrderedDict, a defaultdict (its default_factory), ...: copy() keeps the type and what its constructor would need
    ret = like.copy()
    ret.update(zip(like.keys(), values))
    return ret
  return type(like)(*values) if hasattr(like, "_fields") else type(like)(values)

def _tree_map(fn:Callable, tree, spec, path:str, what:str):
  """fn(leaf, spec_for_leaf, path) over the leaves of tree, with spec a tree prefix of it (an int or None stands for a whole subtree)"""
  if isinstance(spec, bool): raise TypeError(f"vmap {what} must be an int, None, or a (nested) tuple/list/dict of those, got {spec!r} for {path}")
  if spec is None or isinstance(spec, int): return _rebuild(tree, [_tree_map(fn, v, spec, path+k, what) for k,v in _children(tree)]) \
    if _is_node(tree) else fn(tree, spec, path)
  if not _is_node(spec): raise TypeError(f"vmap {what} entries must be an int, None, or a tuple/list/dict of those, got {spec!r} for {path}")
  if not _is_node(tree) or isinstance(tree, dict) != isinstance(spec, dict):
    raise ValueError(f"vmap {what} {spec!r} for {path} has a structure the value doesn't have: {path} is a {type(tree).__name__}")
  if isinstance(spec, dict) and set(spec) != set(tree):
    raise ValueError(f"vmap {what} for {path} has keys {sorted(map(str, spec))}, but the value has keys {sorted(map(str, tree))}")
  if not isinstance(spec, dict) and len(spec) != len(tree):
    raise ValueError(f"vmap {what} for {path} has {len(spec)} entries, but the value has {len(tree)}")
  specs = [spec[k] for k in tree] if isinstance(spec, dict) else list(spec)
  return _rebuild(tree, [_tree_map(fn, v, s, path+k, what) for (k,v),s in zip(_children(tree), specs)])

def _from_numpy(x):
  """a numpy array or numpy scalar (np.float64 is a float, np.float32 isn't) as a Tensor of its dtype, anything else as it is"""
  if type(x).__module__ == "numpy" and not is_numpy_ndarray(x) and hasattr(x, "__array__"): x = x.__array__()
  return Tensor(x) if is_numpy_ndarray(x) else x

def _arrays_to_tensors(tree):
  """numpy arrays and scalars among the arguments become Tensors, as jax.vmap takes them as arrays: mapped by in_axes like Tensors"""
  if _is_node(tree): return _rebuild(tree, [_arrays_to_tensors(v) for _,v in _children(tree)])
  return _from_numpy(tree)

def _leaves(tree) -> list:
  return [l for _,v in _children(tree) for l in _leaves(v)] if _is_node(tree) else [tree]

def _unflatten(like, leaves:list):
  """a tree of like's structure holding `leaves` (in the order of _leaves)"""
  it = iter(leaves)
  return _tree_map(lambda _l, _s, _p: next(it), like, None, "", "")

# *** the scopes of a vmapped call ***

RANDOMNESS = ("error", "same", "different")

@dataclass
class _Scope:
  """one vmap scope: the batch of `size` examples runs as a LOOP RANGE, or, chunked, as an OUTER RANGE over chunks around a LOOP RANGE.
  A chunked vmap whose batch doesn't divide runs a second scope for the tail: the examples start:start+size of a batch of `batch`."""
  size: int
  rngs: tuple[UOp, ...]   # (loop,) or (outer over chunks, loop in a chunk)
  randomness: str
  start: int
  batch: int
  took: list = field(default_factory=list)   # (weakref, old UOp) of the Tensors outside the scope that took a per-example value of it
  devices: tuple[str, ...]|None = None       # the devices of a batch sharded on its mapped axis

  def enter(self, x:Tensor, axis:int) -> Tensor:
    """one example of x, whose axis `axis` is this scope's batch"""
    if len(self.rngs) == 2: x = x.reshape(x.shape[:axis] + tuple(r.vmax+1 for r in self.rngs) + x.shape[axis+1:])
    return x.vmapin(varg(x.ndim, {axis+i: r for i,r in enumerate(self.rngs)}))

  def exit(self, y:Tensor, axis:int) -> Tensor:
    """the batch of y, one example, with the batch axis at `axis`"""
    y = y.vmapout(varg(y.ndim+len(self.rngs), {axis+i: r for i,r in enumerate(self.rngs)}))
    return y.reshape(y.shape[:axis] + (self.size,) + y.shape[axis+len(self.rngs):]) if len(self.rngs) == 2 else y

# the scopes open while a vmapped function is traced, outermost first
_scopes: list[_Scope] = []

def _took_example(t:Tensor, v:Tensor):
  """t (no buffer, outside a scope) takes v, a per-example value: fine for a Tensor made in the function, refused if it outlives it"""
  for s in _scopes:
    if any(r in v.uop.ranges and r not in t.uop.ranges for r in s.rngs): s.took.append((weakref.ref(t), t.uop))

def _give_back(took:list) -> list[Tensor]:
  """the Tensors of `took` still alive, with their old values back"""
  for t, old in (alive:=[(t, old) for ref, old in took if (t:=ref()) is not None]): t.uop = old
  return [t for t,_ in alive]

def _refuse_escaped(scope:_Scope):
  """the Tensors that took a per-example value and are still alive once the function and its outputs are done with were closed over:
  every example would write them. Give them their old value back and raise"""
  if not any(ref() is not None for ref,_ in scope.took): return
  gc.collect()   # a local Tensor kept alive only by a reference cycle isn't an escape
  if not (bad:=_give_back(scope.took)): return
  raise RuntimeError(f"vmap: a Tensor that outlives the vmapped function (shape {bad[0].shape}: closed over, like a module's running "
                     "statistics, or stored outside it) was given a value that depends on the example (assign, setitem, +=): every example "
                     "would write it. Return the per-example value from the function instead, or update the Tensor outside the vmap")

def _rand_in_scope(shape:tuple[int, ...], **kwargs) -> Tensor|None:
  """Tensor.rand inside vmapped functions: refused ("error"), one draw for every example ("same"), or a draw per example ("different")"""
  if not _scopes: return None
  if any(s.randomness == "error" for s in _scopes):
    raise RuntimeError("vmap: random numbers (Tensor.rand/randn/randint/dropout, ...) inside a vmapped function need a randomness mode: "
                       "vmap(fn, randomness='same') shares one draw across the batch, randomness='different' draws per example")
  different = [s for s in _scopes if s.randomness == "different"]
  sharded = [s for s in _scopes if s.devices is not None]
  if not different and not _draws and not sharded: return None
  if (replay:=next((d for d in _draws if d.replaying), None)) is not None and replay.pos < len(replay.drawn): ret = replay.drawn[replay.pos]
  else:
    tinygrad.tensor.rand_hook = None
    try:
      # the draws of every example of the whole batch, taken outside the scopes; each scope takes its examples, then one of them
      ret = Tensor.rand(*[s.batch for s in different], *shape, **kwargs)
      # with a batch sharded on several devices, its examples' draws are sharded with them, and a draw they share is on each device
      if sharded: ret = ret.to(sharded[0].devices) if (k:=next((i for i,d in enumerate(different) if d is sharded[0]), None)) is None else \
        ret.shard(sharded[0].devices, axis=k)
    finally: tinygrad.tensor.rand_hook = _rand_in_scope
  if replay is not None: replay.pos += 1
  for d in _draws:
    if not d.replaying: d.drawn.append(ret)
  for s in different:
    ret = s.enter(ret if s.size == s.batch else ret.shrink(((s.start, s.start+s.size),)+(None,)*(ret.ndim-1)), 0)
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

# *** vmap ***

def _arg_names(fn:Callable) -> Callable[[int], list[str]]:
  """the names errors give the positional arguments of fn: `argument x` from its signature, `args[i]` past it"""
  try: params = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  except (TypeError, ValueError): params = []
  return lambda n: [f"argument {p.name}" for p in params[:n]] + [f"args[{i}]" for i in range(len(params), n)]

def _check_on_devices(y:Tensor, devices:tuple[str, ...], path:str):
  """a Tensor on one device used with a sharded batch fails deep in the scheduler: name it here (consts and aranges are fine, buffers not)"""
  def on_many(u:UOp) -> bool: return u.op in (Ops.MSTACK, Ops.MSELECT) or (u.op is Ops.COPY and isinstance(u.device, tuple))
  if single:=[u for u in y.uop.toposort(gate=lambda u: not on_many(u)) if u.op in (Ops.BUFFER, Ops.COPY) and isinstance(u.device, str)]:
    raise ValueError(f"vmap over a batch sharded on {devices}: {path} uses a Tensor on {single[-1].device} of shape {single[-1].shape} "
                     f"(closed over, or made from data inside the function): put it on the batch's devices with .to({devices}) or .shard")

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
  - `chunk_size`: run the batch `chunk_size` examples at a time (an OUTER range over chunks around a loop inside each chunk), so buffers
    realized inside `fn` hold `chunk_size` examples, not the whole batch. `chunk_size=1` is a sequential map, like `jax.lax.map`.
  - `randomness`: what Tensor.rand & co inside `fn` do: "error" (refuse), "same" (one draw for every example), "different" (a draw each).

  ```python exec="true" source="above" session="tensor" result="python"
  from tinygrad import vmap
  xs, w = Tensor.arange(6).reshape(3, 2), Tensor([10, 100])
  print(vmap(lambda x, w: (x * w).sum(), in_axes=(0, None))(xs, w).numpy())
  ```
  """
  if fn is None: return functools.partial(vmap, in_axes=in_axes, out_axes=out_axes, axis_size=axis_size, chunk_size=chunk_size, randomness=randomness)
  if not callable(fn): raise TypeError(f"vmap expects a function, got {fn!r}")
  if not (in_axes is None or isinstance(in_axes, (int, tuple, list))) or isinstance(in_axes, bool):
    raise TypeError(f"vmap in_axes must be an int, None, or a tuple/list with an entry per positional argument, got {in_axes!r}")
  if randomness not in RANDOMNESS: raise ValueError(f"vmap randomness must be one of {RANDOMNESS}, got {randomness!r}")
  if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
    raise ValueError(f"vmap chunk_size must be a positive int or None, got {chunk_size!r}")
  if axis_size is not None and (not isinstance(axis_size, int) or axis_size < 0):
    raise ValueError(f"vmap axis_size must be a non-negative int or None, got {axis_size!r}")

  arg_names = _arg_names(fn)
  @functools.wraps(fn)
  def vmapped(*args, **kwargs):
    names = arg_names(len(args))
    args, kwargs = _arrays_to_tensors(args), {k: _arrays_to_tensors(v) for k,v in kwargs.items()}
    if isinstance(in_axes, (tuple, list)) and len(in_axes) != len(args):
      raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding to the positional arguments passed to the "
                       f"function, but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
    # normalize every leaf's axis, and collect the sizes of the mapped axes
    sizes: list[tuple[str, int, int]] = []
    devices: list[tuple[str, str|tuple[str, ...]]] = []
    def leaf_axis(x, axis:int|None, path:str) -> int|None:
      if axis is None or not isinstance(x, Tensor): return None
      if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"vmap was requested to map {path} along axis {axis}, which implies that its rank should be at least "
                         f"{axis+1 if axis >= 0 else -axis}, but is only {x.ndim} (its shape is {x.shape})")
      sizes.append((path, axis % x.ndim, x.shape[axis]))
      devices.append((path, x.device))
      return axis % x.ndim
    axes = [_tree_map(leaf_axis, a, in_axes[i] if isinstance(in_axes, (tuple, list)) else in_axes, names[i], "in_axes") for i,a in enumerate(args)]
    kwaxes = {k: _tree_map(leaf_axis, v, 0, f"argument {k}", "in_axes") for k,v in kwargs.items()}
    if len(set(s for _,_,s in sizes) | ({axis_size} if axis_size is not None else set())) > 1:
      raise ValueError("vmap got inconsistent sizes for array axes to be mapped: " + ", ".join(f"axis {a} of {p} had size {s}" for p,a,s in sizes) +
                       (f", but axis_size={axis_size}" if axis_size is not None else ""))
    if not sizes and axis_size is None:
      raise ValueError("vmap must have at least one non-None value in in_axes, or an axis_size, to know the batch size")
    n = sizes[0][2] if sizes else axis_size
    if (sharded:=[d for _,d in devices if isinstance(d, tuple)]) and (single:=[(p,d) for p,d in devices if isinstance(d, str)]):
      raise RuntimeError(f"vmap over a sharded batch: an input mapped with it is on {single[0][1]}, not on the batch's devices {sharded[0]}: "
                         f"{single[0][0]} (shard it on its mapped axis)")
    assert isinstance(n, int), f"vmap needs a concrete batch size, got {n}"
    if len(set(sharded)) > 1:
      raise RuntimeError(f"vmap over a sharded batch: its mapped inputs are sharded on different devices, {sharded[0]} and "
                         f"{next(d for d in sharded if d != sharded[0])}: shard them on the same devices")
    if sharded and chunk_size is not None and chunk_size < n:
      raise NotImplementedError(f"vmap chunk_size with a batch sharded on {sharded[0]}: each device runs its shard as one loop already, "
                                "drop chunk_size (or pass fewer examples per call)")

    def call(scope:_Scope, start:int, stop:int):
      """fn on the examples start:stop of the batch, inside `scope`"""
      def enter(x, axis, _):
        if axis is None: return x
        if (start, stop) != (0, x.shape[axis]): x = x.shrink(tuple((start, stop) if i == axis else None for i in range(x.ndim)))
        return scope.enter(x, axis)
      _scopes.append(scope)
      prev_hook, tinygrad.tensor.rand_hook = tinygrad.tensor.rand_hook, _rand_in_scope
      tinygrad.tensor.took_example_hook = _took_example
      try:
        out = fn(*[_tree_map(enter, a, ax, "", "") for a,ax in zip(args, axes)],
                 **{k: _tree_map(enter, v, kwaxes[k], "", "") for k,v in kwargs.items()})
      except BaseException:
        _give_back(scope.took)   # a failed call leaves what it wrote to intact
        raise
      finally:
        _scopes.pop()
        tinygrad.tensor.rand_hook = prev_hook
        if not _scopes: tinygrad.tensor.took_example_hook = None
      def exit_(y, axis, path):
        if y is None: return None   # an empty subtree, as in JAX
        # a Python number, a numpy array or a numpy scalar is an output that doesn't depend on the batch
        if isinstance(y:=_from_numpy(y), (int, float)): y = Tensor(y)
        if not isinstance(y, Tensor):
          raise TypeError(f"vmap: fn must return a Tensor, a Python number, None or a tuple/list/dict of those, got {type(y).__name__} at {path}")
        if axis is None:
          if any(r in y.uop.ranges for r in scope.rngs):
            raise ValueError(f"vmap has mapped output but out_axes is None for {path}: it depends on the batch")
          return y
        if sharded: _check_on_devices(y, sharded[0], path)
        if not -(y.ndim+1) <= axis <= y.ndim:
          raise ValueError(f"vmap out_axes {axis} for {path} is out of range: the batched output has {y.ndim+1} axes (shape {(n,)+y.shape})")
        return scope.exit(y, axis % (y.ndim+1))
      ret = _tree_map(exit_, out, out_axes, "output", "out_axes")
      del out   # fn's own output Tensors: the batch is ret, those are one example
      if scope.took: _refuse_escaped(scope)
      return ret

    if n == 0 or chunk_size is None or chunk_size >= n:
      return call(_Scope(n, (UOp.range(n, next(_vmap_range_ids)),), randomness, 0, n, devices=sharded[0] if sharded else None), 0, n)
    chunks, rest = divmod(n, chunk_size)
    _draws.append(draws:=_Draws([]))
    try:
      main = call(_Scope(chunks*chunk_size, (UOp.range(chunks, next(_vmap_range_ids), AxisType.OUTER),
                                             UOp.range(chunk_size, next(_vmap_range_ids))), randomness, 0, n), 0, chunks*chunk_size)
      if rest == 0: return main
      draws.replaying = True
      tail = call(_Scope(rest, (UOp.range(rest, next(_vmap_range_ids)),), randomness, chunks*chunk_size, n), chunks*chunk_size, n)
    finally: _draws.pop()
    # the two parts of every output leaf go back together on its batch axis
    tails = iter(_leaves(tail))
    def join(m:Tensor, axis:int|None, _) -> Tensor:
      t = next(tails)
      return m if axis is None or m is None else m.cat(t, dim=axis % m.ndim)
    return _tree_map(join, main, out_axes, "output", "out_axes")
  return vmapped
