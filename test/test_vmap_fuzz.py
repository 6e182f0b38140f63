"""A differential fuzzer for vmap: random programs through `vmap` (and `jacfwd`, `jacrev`) against a numpy loop over
examples.

A program is a small IR: a few per-example inputs and a list of ops, each reading earlier values by index. It is written out twice, as
tinygrad code (run on one example's Tensors inside 1 to 3 nested `vmap`s with random in_axes/out_axes/chunk_size) and as numpy code (run
example by example in nested Python loops, `np_batch`), and the two results are compared in float64 (and float32, with tolerances). The
jacfwd part runs the same kind of program, restricted to differentiable ops, through `jacfwd` (inside or outside the vmaps) against float64
central differences of the numpy code; the jacrev part runs them through `jacrev` (reverse mode: gradients through the vmap scopes). The
sharded part runs the vmap programs with the outermost batch sharded on two CPU devices (`Prog.devices`). Every failure prints a
standalone reproduction (`Prog.source()`). A failing program is run without vmap too, against the same numpy interpreter: a failure
there is the fork's plain path (an upstream bug or a topic patch's regression), reported as such, never filtered out. A campaign's report
counts every program: passed, skipped by reason, failed, and failed without vmap too.

  python -m pytest test/test_vmap_fuzz.py                         # CI: a deterministic handful of examples (derandomized hypothesis)
  FUZZ_EXAMPLES=500 python -m pytest test/test_vmap_fuzz.py       # more examples per test
  PYTHONPATH=. FUZZ_CAMPAIGN=5000 FUZZ_SEED=1 python test/test_vmap_fuzz.py    # a campaign: N programs from a seed, every failure kept and shrunk
  PYTHONPATH=. FUZZ_SHARDED=1 FUZZ_CAMPAIGN=1000 python test/test_vmap_fuzz.py # ... with the outermost batch sharded on CPU:0 and CPU:1
  PYTHONPATH=. FUZZ_SCAN=1 FUZZ_CAMPAIGN=300 python test/test_vmap_fuzz.py     # ... programs with a scan node (random body, carry, length)
"""
import os, sys, math, random, time, json, signal, unittest
from dataclasses import dataclass, replace
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck, assume
from tinygrad import Tensor, dtypes, vmap, jacfwd, jacrev
from tinygrad.fork_line import LINE_012
if not LINE_012: from tinygrad import scan   # the 0.14 line's (tinygrad/scan.py): the scan node is drawn there alone
sys.path.insert(0, os.path.dirname(__file__))
from vmap_oracle import np_batch, np_softmax_axis, np_log_softmax, num_jac, set_items, np_scan, shard_devices, half_missing

MAX_NUMEL = 48   # of a per-example value

# *** the IR ***

@dataclass(frozen=True)
class Prog:
  """inputs x0..x{n-1} of per-example `shapes`, then ops[j] = (name, args, params) defining value n+j; `outs` are returned. `levels` are
  the vmaps, outermost first: (batch size, in_axes, out_axes, chunk_size). `jac`: None (vmap only), "inside" (the vmaps around
  jacfwd(f)) or "outside" (jacfwd of the vmapped f), both in argument 0; `jac_fn` is jacfwd or jacrev. `devices`: None (one device), or
  the devices the batch of the outermost vmap is sharded on (each input it maps is sharded on that axis, the rest replicated)."""
  shapes: tuple
  ops: tuple
  outs: tuple
  levels: tuple
  dtype: str = "float64"
  seed: int = 0
  jac: str|None = None
  devices: tuple|None = None
  jac_fn: str = "jacfwd"

  @property
  def n_in(self) -> int: return len(self.shapes)
  @property
  def has_scan(self) -> bool: return any(op[0] == "scan" for op in self.ops)

  def input_shapes(self) -> list[tuple[int, ...]]:
    """the shapes of the inputs the outermost vmap gets: the per-example shapes with a batch axis inserted per level where mapped"""
    shapes = [list(s) for s in self.shapes]
    for size, ia, _, _ in reversed(self.levels):
      for s, a in zip(shapes, ia if isinstance(ia, (tuple, list)) else (ia,)*self.n_in):
        if a is not None: s.insert(a % (len(s)+1), size)
    return [tuple(s) for s in shapes]

  def inputs(self) -> list[np.ndarray]:
    rng = np.random.default_rng(self.seed)
    xs = [rng.standard_normal(s) for s in self.input_shapes()]
    return [x.astype(np.float32).astype(np.float64) for x in xs] if self.dtype == "float32" else xs

  def weight(self, j:int, shape:tuple) -> np.ndarray: return np.random.default_rng(1000*self.seed + j).standard_normal(shape)

  # the two interpretations, written out as code
  def fn_source(self, lib:str, traced:bool=False) -> str:
    names = [f"x{i}" for i in range(self.n_in)] + [f"v{self.n_in+j}" for j in range(len(self.ops))]
    lines = [f"def {'f' if lib == 'tg' else 'nf'}({', '.join(names[:self.n_in])}):"]
    for j, op in enumerate(self.ops):
      if op[0] == "scan": lines += ["  " + l for l in scan_body_source(op, self.n_in+j, lib, self.dtype, traced)]
      e = op_expr(op, [names[a] for a in op[1]], lib, self.n_in+j, self.dtype, traced, self.devices)
      lines.append(f"  {names[self.n_in+j]} = {'_v(' + e + ')' if traced else e}")
    outs = [names[o] for o in self.outs]
    lines.append(f"  return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}")
    return "\n".join(lines)

  def weights_source(self) -> str:
    lines = []
    for j, (name, _, params) in enumerate(self.ops):
      if name == "matmul":
        lines.append(f"w{self.n_in+j} = np.random.default_rng({1000*self.seed+self.n_in+j}).standard_normal({params[2]!r})")
        lines.append(f"tw{self.n_in+j} = {self.tensor_source(f'w{self.n_in+j}')}")
    return "\n".join(lines)

  def tensor_source(self, x:str, shard_axis:int|None=None) -> str:
    """the tinygrad Tensor of numpy array `x`: on `devices`, sharded on shard_axis or replicated"""
    t = f"Tensor({x}, dtype=dtypes.{self.dtype})"
    return t if self.devices is None else t + (f".to({self.devices!r})" if shard_axis is None else f".shard({self.devices!r}, axis={shard_axis})")

  def input_sources(self) -> list[str]:
    ia = self.levels[0][1] if self.devices is not None else None
    axes = ia if isinstance(ia, (tuple, list)) else (ia,)*self.n_in
    return [self.tensor_source(f"x{i}", None if a is None else a % len(s)) for i, (a, s) in enumerate(zip(axes, self.input_shapes()))]

  def call_source(self) -> tuple[str, str]:
    """the tinygrad and the numpy expression of the whole transform"""
    g, ng = (f"{self.jac_fn}(f)", "num_jac(nf)") if self.jac == "inside" else ("f", "nf")
    for size, ia, oa, cs in reversed(self.levels):
      axis_size = all(a is None for a in (ia if isinstance(ia, (tuple, list)) else (ia,)))
      g = f"vmap({g}, in_axes={ia!r}, out_axes={oa!r}" + (f", chunk_size={cs}" if cs is not None else "") + \
          (f", axis_size={size}" if axis_size else "") + ")"
      ng = f"np_batch({ng}, {size}, {ia!r}, {oa!r})"
    return (f"{self.jac_fn}({g})", f"num_jac({ng})") if self.jac == "outside" else (g, ng)

  def source(self) -> str:
    """a standalone reproduction: run it from test/ (it imports the oracle helpers from vmap_oracle)"""
    g, ng = self.call_source()
    args = ", ".join(f"x{i}" for i in range(self.n_in))
    tol = "atol=1e-6, rtol=1e-6" if self.dtype == "float64" else "atol=1e-3, rtol=1e-3"
    return "\n".join(["import numpy as np", "from tinygrad import Tensor, dtypes, vmap, jacfwd, jacrev" + (", scan" if self.has_scan else ""),
      "from vmap_oracle import np_batch, np_softmax_axis, np_log_softmax, num_jac, set_items" + (", np_scan" if self.has_scan else ""),
      f"{args}, = [np.random.default_rng({self.seed}).standard_normal(s) for s in {self.input_shapes()!r}]"
      if self.dtype == "float64" else f"{args}, = [np.random.default_rng({self.seed}).standard_normal(s).astype(np.float32) for s in "
      f"{self.input_shapes()!r}]", self.weights_source(), self.fn_source("tg"), self.fn_source("np"),
      f"got = {g}({', '.join(self.input_sources())})",
      f"want = {ng}({args})",
      "for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):",
      f"  np.testing.assert_allclose(a.numpy(), b, {tol})"]).replace("\n\n", "\n")

def idx_src(axis:int, what:str) -> str: return ":, "*axis + what

def op_expr(op:tuple, a:list[str], lib:str, vid:int, dtype:str, traced:bool, devices:tuple|None=None) -> str:
  """op as a tinygrad (lib="tg") or numpy (lib="np") expression of its operands `a`. traced numpy code wraps the operands of discrete ops
  in checks that flag inputs within rounding of a decision boundary (those examples are skipped, the two sides may round differently).
  An index Tensor goes on its operand's device, or on the batch's `devices` for an operand on none (a 0-d input is a constant on 0.14)"""
  name, _, p = op
  tg, F = lib == "tg", f"dtypes.{dtype}"
  def chk(fn, *xs): return f"{fn}({', '.join(xs)})" if traced else xs[0]
  if name == "unary":
    x = a[0]
    if p[0] == "affine": return f"({x}*{p[1]}+{p[2]})"
    return {"neg": f"(-{x})", "abs": f"{x}.abs()" if tg else f"np.abs({x})", "relu": f"{x}.relu()" if tg else f"np.maximum({x}, 0)",
      "sin": f"{x}.sin()" if tg else f"np.sin({x})", "tanh": f"{x}.tanh()" if tg else f"np.tanh({x})",
      "sigmoid": f"{x}.sigmoid()" if tg else f"(1/(1+np.exp(-{x})))", "exp": f"{x}.tanh().exp()" if tg else f"np.exp(np.tanh({x}))",
      "log": f"({x}.abs()+1).log()" if tg else f"np.log(np.abs({x})+1)", "sqrt": f"{x}.abs().sqrt()" if tg else f"np.sqrt(np.abs({x}))",
      "square": f"{x}.square()" if tg else f"np.square({x})", "recip": f"({x}*{x}+1).reciprocal()" if tg else f"(1/({x}*{x}+1))",
      "log1sq": f"({x}*{x}+1).log()" if tg else f"np.log({x}*{x}+1)", "sqrt1sq": f"({x}*{x}+1).sqrt()" if tg else f"np.sqrt({x}*{x}+1)",
      "floor": f"{x}.floor()" if tg else f"np.floor({chk('_fi', x)})"}[p[0]]
  if name == "binary":
    x, y = a
    if p[0] in ("add", "sub", "mul"): return f"({x}{ {'add': '+', 'sub': '-', 'mul': '*'}[p[0]] }{y})"
    if p[0] == "div": return f"({x}/({y}*{y}+1))"
    if p[0] in ("maximum", "minimum"): return f"{x}.{p[0]}({y})" if tg else f"np.{p[0]}({chk('_fd', x, y)}, {y})"
    if p[0] == "cmplt": return f"({x}<{y}).cast({F})" if tg else f"({chk('_fd', x, y)}<{y}).astype(np.float64)"
  if name == "where": return f"({a[0]}>0).where({a[1]}, {a[2]})" if tg else f"np.where({chk('_f0', a[0])}>0, {a[1]}, {a[2]})"
  if name == "lerp": return f"{a[0]}.lerp({a[1]}, {a[2]})" if tg else f"({a[0]}+({a[1]}-{a[0]})*{a[2]})"
  if name == "cast":
    x = a[0]
    if p[0] == "int32": return f"{x}.clip(-1e4, 1e4).cast(dtypes.int32).cast({F})" if tg else \
      f"np.clip({chk('_fi', x)}, -1e4, 1e4).astype(np.int32).astype(np.float64)"
    if p[0] == "bool": return f"{x}.cast(dtypes.bool).cast({F})" if tg else f"({chk('_f0', x)}!=0).astype(np.float64)"
    if p[0] == "float16": return f"{x}.clip(-1e4, 1e4).cast(dtypes.float16).cast({F})" if tg else \
      f"np.clip({chk('_fh', x)}, -1e4, 1e4).astype(np.float16).astype(np.float64)"
    if p[0] == "float32": return f"{x}.cast(dtypes.float32).cast({F})" if tg else f"{chk('_ff', x)}.astype(np.float32).astype(np.float64)"
  if name == "reduce":
    kind, axis, keepdim = p
    if tg: return f"{a[0]}.{kind}(axis={axis!r}, keepdim={keepdim})"
    x = chk("_ft", a[0], repr(axis)) if kind in ("max", "min") else a[0]
    return f"np.{ {'sum': 'sum', 'mean': 'mean', 'max': 'max', 'min': 'min'}[kind] }({x}, axis={axis!r}, keepdims={keepdim})"
  if name == "matmul": return (f"({a[0]} @ {'t' if tg else ''}w{vid})" if p[0] == "right" else f"({'t' if tg else ''}w{vid} @ {a[0]})")
  if name == "reshape": return f"{a[0]}.reshape({p[0]!r})"
  if name == "permute": return f"{a[0]}.permute({p[0]!r})" if tg else f"np.transpose({a[0]}, {p[0]!r})"
  if name == "expand": return f"{a[0]}.reshape({p[0]!r}).expand({p[1]!r})" if tg else f"np.broadcast_to({a[0]}.reshape({p[0]!r}), {p[1]!r})"
  if name == "shrink": return f"{a[0]}.shrink({p[0]!r})" if tg else f"{a[0]}[{', '.join(f'{lo}:{hi}' for lo, hi in p[0])}]"
  if name == "pad": return f"{a[0]}.pad({p[0]!r}, value={p[1]})" if tg else f"np.pad({a[0]}, {p[0]!r}, constant_values={p[1]})"
  if name == "flip": return f"{a[0]}.flip({p[0]!r})" if tg else f"np.flip({a[0]}, {p[0]!r})"
  if name == "stack": return f"{a[0]}.stack({a[1]}, dim={p[0]})" if tg else f"np.stack([{a[0]}, {a[1]}], axis={p[0]})"
  if name == "cat": return f"{a[0]}.cat({a[1]}, dim={p[0]})" if tg else f"np.concatenate([{a[0]}, {a[1]}], axis={p[0]})"
  if name == "index_int": return f"{a[0]}[{idx_src(p[0], str(p[1]))}]"
  if name == "index_slice": return f"{a[0]}[{idx_src(p[0], ':'.join('' if v is None else str(v) for v in p[1:]))}]"
  if name == "index_tensor":
    dev = f"{a[0]}.device" + (f" or {devices!r}" if devices else "")
    return f"{a[0]}[{idx_src(p[0], f'Tensor({list(p[1])}, dtype=dtypes.int32, device={dev})' if tg else f'np.array({list(p[1])})')}]"
  if name == "gather":   # indices computed from the data of another value, per example
    axis, n = p
    if tg: return f"{a[0]}[{idx_src(axis, f'({a[1]}.abs()*2).clip(0, {n-1}).cast(dtypes.int32).reshape(-1)')}]"
    idx = chk("_fi", f"np.abs({a[1]})*2")
    return f"{a[0]}[{idx_src(axis, f'np.clip({idx}, 0, {n-1}).astype(np.int32).reshape(-1)')}]"
  if name == "softmax": return f"{a[0]}.softmax({p[0]})" if tg else f"np_softmax_axis({a[0]}, {p[0]})"
  if name == "log_softmax": return f"{a[0]}.log_softmax({p[0]})" if tg else f"np_log_softmax({a[0]}, {p[0]})"
  if name == "cumsum": return f"{a[0]}.cumsum({p[0]})" if tg else f"np.cumsum({a[0]}, axis={p[0]})"
  if name == "contiguous": return f"{a[0]}.contiguous()" if tg else a[0]
  if name == "iota": return f"({a[0]} * (Tensor.arange({p[0]}, dtype={F})+1))" if tg else f"({a[0]} * (np.arange({p[0]})+1))"
  if name == "scan":   # scan(body, a[0], xs): xs is a[1] at every step, scaled by a constant that differs per step
    length, reverse, which, nx = p[:4]
    coef = f"(Tensor.arange({length}, dtype={F})*0.37+0.5).sin()" if tg else f"np.sin(np.arange({length})*0.37+0.5)"
    xs = f"{a[1]}.unsqueeze(0)" if tg else f"np.expand_dims({a[1]}, 0)"
    call = f"{'scan' if tg else 'np_scan'}(b{vid}, {a[0]}, {xs}*{coef}.reshape({(length,) + (1,)*nx!r}), {'reverse=' if tg else ''}{reverse})"
    if which == "carry": return f"{call}[0]"
    if which == "ys": return f"{call}[1]"
    return f"(lambda r: r[1] + {'r[0].unsqueeze(0)' if tg else 'np.expand_dims(r[0], 0)'})({call})"
  if name == "setitem":   # a clone with an int or a slice of one axis set to a scalar computed from another value (JAX's .at[].set)
    axis, lo, hi = p
    return f"set_items({a[0]}, ({'slice(None), '*axis}{lo if hi is None else f'slice({lo}, {hi})'},), {a[1]}.sum())"
  raise ValueError(f"unknown op {op}")

def scan_body_source(op:tuple, vid:int, lib:str, dtype:str, traced:bool) -> list[str]:
  """the def of a scan node's body b{vid}(c, x): its ops over the values c, x, u2, u3, ..., then (the new carry: a value squashed into
  [-1, 1] so long recursions stay finite, broadcast to the carry's shape, y)"""
  _, _, _, _, body, carry_v, squash, y_v, sc = op[2]
  names = ["c", "x"] + [f"u{2+k}" for k in range(len(body))]
  lines = [f"def b{vid}(c, x):"]
  for k, bop in enumerate(body):
    e = op_expr(bop, [names[a] for a in bop[1]], lib, -1, dtype, traced)
    lines.append(f"  {names[2+k]} = {'_v(' + e + ')' if traced else e}")
  c = op_expr(("unary", (), (squash,)), [names[carry_v]], lib, -1, dtype, traced)
  lines.append(f"  return {f'{c}.expand({sc!r})' if lib == 'tg' else f'np.broadcast_to({c}, {sc!r})'}, {names[y_v]}")
  return lines

# *** the checks of the traced numpy code: skip examples where a discrete op sits within rounding of its decision boundary ***

class Trace:
  eps, fragile, scale = 1e-9, False, 1.0
  @classmethod
  def reset(cls, eps:float):
    cls.eps, cls.fragile, cls.scale = eps, False, 1.0

def _near(d, x):
  d, x = np.asarray(d, dtype=np.float64), np.asarray(x, dtype=np.float64)
  return bool(np.any((d != 0) & (np.abs(d) < Trace.eps * np.maximum(1, np.abs(x)))))
def _v(x):
  Trace.scale = max(Trace.scale, float(np.max(np.abs(x), initial=0)))
  return x
def _fi(x):
  Trace.fragile |= _near(x - np.round(x), x)
  return x
def _f0(x):
  Trace.fragile |= _near(x, 1)
  return x
def _fd(x, y):
  Trace.fragile |= _near(x - y, np.maximum(np.abs(x), np.abs(y)))
  return x
def _fround(x, dt):
  x = np.asarray(x, dtype=np.float64)
  Trace.fragile |= bool(np.any((x.astype(dt) != x) & ((x*(1+Trace.eps)).astype(dt) != (x*(1-Trace.eps)).astype(dt))))
  return x
def _fh(x):
  x = np.clip(np.asarray(x, dtype=np.float64), -1e4, 1e4)
  # the C renderer casts float64 to half through float (vanilla too): where float rounds x onto a tie of half, half rounds it the other way
  Trace.fragile |= bool(np.any(x.astype(np.float32).astype(np.float16) != x.astype(np.float16)))
  return _fround(x, np.float16)
def _ff(x): return _fround(x, np.float32)
def _ft(x, axis):
  """near ties of a max/min reduction: only their derivative is ambiguous, the value is not, so this only matters for jacfwd"""
  if Trace.eps > 1e-6 and np.ndim(x) > 0:
    axes = tuple(range(np.ndim(x))) if axis is None else tuple(a % np.ndim(x) for a in axis)
    s = np.sort(np.moveaxis(x, axes, tuple(range(-len(axes), 0))).reshape(*[n for i, n in enumerate(np.shape(x)) if i not in axes], -1), -1)
    if s.shape[-1] > 1: Trace.fragile |= _near(np.concatenate([s[..., 1:] - s[..., :-1]]), s[..., 1:])
  return x

# *** drawing programs ***

class RandDraw:
  """draws from a seeded random.Random (campaigns)"""
  def __init__(self, seed:int): self.r = random.Random(seed)
  def int(self, lo:int, hi:int) -> int: return self.r.randint(lo, hi)
  def pick(self, seq): return seq[self.r.randrange(len(seq))]
  def coin(self, p:float=0.5) -> bool: return self.r.random() < p

class HypDraw:
  """draws from hypothesis (shrinks towards small ints and the first entry of each pick)"""
  def __init__(self, draw): self.draw = draw
  def int(self, lo:int, hi:int) -> int: return self.draw(st.integers(lo, hi))
  def pick(self, seq): return seq[self.draw(st.integers(0, len(seq)-1))]
  def coin(self, p:float=0.5) -> bool: return self.draw(st.integers(0, 999)) >= 1000*(1-p)

UNARY = ["neg", "abs", "relu", "sin", "tanh", "sigmoid", "exp", "log", "sqrt", "square", "recip", "log1sq", "sqrt1sq", "floor", "affine"]
UNARY_SMOOTH = ["neg", "sin", "tanh", "sigmoid", "exp", "square", "recip", "log1sq", "sqrt1sq", "affine"]
OPS = ["unary", "binary", "where", "lerp", "cast", "reduce", "matmul", "reshape", "permute", "expand", "shrink", "pad", "flip", "stack", "cat",
       "index_int", "index_slice", "index_tensor", "gather", "softmax", "log_softmax", "cumsum", "contiguous", "iota", "setitem"]
DISCRETE = {"cast", "gather"}   # not in float32 programs: the two sides round differently and may land on two sides of a boundary
NOT_SMOOTH = {"cast"}           # not in jacfwd programs

def bcast(*shapes):
  try: return np.broadcast_shapes(*shapes)
  except ValueError: return None

def numpy_value(op:tuple, vals:list[np.ndarray], prog_seed:int, vid:int) -> np.ndarray:
  """the value of one op on per-example numpy values (draws check their ops with this: a shape, or an exception for an invalid op)"""
  ns = {"np": np, "np_softmax_axis": np_softmax_axis, "np_log_softmax": np_log_softmax, "set_items": set_items, "np_scan": np_scan,
        f"w{vid}": np.random.default_rng(1000*prog_seed+vid).standard_normal(op[2][2]) if op[0] == "matmul" else None}
  ns.update({f"a{i}": vals[a] for i, a in enumerate(op[1])})
  if op[0] == "scan": exec("\n".join(scan_body_source(op, vid, "np", "float64", False)), ns)
  return np.asarray(eval(op_expr(op, [f"a{i}" for i in range(len(op[1]))], "np", vid, "float64", False), ns))

def draw_axis(d, ndim:int, extra:int=0) -> int:
  """an axis of ndim+extra axes, negative half the time"""
  a = d.int(0, ndim+extra-1)
  return a - (ndim+extra) if d.coin() else a

def draw_op(d, name:str, shapes:list[tuple], mode:str, used:set[int]):
  """the args and params of op `name` on values of `shapes`, or None when it doesn't apply"""
  n = len(shapes)
  def pick_val(pred=lambda s: True):
    # mostly a value nothing reads yet (the latest first: shrinking chains ops), else any value: a value read by two consumers
    cands = [i for i in reversed(range(n)) if pred(shapes[i])]
    fresh = [i for i in cands if i not in used]
    ret = d.pick(fresh if fresh and d.coin(0.7) else cands) if cands else None
    if ret is not None: used.add(ret)
    return ret
  if name == "scan": return draw_scan(d, shapes, mode, pick_val)
  x = pick_val(lambda s: len(s) >= 1) if name not in ("unary", "binary", "where", "lerp", "cast", "reduce", "reshape", "expand",
                                                      "stack", "contiguous", "gather") else pick_val()
  if x is None: return None
  s, nd = shapes[x], len(shapes[x])
  if name == "unary":
    k = d.pick(UNARY_SMOOTH if mode == "jac" else [u for u in UNARY if mode == "f64" or u != "floor"])
    return (x,), ((k, d.pick([0.5, -1.5, 2.0]), d.pick([0.0, 1.0, -0.5])) if k == "affine" else (k,))
  if name == "binary":
    k = d.pick(["add", "sub", "mul", "div"] + (["maximum", "minimum"] + (["cmplt"] if mode == "f64" else [])))
    return (x, pick_val(lambda t: bcast(s, t) is not None)), (k,)
  if name in ("where", "lerp"):
    y = pick_val(lambda t: bcast(s, t) is not None)
    return (pick_val(lambda t: bcast(s, shapes[y], t) is not None), x, y) if name == "where" else \
      (x, y, pick_val(lambda t: bcast(s, shapes[y], t) is not None)), ()
  if name == "cast": return (x,), (d.pick(["int32", "bool"] + ([] if half_missing() else ["float16"]) + ["float32"]),)   # PoCL: no half
  if name == "reduce":
    kind = d.pick(["sum", "max", "mean", "min"])
    if nd == 0 or d.coin(0.25): axis = None
    else: axis = tuple(sorted({draw_axis(d, nd) % nd for _ in range(d.int(1, nd))}))
    if axis is not None and d.coin(): axis = tuple(a - nd for a in axis)
    return (x,), (kind, axis, d.coin())
  if name == "matmul":
    side, k = d.pick(["right", "left"]), d.int(1, 4)
    return (x,), (side, k, (s[-1], k) if side == "right" else (k, s[0] if nd == 1 else s[-2]))
  if name == "reshape":
    numel, k = math.prod(s), d.int(0, 4)
    if k == 0: return ((x,), ((),)) if numel == 1 else None
    new = [1]*k
    for f in prime_factors(numel): new[d.int(0, k-1)] *= f
    return (x,), (tuple(new),)
  if name == "permute":
    if nd < 2: return None
    perm = list(range(nd))
    for i in range(nd-1, 0, -1):
      j = d.int(0, i)
      perm[i], perm[j] = perm[j], perm[i]
    return (x,), (tuple(perm),)
  if name == "expand":
    pos = d.int(0, nd)
    with1 = s[:pos] + (1,) + s[pos:]
    return (x,), (with1, tuple(d.int(2, 3) if i == pos or (v == 1 and d.coin()) else v for i, v in enumerate(with1)))
  if name == "shrink":
    arg = []
    for v in s:
      lo = d.int(0, v-1)
      arg.append((lo, d.int(lo+1, v)))
    return (x,), (tuple(arg),)
  if name == "pad": return (x,), (tuple((d.int(0, 2), d.int(0, 2)) for _ in s), d.pick([0.0, 1.5, -2.0]))
  if name == "flip": return (x,), (tuple(sorted({draw_axis(d, nd) for _ in range(d.int(1, nd))})),)
  if name == "stack": return (x, pick_val(lambda t: t == s)), (draw_axis(d, nd, 1),)
  if name == "cat":
    axis = draw_axis(d, nd)
    return (x, pick_val(lambda t: len(t) == nd and all(u == v or i == axis % nd for i, (u, v) in enumerate(zip(s, t))))), (axis,)
  if name == "index_int":
    axis = d.int(0, nd-1)
    return (x,), (axis, d.int(-s[axis], s[axis]-1))
  if name == "index_slice":
    axis = d.int(0, nd-1)
    step = d.pick([None, 1, 2, -1, -2, 3])
    start, stop = [d.pick([None, d.int(-s[axis]-1, s[axis]+1)]) for _ in range(2)]
    if len(range(*slice(start, stop, step).indices(s[axis]))) == 0: return None
    return (x,), (axis, start, stop, step)
  if name == "index_tensor":
    axis = d.int(0, nd-1)
    return (x,), (axis, tuple(d.int(-s[axis], s[axis]-1) for _ in range(d.int(1, 4))))
  if name == "gather":
    if nd == 0: return None
    axis = d.int(0, nd-1)
    v = pick_val(lambda t: math.prod(t) <= 6)
    return (x, v), (axis, s[axis])
  if name in ("softmax", "log_softmax", "cumsum"): return (x,), (draw_axis(d, nd),)
  if name == "contiguous": return (x,), ()
  if name == "iota": return (x,), (s[-1],)
  if name == "setitem":
    axis = d.int(0, nd-1)
    if d.coin(): return (x, pick_val()), (axis, d.int(-s[axis], s[axis]-1), None)
    lo = d.int(0, s[axis]-1)
    return (x, pick_val()), (axis, lo, d.int(lo+1, s[axis]))
  raise ValueError(name)

BODY_OPS = ["unary", "unary", "binary", "binary", "where", "lerp", "reduce"]   # elementwise and small reduces (keepdim)

def draw_scan(d, shapes:list[tuple], mode:str, pick_val):
  """a scan node: a carry (a value), xs (a value that broadcasts to the carry's shape, scaled per step), a random length and direction,
  and a body of 1 to 4 ops over the carry c and x that keeps the carry's shape and dtype (elementwise ops and keepdim reduces of values
  that broadcast to the carry's shape broadcast to it too). params: (length, reverse, which of carry / ys / ys + carry is the value, x's
  ndim, body ops, the body value that is the new carry (squashed), squash, the body value that is y, the carry's shape)"""
  if (c:=pick_val(lambda s: math.prod(s) <= 12)) is None: return None
  sc = shapes[c]
  x = pick_val(lambda t: bcast(sc, t) == sc)
  rng = np.random.default_rng(0)
  bvals, body, used = [rng.standard_normal(sc), rng.standard_normal(shapes[x])], [], set()
  for _ in range(d.int(1, 4)):
    for _ in range(10):
      name = d.pick(BODY_OPS)
      drawn = draw_op(d, name, [v.shape for v in bvals], mode, tried:=set(used))
      if drawn is None or any(a is None for a in drawn[0]): continue
      op = (name, drawn[0], drawn[1][:2] + (True,) if name == "reduce" else drawn[1])
      try: val = numpy_value(op, bvals, 0, 0)
      except (ValueError, IndexError): continue
      if bcast(val.shape, sc) != sc: continue
      body.append(op)
      bvals.append(val)
      used = tried
      break
  nb = len(bvals)
  carry_v = nb-1 if d.coin(0.6) else d.int(0, nb-1)
  y_v, which = d.int(0, nb-1), d.pick(["carry", "ys", "both"])
  per_step = 1 if which == "carry" else math.prod(bvals[y_v].shape) if which == "ys" else math.prod(sc)
  length = d.int(1, max(1, min(12, MAX_NUMEL // per_step)))
  return (c, x), (length, d.coin(), which, len(shapes[x]), tuple(body), carry_v, d.pick(["tanh", "sin", "sigmoid"]), y_v, sc)

def prime_factors(n:int) -> list[int]:
  ret, f = [], 2
  while n > 1:
    while n % f == 0: ret, n = ret + [f], n // f
    f += 1
  return ret

def draw_prog(d, mode:str="f64", max_ops:int=8, scan:bool=False) -> Prog:
  """a random program. mode: "f64", "f32" (no discrete ops), "jac" (differentiable ops, one output, jacfwd inside or outside the vmaps) or
  "rev" (the same with jacrev). scan: a program with at least one scan node (its first op, when one applies), and maybe no vmap at all
  (the fused one-kernel scan runs only outside vmap scopes and jvp tracing)"""
  if mode == "rev": return replace(draw_prog(d, "jac", max_ops, scan), jac_fn="jacrev")
  n_in = d.int(1, 2 if mode == "jac" else 3)
  base = tuple(d.int(1, 4) for _ in range(d.int(0, 3)))
  shapes = []
  for _ in range(n_in):
    kind = d.pick(["base", "suffix", "ones", "free"])
    if kind == "base": shapes.append(base)
    elif kind == "suffix": shapes.append(base[d.int(0, len(base)):])
    elif kind == "ones": shapes.append(tuple(v if d.coin() else 1 for v in base))
    else: shapes.append(tuple(d.int(1, 4) for _ in range(d.int(0, 3))))
  if mode == "jac" and math.prod(shapes[0]) > 12: shapes[0] = shapes[0][-1:]
  seed = d.int(0, 10**6)
  vals = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
  deps = [{i} for i in range(n_in)]
  ops: list[tuple] = []
  used: set[int] = set()
  allowed = [o for o in OPS if not (mode == "f32" and o in DISCRETE) and not (mode == "jac" and o in NOT_SMOOTH)]
  for k in range(d.int(2, max_ops)):
    for _ in range(20):
      name = "scan" if scan and (k == 0 or d.coin(0.15)) else d.pick(allowed)
      drawn = draw_op(d, name, [v.shape for v in vals], mode, tried:=set(used))
      if drawn is None or any(a is None for a in drawn[0]): continue
      op = (name, *drawn)
      try: val = numpy_value(op, vals, seed, len(vals))
      except (ValueError, IndexError): continue
      if val.size > MAX_NUMEL or val.size == 0 or val.ndim > 4: continue
      ops.append(op)
      vals.append(val)
      used = tried
      deps.append(set().union(*[deps[a] for a in op[1]]))
      break
  outs = (len(vals)-1,) if mode == "jac" or len(vals) < 2 or d.coin(0.7) else (len(vals)-1, d.int(0, len(vals)-2))
  # the vmaps, drawn from the innermost out: in_axes against the shapes each level sees
  depth = d.int(0 if mode == "jac" or scan else 1, 2 if mode == "jac" else 3)
  jac = None if mode != "jac" else d.pick(["inside", "outside"])
  cur = [list(s) for s in shapes]
  out_cur = [list(vals[o].shape) + (list(shapes[0]) if jac == "inside" else []) for o in outs]
  levels = []
  for lvl in range(depth):
    size = d.int(1, 4 if depth < 3 else 3)
    ia = []
    for s in cur: ia.append(None if d.coin(0.3) else draw_axis(d, len(s), 1))
    if all(a is None for a in ia) and not d.coin(0.1): ia[d.int(0, n_in-1)] = 0
    if mode == "jac" and jac == "outside" and ia[0] is None: ia[0] = 0   # so the Jacobian's argument has the batch in it
    mapped = {i for i, a in enumerate(ia) if a is not None}
    oa = []
    for k, o in enumerate(outs):
      oa.append(None if not (deps[o] & mapped) and d.coin() else draw_axis(d, len(out_cur[k]), 1))
    for s, a in zip(cur, ia):
      if a is not None: s.insert(a % (len(s)+1), size)
    for s, a in zip(out_cur, oa):
      if a is not None: s.insert(a % (len(s)+1), size)
    chunk = d.int(1, size) if size > 1 and d.coin(0.3) else None
    in_axes = ia[0] if len(set(ia)) == 1 and d.coin(0.3) else tuple(ia)
    levels.insert(0, (size, in_axes, oa[0] if len(outs) == 1 else tuple(oa), chunk))
  return Prog(tuple(shapes), tuple(ops), outs, tuple(levels), "float32" if mode == "f32" else "float64", seed, jac)

# *** running a program both ways ***

class Skip(Exception): pass

def np_namespace() -> dict:
  return {"np": np, "np_batch": np_batch, "np_softmax_axis": np_softmax_axis, "np_log_softmax": np_log_softmax, "num_jac": num_jac,
          "set_items": set_items, "np_scan": np_scan,
          "_v": _v, "_fi": _fi, "_f0": _f0, "_fd": _fd, "_fh": _fh, "_ff": _ff, "_ft": _ft}

def run_numpy(prog:Prog) -> tuple:
  """the oracle, with the scale of every intermediate value (for tolerances); raises Skip on examples that sit on a decision boundary"""
  ns = np_namespace()
  for j, (name, _, params) in enumerate(prog.ops):
    if name == "matmul": ns[f"w{prog.n_in+j}"] = prog.weight(prog.n_in+j, params[2])
  exec(prog.fn_source("np", traced=True), ns)
  Trace.reset(1e-4 if prog.jac else 1e-5 if prog.dtype == "float32" else 1e-9)
  want = eval(prog.call_source()[1], ns)(*prog.inputs())
  if Trace.fragile: raise Skip("an input sits within rounding of a decision boundary")
  return (want if isinstance(want, tuple) else (want,)), Trace.scale

def run_tinygrad(prog:Prog) -> tuple:
  ns = {"Tensor": Tensor, "dtypes": dtypes, "vmap": vmap, "jacfwd": jacfwd, "jacrev": jacrev, "np": np, "set_items": set_items,
        **({"scan": scan} if prog.has_scan else {}), **{f"x{i}": x for i, x in enumerate(prog.inputs())}}
  for j, (name, _, params) in enumerate(prog.ops):
    if name == "matmul": ns[f"tw{prog.n_in+j}"] = eval(prog.tensor_source("w"), ns | {"w": prog.weight(prog.n_in+j, params[2])})
  exec(prog.fn_source("tg"), ns)
  # the inputs are realized first: a kernel that wrote its output into an input's buffer (an input folded out of the graph once shared
  # its number with the output) shows as an input changed by the call
  if args:=[eval(src, ns) for src in prog.input_sources()]: Tensor.realize(*args)
  got = eval(prog.call_source()[0], ns)(*args)
  got = got if isinstance(got, tuple) else (got,)
  Tensor.realize(*got)
  for i, (a, x) in enumerate(zip(args, prog.inputs())):
    if not np.array_equal(a.numpy(), x, equal_nan=True): raise AssertionError(f"the call changed input x{i}\n--- reproduction ---\n{prog.source()}")
  return tuple(g.numpy() for g in got)

def tolerance(prog:Prog, scale:float) -> float:
  return (1e-5 if prog.jac else 1e-7 if prog.dtype == "float64" else 2e-4) * max(1.0, scale)

class FuzzTimeout(Exception): pass
def _alarm(*_): raise FuzzTimeout(f"tinygrad took more than {TIMEOUT}s")
TIMEOUT = int(os.getenv("FUZZ_TIMEOUT", "20"))
SHRINK = int(os.getenv("FUZZ_SHRINK", "0"))

def check_prog(prog:Prog):
  """raises AssertionError (wrong numbers or shapes, with a reproduction) or the exception tinygrad raised; Skip for fragile examples"""
  want, scale = run_numpy(prog)
  try:
    prev = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try: got = run_tinygrad(prog)
    finally:
      signal.alarm(0)
      signal.signal(signal.SIGALRM, prev)
  except Exception as e:
    e.add_note(f"--- reproduction ---\n{prog.source()}\n--- Prog ---\n{prog!r}")
    raise
  assert len(got) == len(want), f"{len(got)} outputs, want {len(want)}"
  for k, (g, w) in enumerate(zip(got, want)):
    if g.shape != w.shape: raise AssertionError(f"output {k}: shape {g.shape}, want {w.shape}\n--- reproduction ---\n{prog.source()}\n{prog!r}")
    tol = tolerance(prog, scale)
    if not np.allclose(g, w, atol=tol, rtol=tol):
      raise AssertionError(f"output {k}: wrong numbers, max abs err {np.max(np.abs(g-w)):.3g} (tol {tol:.3g})\n"
                           f"--- reproduction ---\n{prog.source()}\n--- Prog ---\n{prog!r}")

# *** the tests ***

EXAMPLES = int(os.getenv("FUZZ_EXAMPLES", "0"))
# big programs are slow to draw and run; filtering (programs numpy refuses, vmap's documented limits) stays a health check
def fuzz_settings(n:int): return settings(max_examples=EXAMPLES or n, deadline=None, derandomize=True, database=None, print_blob=False,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])

@st.composite
def progs(draw, mode, scan=False): return draw_prog(HypDraw(draw), mode, scan=scan)
NO_SCAN = "scan is the 0.14.0 line's (tinygrad/scan.py); the frozen 0.12.0 line has none"

# *** vmap over a batch sharded on several devices ***

DEVICES = shard_devices(2)   # CPU:0, CPU:1 (make test-cl: CL:0, CL:1)
# the clear errors docs/vmap.md lists for a sharded batch (a computation that would move examples between devices): not failures
SHARDED_LIMITS = ("a reduce over a sharded axis inside a vmap scope", "sharded on another axis too", "a sum over a batch sharded on several devices")

def shard_variant(prog:Prog, devices:tuple=DEVICES) -> Prog|None:
  """prog with its outermost batch sharded on devices: that batch a multiple of their number, no chunk_size (a sharded batch runs as one
  loop per device, vmap refuses it); None for a Jacobian of the whole vmapped function and ones whose outermost vmap maps no input"""
  if prog.jac == "outside" or not prog.levels: return None
  ia = prog.levels[0][1]
  if all(a is None for a in (ia if isinstance(ia, (tuple, list)) else (ia,))): return None
  size = -(-prog.levels[0][0] // len(devices)) * len(devices)
  return replace(prog, levels=((size,) + prog.levels[0][1:3] + (None,),) + tuple(l[:3] + (None,) for l in prog.levels[1:]), devices=devices)

@st.composite
def sharded_progs(draw, mode, scan=False):
  assume((prog:=shard_variant(draw_prog(HypDraw(draw), mode, scan=scan))) is not None)
  return prog

def sharded_limit(e:Exception) -> bool: return isinstance(e, NotImplementedError) and any(m in str(e) for m in SHARDED_LIMITS)

def plain_failure(prog:Prog) -> str|None:
  """how the program fails without vmap (plain tinygrad on one example and one device, its Jacobian kept), checked against the numpy
  interpreter like the vmapped program; None when it passes"""
  plain = replace(prog, levels=(), jac="inside" if prog.jac else None, devices=None)
  try: check_prog(plain)
  except Skip: return None
  except Exception as e: return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
  return None

def hyp_check(prog:Prog):
  try: check_prog(prog)
  except Skip: assume(False)
  except Exception as e:
    # a program that fails without vmap too is a failure of the fork's plain path (an upstream bug the fork must fix, or a topic patch's
    # regression): it fails the test, saying so. Nothing is assumed away: the plain run is checked against the numpy interpreter
    if (plain:=plain_failure(prog)) is not None: raise AssertionError(f"fails without vmap too: {plain}") from e
    raise

class TestVmapFuzz(unittest.TestCase):
  @fuzz_settings(40)
  @given(progs("f64"))
  def test_float64(self, prog): hyp_check(prog)

  @fuzz_settings(12)
  @given(progs("f32"))
  def test_float32(self, prog): hyp_check(prog)

  @fuzz_settings(15)
  @given(progs("jac"))
  def test_jacfwd(self, prog): hyp_check(prog)

  @fuzz_settings(15)
  @given(progs("rev"))
  def test_jacrev(self, prog): hyp_check(prog)

  # programs with a scan node: a random body over the carry and x, through vmap, jacfwd and jacrev (and with no vmap: the fused kernel)
  @unittest.skipIf(LINE_012, NO_SCAN)
  @fuzz_settings(4)
  @given(progs("f64", scan=True))
  def test_scan_float64(self, prog): hyp_check(prog)

  @unittest.skipIf(LINE_012, NO_SCAN)
  @fuzz_settings(2)
  @given(progs("jac", scan=True))
  def test_scan_jacfwd(self, prog): hyp_check(prog)

  @unittest.skipIf(LINE_012, NO_SCAN)
  @fuzz_settings(3)
  @given(progs("rev", scan=True))
  def test_scan_jacrev(self, prog): hyp_check(prog)

class TestVmapFuzzSharded(unittest.TestCase):
  """the same programs with the outermost batch sharded on two CPU devices, against the same numpy oracle"""
  def check(self, prog):
    try: hyp_check(prog)
    except NotImplementedError as e:
      assume(not sharded_limit(e))
      raise

  @fuzz_settings(25)
  @given(sharded_progs("f64"))
  def test_float64(self, prog): self.check(prog)

  @fuzz_settings(8)
  @given(sharded_progs("f32"))
  def test_float32(self, prog): self.check(prog)

  @fuzz_settings(10)
  @given(sharded_progs("rev"))
  def test_jacrev(self, prog): self.check(prog)   # per-example gradients, the batch on several devices

  @unittest.skipIf(LINE_012, NO_SCAN)
  @fuzz_settings(2)
  @given(sharded_progs("f64", scan=True))
  def test_scan_float64(self, prog): self.check(prog)

class within:
  """fail with TimeoutError after `seconds` instead of hanging (the scheduler hangs on some of the cases below)"""
  def __init__(self, seconds:int): self.seconds = seconds
  def __enter__(self):
    def alarm(*_): raise TimeoutError(f"took more than {self.seconds}s")
    self.prev = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(self.seconds)
  def __exit__(self, *_):
    signal.alarm(0)
    signal.signal(signal.SIGALRM, self.prev)

class TestFuzzRegressions(unittest.TestCase):
  """the fuzzer's failures, minimized by hand, each fixed where it was caused (docs/internals.md has the table)"""
  # chunked vmap: an OUTER scope whose per-example result folds to a constant. The outer world REDUCE was inlined into its consumer and
  # stored once (rangeify: an outer world reduce is never inlined); wrong numbers, no error
  def test_chunked_constant_result(self):
    np.testing.assert_equal(vmap(lambda r: r*0+1, chunk_size=1)(Tensor(np.random.default_rng(0).standard_normal(4))).numpy(), np.ones(4))

  def test_chunked_const_tensor(self):
    np.testing.assert_equal(vmap(lambda r: Tensor.ones(2), chunk_size=2)(Tensor.zeros(4)).numpy(), np.ones((4, 2)))

  def test_chunked_softmax_of_one(self):
    x = np.random.default_rng(0).standard_normal((4, 1))
    np.testing.assert_allclose(vmap(lambda r: r.softmax(0), chunk_size=2)(Tensor(x)).numpy(), np.ones((4, 1)))

  def test_chunked_nested_unmapped_softmax(self):
    x = Tensor([[[0.3]]])
    got = vmap(vmap(lambda: x.softmax(0), in_axes=(), chunk_size=1, axis_size=2), in_axes=(), chunk_size=1, axis_size=2)()
    np.testing.assert_allclose(got.numpy(), np.ones((2, 2, 1, 1, 1)))

  # scheduling never ended: a buffer inside a scope has the scope's RANGE, and its index can use it too (remove_bufferize substituted
  # the RANGE with an expression of itself, forever)
  def test_cat_flip(self):
    x = np.random.default_rng(0).standard_normal((2, 2, 1))
    with within(60): got = vmap(lambda e: e.cat(e).flip(0))(Tensor(x)).numpy()
    np.testing.assert_equal(got, np.concatenate([x, x], 1)[:, ::-1])

  # a batch of one example, realized, then read: 0.14's realize folds a CONTIGUOUS of a view that covers its buffer (vmap's axes of size 1
  # permuted) into that view and leaves it in the tensor, and reading the view on top raised "non-contiguous view" (fix-view-of-folded-contiguous)
  def test_contiguous_in_a_batch_of_one(self):
    x = np.random.default_rng(0).standard_normal((1, 1, 3, 1))
    got = vmap(vmap(lambda e: e.contiguous(), in_axes=-3, out_axes=-2), in_axes=-4, out_axes=-4)(Tensor(x).realize()).realize()
    np.testing.assert_equal(got.numpy(), x.transpose(0, 2, 1, 3))

  def test_nested_chunked_out_axes_1(self):
    x = np.random.default_rng(0).standard_normal((2, 2, 4))
    with within(60): got = vmap(vmap(lambda b: b, out_axes=1, chunk_size=1))(Tensor(x)).numpy()
    np.testing.assert_equal(got, x.transpose(0, 2, 1))

  def test_nested_chunked_closure_pad(self):
    x = np.random.default_rng(0).standard_normal(2)
    with within(60):
      got = vmap(lambda e: vmap(lambda: e.reshape(1).pad((0, 1)), in_axes=(), out_axes=1, chunk_size=1, axis_size=2)())(Tensor(x)).numpy()
    np.testing.assert_equal(got, np.stack([np.stack([[v, v], [0, 0]]) for v in x]))

  # a chunk tail, then an int cast: an element the upcast kernel never computes folded to inf, and folding inf's int cast raised
  # OverflowError (symbolic: a cast of inf or nan to an int is left to run)
  def test_chunked_tail_softmax_int_cast(self):
    x = np.random.default_rng(0).standard_normal((3, 2))
    got = vmap(lambda r: r.softmax(0).cast(dtypes.int32), chunk_size=2)(Tensor(x)).numpy()
    np.testing.assert_equal(got, np.zeros((3, 2), dtype=np.int32))

  # a REDUCE with no buffer in it (a cumsum of the computed Tensor.eye) inlined at two indexes (cat): two loops over one RANGE in a kernel,
  # the linearizer asserted. Vanilla 0.12.0 fails the same without vmap; jacfwd's basis is a Tensor.eye (split_store: each REDUCE of a
  # kernel gets its own RANGE)
  def test_vmap_over_eye_cumsum_cat_matmul(self):
    w = np.random.default_rng(3).standard_normal((1, 4))
    f = lambda x: Tensor(w) @ x.cumsum(0).cat(x.cumsum(0), dim=-2)
    got = vmap(lambda d: f(d.reshape(2, 1)))(Tensor.eye(2, dtype=dtypes.float64)).numpy()
    want = np.stack([w @ np.concatenate([np.cumsum(e.reshape(2, 1), 0)]*2, -2) for e in np.eye(2)])
    np.testing.assert_allclose(got, want)

  def test_jacfwd_cumsum_cat(self):
    x, w = np.random.default_rng(4).standard_normal(3), np.random.default_rng(5).standard_normal((2, 6))
    got = jacfwd(lambda x: Tensor(w) @ x.cumsum(0).cat(x.cumsum(0)))(Tensor(x)).numpy()
    np.testing.assert_allclose(got, w @ np.concatenate([np.tril(np.ones((3, 3)))]*2))

  # an index that is never valid, cast to a value (jacfwd of a chunked cat+shrink; upstream's stack of an arange): the constant folder
  # made an int Invalid and failed on it with TypeError (symbolic: such a cast is any value)
  def test_jacfwd_of_chunked_cat_shrink(self):
    x = np.random.default_rng(0).standard_normal((3, 4))
    got = jacfwd(vmap(lambda e: e.cat(e)[5:7], chunk_size=2))(Tensor(x)).numpy()
    want = np.zeros((3, 2, 3, 4))
    for b in range(3): want[b, 0, b, 1], want[b, 1, b, 2] = 1, 1
    np.testing.assert_equal(got, want)

  def test_stack_arange_index(self):
    x = np.random.default_rng(0).standard_normal(4)
    v = Tensor(x) * Tensor.arange(4, dtype=dtypes.float64)
    np.testing.assert_allclose(v.stack(v, dim=-1)[:, 1].numpy(), x * np.arange(4))

  # an unmapped 0-d input (in_axes=None) is a constant, and a constant cast to float16 was not rounded (symbolic: it is, as at run time)
  def test_unmapped_const_cast_float16(self):
    c, x = -0.05534959, np.random.default_rng(0).standard_normal(3)
    got = vmap(lambda r, s: r + s.cast(dtypes.float16).cast(dtypes.float64), in_axes=(0, None))(Tensor(x), Tensor(c, dtype=dtypes.float64))
    np.testing.assert_equal(got.numpy(), x + np.float64(np.float16(c)))

  # jacfwd of Tensor indexing: its basis is a Tensor.eye, and indexing an eye with a Tensor never compiled, in vanilla too ("infinite
  # loop in graph_rewrite": codegen's rule that lifts x+y out of a CMPNE matched its own result)
  def test_jacfwd_tensor_index_2d(self):
    x = np.random.default_rng(0).standard_normal((2, 2))
    np.testing.assert_equal(jacfwd(lambda x: x[Tensor([1, 0])])(Tensor(x)).numpy(), np.eye(4).reshape(2, 2, 2, 2)[[1, 0]])

  def test_tensor_index_of_eye(self):
    np.testing.assert_equal(Tensor.eye(4).reshape(4, 2, 2)[:, Tensor([0, 1])].numpy(), np.eye(4, dtype=np.float32).reshape(4, 2, 2)[:, [0, 1]])

  # chunked vmaps nested, the inner function computing (two reduces) from an input the outer vmap doesn't map: the inner chunk loop had
  # more kernels and was put outside the outer one, whose zero-init then ran per inner chunk and kept only the last one (zeros elsewhere)
  def test_nested_chunked_inner_value_not_of_outer_batch(self):
    two = lambda a: a - (a - a.sum(-1, keepdim=True)).sum(-1, keepdim=True)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((2, 2)), rng.standard_normal((3, 2, 2))
    want = np.stack([np.stack([np.stack([a - (a - a.sum()).sum(), B[i, j]], -1) for j, a in enumerate(A)]) for i in range(3)])
    for c_out, c_in in ((1, 1), (2, 1), (1, 2), (None, 1)):
      with self.subTest(chunks=(c_out, c_in)):
        got = vmap(vmap(lambda a, b: two(a).stack(b, dim=-1), chunk_size=c_in), in_axes=(None, 0), chunk_size=c_out)(Tensor(A), Tensor(B))
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    got = vmap(vmap(lambda a, b: a.log_softmax(0) + b, chunk_size=1), in_axes=(None, 0), chunk_size=1)(Tensor(A), Tensor(B))
    np.testing.assert_allclose(got.numpy(), np.stack([np_log_softmax(A, 1) + B[i] for i in range(3)]), atol=1e-12)

  # a sum over a stack along an inner axis counted every element twice, a silent wrong answer in vanilla too (no vmap): codegen's range
  # merging merged the stacked axis with a range an earlier merge had replaced, which gave it both ranges' sizes
  def test_sum_of_inner_stack(self):
    y = np.random.default_rng(0).standard_normal((2, 3))
    for dim in (0, 1, 2):
      with self.subTest(dim=dim):
        np.testing.assert_allclose(Tensor(y).stack(Tensor(y) * 2, dim=dim).sum().item(), 3 * y.sum())
        ys = np.random.default_rng(dim + 1).standard_normal((3, 2, 3))  # examples that differ: a batch slot taking another's value shows
        np.testing.assert_allclose(vmap(lambda r: r.stack(r, dim=dim).sum())(Tensor(ys)).numpy(), [2 * e.sum() for e in ys])
    np.testing.assert_allclose(jacfwd(lambda x: x.stack(x, dim=-2).sum())(Tensor(y)).numpy(), np.full((2, 3), 2.0))

  # the tangent of a max (split between ties) over a padded axis: a kernel with two sibling REDUCEs whose store codegen cut in two, each
  # piece with the same REDUCE RANGEs; the linearizer asserted, in vanilla too
  def test_vmap_jacfwd_log_softmax_of_pad(self):
    f = lambda x: x.reshape(1, 1).expand(2, 4).pad(((0, 2), (2, 0))).log_softmax(0)
    def np_f(x): return np_log_softmax(np.pad(np.full((2, 4), x), ((0, 2), (2, 0))), 0)
    for n in (1, 3):
      x = np.random.default_rng(n).standard_normal(n)
      with self.subTest(n=n): np.testing.assert_allclose(vmap(jacfwd(f))(Tensor(x)).numpy(), np.stack([num_jac(np_f)(v) for v in x]), atol=1e-6)

  # a chunked vmap nested in a chunked vmap, with an output of the inner one that doesn't depend on the outer batch: the inner chunk loop
  # ran inside the outer one for some kernels and outside it for others, "outer ranges ... aren't nested" (schedule: its kernels all go
  # in the outer loop, rerun per index with their zero-init)
  def test_nested_chunked_output_not_of_outer_batch(self):
    rng = np.random.default_rng(7)
    x0, x1 = rng.standard_normal((4, 3)), rng.standard_normal((4, 4, 3))
    f = lambda a, b: (b + a.sum(), a.sum())
    for out_axes in ((0, None), (0, 0)):
      with self.subTest(out_axes=out_axes):
        got = vmap(vmap(f, chunk_size=2), in_axes=(None, 0), out_axes=out_axes, chunk_size=2)(Tensor(x0), Tensor(x1))
        want = np_batch(np_batch(lambda a, b: (b + a.sum(), a.sum()), 4, 0, (0, 0)), 4, (None, 0), out_axes)(x0, x1)
        for g, w in zip(got, want): np.testing.assert_allclose(g.numpy(), w)

# *** campaigns: N programs from a seed, every failure kept, shrunk and written to a JSON lines file ***

def failure_kind(prog:Prog) -> str|None:
  """None when prog passes (or is skipped), else a short key of how it fails"""
  try: check_prog(prog)
  except Skip: return None
  except AssertionError as e: return "wrong numbers" if "wrong numbers" in str(e) else "wrong shape" if "shape" in str(e) else "assert"
  except Exception as e: return f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
  return None

def dce(prog:Prog) -> Prog:
  """drop the ops the outputs don't read, renumbering values"""
  live, n = set(prog.outs), prog.n_in
  for j in reversed(range(len(prog.ops))):
    if n+j in live: live |= set(prog.ops[j][1])
  keep = list(range(n)) + [n+j for j in range(len(prog.ops)) if n+j in live]
  new = {v: i for i, v in enumerate(keep)}
  ops = tuple((o[0], tuple(new[a] for a in o[1]), o[2]) for j, o in enumerate(prog.ops) if n+j in live)
  return replace(prog, ops=ops, outs=tuple(new[o] for o in prog.outs))

def shrink_candidates(prog:Prog):
  n = prog.n_in
  if len(prog.outs) > 1:
    for k in range(len(prog.outs)):
      yield dce(replace(prog, outs=(prog.outs[k],), levels=tuple((s, ia, oa[k], c) for s, ia, oa, c in prog.levels)))
  for v in range(n, n+len(prog.ops)-1):   # an earlier value as the output
    if len(prog.outs) == 1: yield dce(replace(prog, outs=(v,)))
  for j, op in enumerate(prog.ops):       # bypass an op: its readers read its first operand
    for a in set(op[1]):
      ops = tuple((o[0], tuple(a if x == n+j else x for x in o[1]), o[2]) for o in prog.ops)
      yield dce(replace(prog, ops=ops, outs=tuple(a if o == n+j else o for o in prog.outs)))
  for j, op in enumerate(prog.ops):       # a shorter scan, a scan body without one of its ops (its readers read its first operand)
    if op[0] != "scan": continue
    def with_p(p): return replace(prog, ops=prog.ops[:j] + ((op[0], op[1], p),) + prog.ops[j+1:])
    length, body, carry_v, y_v = op[2][0], op[2][4], op[2][5], op[2][7]
    if length > 1: yield with_p((1,) + op[2][1:])
    if length > 2: yield with_p((length-1,) + op[2][1:])
    for k, bop in enumerate(body):
      ren = lambda v: bop[1][0] if v == 2+k else v - (v > 2+k)
      nbody = tuple((o[0], tuple(map(ren, o[1])), o[2]) for o in body[:k] + body[k+1:])
      yield with_p(op[2][:4] + (nbody, ren(carry_v), op[2][6], ren(y_v)) + op[2][8:])
  if len(prog.levels) > (0 if prog.jac == "inside" or prog.has_scan else 1): yield replace(prog, levels=prog.levels[1:])
  for i, (s, ia, oa, c) in enumerate(prog.levels):
    def lv(**kw): return replace(prog, levels=prog.levels[:i] + ((kw.get("s", s), kw.get("ia", ia), kw.get("oa", oa), kw.get("c", c)),)
                                 + prog.levels[i+1:])
    if c is not None: yield lv(c=None)
    for s2 in range(1, s): yield lv(s=s2, c=None if c is None or c >= s2 else c)
    if isinstance(ia, tuple):
      for k, a in enumerate(ia):
        if a not in (0, None): yield lv(ia=ia[:k] + (0,) + ia[k+1:])
        if a is not None: yield lv(ia=ia[:k] + (None,) + ia[k+1:])
    if isinstance(oa, int) and oa != 0: yield lv(oa=0)
    if isinstance(oa, tuple):
      for k, a in enumerate(oa):
        if a != 0: yield lv(oa=oa[:k] + (0,) + oa[k+1:])
  for k, s in enumerate(prog.shapes):     # smaller inputs
    for i, v in enumerate(s):
      if v > 1: yield replace(prog, shapes=prog.shapes[:k] + (s[:i] + (v-1,) + s[i+1:],) + prog.shapes[k+1:])
  for k in range(n):                      # drop an input nothing reads
    if all(k not in o[1] for o in prog.ops) and k not in prog.outs and (prog.jac is None or k > 0) and n > 1:
      ren = lambda v: v - (v > k)
      levels = tuple((s, ia[:k] + ia[k+1:] if isinstance(ia, tuple) else ia, oa, c) for s, ia, oa, c in prog.levels)
      yield replace(prog, shapes=prog.shapes[:k] + prog.shapes[k+1:], ops=tuple((o[0], tuple(map(ren, o[1])), o[2]) for o in prog.ops),
                    outs=tuple(map(ren, prog.outs)), levels=levels)
  if prog.seed != 0: yield replace(prog, seed=0)

def valid(prog:Prog) -> bool:
  try:
    run_numpy(prog)
    return True
  except Exception: return False

def shrink(prog:Prog, kind:str, budget:float=120.0) -> Prog:
  """greedy: take the first smaller program that still fails the same way, until none does (or the time budget is spent)"""
  start = time.perf_counter()
  progress = True
  while progress and time.perf_counter() - start < budget:
    progress = False
    for cand in shrink_candidates(prog):
      if cand != prog and valid(cand) and failure_kind(cand) == kind:
        prog, progress = cand, True
        break
  return prog

def campaign(n:int, seed:int, out:str, sharded:bool=False, scan:bool=False):
  """every program counted: run and passed, skipped (by reason: the numpy interpreter refuses it, no sharded variant, a documented limit of
  sharded batches), failed (and of those, how many fail without vmap too: the fork's plain path)"""
  modes = ["f64", "f64", "f64", "f32", "jac", "rev"]
  counts, skipped, kinds, t0 = {"run": 0, "passed": 0, "skipped": 0, "failed": 0, "failed without vmap too": 0}, {}, {}, time.perf_counter()
  with open(out, "a") as f:
    for i in range(n):
      mode = modes[i % len(modes)]
      prog = draw_prog(RandDraw(seed*10**7 + i), mode, scan=scan)
      try:
        if sharded and (prog:=shard_variant(prog)) is None: raise Skip("no sharded variant (see shard_variant)")
        check_prog(prog)
        counts["passed"] += 1
      except Skip as e:
        counts["skipped"] += 1
        skipped[reason] = skipped.get(reason:=str(e).split(":")[0][:60], 0) + 1
      except Exception as e:
        if sharded_limit(e):
          counts["skipped"] += 1
          skipped["a documented limit of sharded batches"] = skipped.get("a documented limit of sharded batches", 0) + 1
          continue
        kind = failure_kind(prog) or f"flaky: {type(e).__name__}"
        counts["failed"] += 1
        if (plain:=plain_failure(prog)) is not None: counts["failed without vmap too"] += 1
        kinds[kind] = kinds.get(kind, 0) + 1
        small = shrink(prog, kind) if SHRINK and kinds[kind] <= 3 else prog
        f.write(json.dumps({"case": i, "mode": mode, "kind": kind, "plain": plain, "prog": repr(prog), "shrunk": repr(small),
                            "source": small.source()}) + "\n")
        f.flush()
        print(f"case {i} ({mode}) FAILS: {kind}" + (f" (without vmap too: {plain})" if plain else ""), flush=True)
      finally: counts["run"] += 1
      if (i+1) % 100 == 0: print(f"{i+1}/{n} {counts} {time.perf_counter()-t0:.0f}s", flush=True)
  print(f"done: {counts} in {time.perf_counter()-t0:.0f}s; skipped by reason: {skipped}; failures by kind: {kinds}")

if __name__ == "__main__":
  if (n:=int(os.getenv("FUZZ_CAMPAIGN", "0"))):
    campaign(n, int(os.getenv("FUZZ_SEED", "0")), os.getenv("FUZZ_OUT", "/tmp/vmap_fuzz.jsonl"), sharded=bool(int(os.getenv("FUZZ_SHARDED", "0"))),
             scan=bool(int(os.getenv("FUZZ_SCAN", "0"))))
  else: unittest.main()
