"""Forward-mode AD (tinygrad/jvp.py): every tangent rule against float64 central finite differences of the same tinygrad function and
against the derivative worked out in numpy; several arguments, pytree outputs, errors, and jvp through vmap scopes both ways."""
import unittest
import numpy as np
from tinygrad import Tensor, Device, dtypes, vmap
from tinygrad.uop.ops import UOp, Ops, AxisType
from tinygrad.jvp import jvp, jvp_tensors, jvp_uops, primitive_jvps
from tinygrad.vmap import KEPT
from tinygrad.fork_line import LINE_012
from vmap_oracle import VmapTestCase, rand, np_loop, np_softmax, skip_without_cpu_devices, half_missing

H = 1e-5   # float64 central differences: truncation ~H**2, rounding ~1e-16/H, both well under the 1e-6 tolerance

def pos(*shape:int) -> np.ndarray: return np.abs(rand(*shape)) + 0.5   # for log, sqrt, pow bases
def T(x:np.ndarray) -> Tensor: return Tensor(x)

def fd(f, xs:list[np.ndarray], ts:list[np.ndarray]) -> np.ndarray:
  """the central difference of the tinygrad function f at xs along ts, f evaluated at xs +- H*ts"""
  hi, lo = f(*[T(x + H*t) for x,t in zip(xs, ts)]).numpy(), f(*[T(x - H*t) for x,t in zip(xs, ts)]).numpy()
  return (hi - lo) / (2*H)

class JvpTestCase(VmapTestCase):
  def check(self, f, *xs:np.ndarray, df=None, fd_check=True):
    """jvp of f at xs along random tangents equals finite differences (1e-6) and the numpy derivative df(*xs, *ts) (1e-9)"""
    ts = [rand(*x.shape) for x in xs]
    y, dy = jvp(f, tuple(T(x) for x in xs), tuple(T(t) for t in ts))
    got = dy.numpy()
    self.assertEqual(dy.dtype, y.dtype)
    if fd_check: self.assert_close(got, fd(f, list(xs), ts), atol=1e-6, rtol=1e-6)
    if df is not None: self.assert_close(got, np.asarray(df(*xs, *ts), dtype=got.dtype))
    return got

class TestElementwise(JvpTestCase):
  def test_neg_add_sub(self): self.check(lambda x, y: -x + y - 2*x, rand(3, 4), rand(3, 4), df=lambda x, y, tx, ty: -3*tx + ty)
  def test_mul(self): self.check(lambda x, y: x * y * x, rand(3, 4), rand(3, 4), df=lambda x, y, tx, ty: 2*x*y*tx + x*x*ty)
  def test_div(self): self.check(lambda x, y: x / y, rand(5), pos(5), df=lambda x, y, tx, ty: tx/y - x*ty/y**2)
  def test_reciprocal(self): self.check(lambda x: x.reciprocal(), pos(5), df=lambda x, t: -t/x**2)
  def test_sqrt(self): self.check(lambda x: x.sqrt(), pos(5), df=lambda x, t: t/(2*np.sqrt(x)))
  def test_rsqrt(self): self.check(lambda x: x.rsqrt(), pos(5), df=lambda x, t: -t/(2*x**1.5))
  def test_exp(self): self.check(lambda x: x.exp(), rand(5), df=lambda x, t: np.exp(x)*t)
  def test_exp2(self): self.check(lambda x: x.exp2(), rand(5), df=lambda x, t: np.exp2(x)*np.log(2)*t)
  def test_log(self): self.check(lambda x: x.log(), pos(5), df=lambda x, t: t/x)
  def test_log2(self): self.check(lambda x: x.log2(), pos(5), df=lambda x, t: t/(x*np.log(2)))
  def test_sin(self): self.check(lambda x: x.sin(), rand(5), df=lambda x, t: np.cos(x)*t)
  def test_cos(self): self.check(lambda x: x.cos(), rand(5), df=lambda x, t: -np.sin(x)*t)
  def test_tan(self): self.check(lambda x: x.tan(), rand(5)*0.5, df=lambda x, t: t/np.cos(x)**2)
  def test_pow(self): self.check(lambda x, y: x ** y, pos(5), rand(5), df=lambda x, y, tx, ty: y*x**(y-1)*tx + x**y*np.log(x)*ty)
  def test_pow_const(self): self.check(lambda x: x ** 2.5, pos(5), df=lambda x, t: 2.5*x**1.5*t)
  def test_square(self): self.check(lambda x: x.square(), rand(5), df=lambda x, t: 2*x*t)
  def test_sigmoid(self): self.check(lambda x: x.sigmoid(), rand(5), df=lambda x, t: np.exp(-x)/(1+np.exp(-x))**2*t)
  def test_tanh(self): self.check(lambda x: x.tanh(), rand(5), df=lambda x, t: (1-np.tanh(x)**2)*t)
  def test_relu(self): self.check(lambda x: x.relu(), rand(8), df=lambda x, t: (x > 0)*t)
  def test_abs(self): self.check(lambda x: x.abs(), rand(8), df=lambda x, t: np.sign(x)*t)
  def test_maximum_minimum(self):
    self.check(lambda x, y: x.maximum(y) + 2*x.minimum(y), rand(8), rand(8),
               df=lambda x, y, tx, ty: np.where(x > y, tx, ty) + 2*np.where(x < y, tx, ty))
  def test_maximum_ties_split_evenly(self):
    x = np.array([1., 2., 3., -1.])
    self.check(lambda x, y: x.maximum(y), x, np.array([1., 0., 3., -1.]), fd_check=False,
               df=lambda x, y, tx, ty: np.where(x > y, tx, np.where(x < y, ty, (tx+ty)/2)))
  def test_clip(self): self.check(lambda x: x.clip(-0.5, 0.5), rand(8), df=lambda x, t: (np.abs(x) < 0.5)*t)
  def test_piecewise_constant_is_zero(self):
    # trunc, floor, round, sign and float results of comparisons
    self.check(lambda x: x.trunc() + x.floor() + x.round() + x.sign() + (x > 0.1).float() + (x != 0.3).float(), rand(8)*3,
               df=lambda x, t: np.zeros_like(x))
  def test_softplus_silu_gelu(self):
    self.check(lambda x: x.softplus() + x.silu() + x.gelu(), rand(6))
  # tinygrad's erf is a polynomial approximation (~1e-6), so only its finite differences know its exact derivative
  def test_erf(self): self.check(lambda x: x.erf(), rand(6)*0.5)

class TestBroadcast(JvpTestCase):
  """elementwise ops of srcs of different shapes (0.14's ALU ops broadcast them themselves, 0.12's Tensor expands them first): the
  tangent has the output's shape also where only the smaller src moves"""
  def test_constant_minus_broadcast_input(self):
    b = rand(4, 4, 3)
    self.check(lambda x: T(b) - x, rand(1, 3), df=lambda x, t: np.broadcast_to(-t, (4, 4, 3)))
  def test_lower_rank_input_plus_constant(self):
    b = rand(2, 5)
    self.check(lambda x: x + T(b), rand(5), df=lambda x, t: np.broadcast_to(t, (2, 5)))
  def test_both_inputs_broadcast(self): self.check(lambda x, y: x * y + x, rand(4, 1), rand(3), df=lambda x, y, tx, ty: tx*y + x*ty + tx)
  def test_where_of_broadcast_branch(self):
    c = rand(3, 4) > 0
    self.check(lambda x: Tensor(c).where(x, 0.0), rand(4), df=lambda x, t: np.where(c, t, 0.0))

class TestWhereCast(JvpTestCase):
  def test_where(self):
    self.check(lambda x, y: (x > y).where(x*y, y.exp()), rand(8), rand(8), df=lambda x, y, tx, ty: np.where(x > y, tx*y + x*ty, np.exp(y)*ty))
  def test_where_constant_branch(self): self.check(lambda x: (x > 0).where(x, 0.0), rand(8), df=lambda x, t: (x > 0)*t)
  def test_cast_float32(self):
    got = self.check(lambda x: x.cast(dtypes.float32)*3, rand(6), fd_check=False, df=lambda x, t: t.astype(np.float32)*3)
    self.assertEqual(got.dtype, np.float32)
  def test_cast_half(self):
    if why := half_missing(): self.skipTest(why)
    self.check(lambda x: x.cast(dtypes.half), rand(6), fd_check=False, df=lambda x, t: t.astype(np.float16))
  def test_cast_half_and_back(self):
    if why := half_missing(): self.skipTest(why)
    self.check(lambda x: x.cast(dtypes.half).cast(dtypes.float64)*x, rand(6), fd_check=False,
               df=lambda x, t: t.astype(np.float16).astype(np.float64)*x + x.astype(np.float16).astype(np.float64)*t)
  def test_cast_int_is_zero(self):
    _, dy = jvp(lambda x: (x*3).cast(dtypes.int32), (T(rand(5)),), (T(rand(5)),))
    self.assertEqual(dy.dtype, dtypes.int32)
    np.testing.assert_equal(dy.numpy(), np.zeros(5, np.int32))
  def test_int_ops_are_zero(self):
    # IDIV, MOD, AND/OR/XOR, SHL/SHR on an int made from x, then back to float
    def f(x):
      i, u = (x*100).cast(dtypes.int32), (x.abs()*100).cast(dtypes.uint32)
      return ((i // 3) + (i % 5) + (i & 6) + (i | 1) + (i ^ 3)).float() + ((u << 1) + (u >> 1)).float() + x
    self.check(f, rand(6), fd_check=False, df=lambda x, t: t)

class TestReduce(JvpTestCase):
  def test_sum(self): self.check(lambda x: x.sum(1), rand(3, 5), df=lambda x, t: t.sum(1))
  def test_sum_all(self): self.check(lambda x: (x*x).sum(), rand(3, 5), df=lambda x, t: (2*x*t).sum())
  def test_max(self): self.check(lambda x: x.max(0), rand(4, 3), df=lambda x, t: np.take_along_axis(t, x.argmax(0)[None], 0)[0])
  def test_min(self): self.check(lambda x: x.min(1), rand(4, 3), df=lambda x, t: np.take_along_axis(t, x.argmin(1)[:, None], 1)[:, 0])
  def test_max_ties_split_evenly(self):
    x = np.array([[1., 3., 3., 0.], [2., 2., 2., 2.], [5., -1., 0., 5.]])
    def df(x, t):
      m = x == x.max(1, keepdims=True)
      return (m*t).sum(1) / m.sum(1)
    self.check(lambda x: x.max(1), x, fd_check=False, df=df)
  def test_prod(self): self.check(lambda x: x.prod(1), pos(3, 4), df=lambda x, t: (x.prod(1, keepdims=True)*t/x).sum(1))
  def test_mean(self): self.check(lambda x: x.mean(0), rand(4, 3), df=lambda x, t: t.mean(0))
  def test_prod_with_zeros(self):
    # rows with no, one, two and three zeros: t_i * prod_{j!=i} x_j, never ret/x (0/0 at a zero made the whole row nan)
    x = np.array([[2., -1.5, 3., .5], [2., 0., 3., .5], [0., 1.5, 0., .5], [0., 0., 0., 2.]])
    def df(x, t): return sum(t[:, i] * np.prod(np.delete(x, i, 1), 1) for i in range(x.shape[1]))
    self.check(lambda x: x.prod(1), x, df=df)
  def test_var(self):
    self.check(lambda x: x.var(1), rand(3, 6), df=lambda x, t: 2*((x - x.mean(1, keepdims=True))*(t - t.mean(1, keepdims=True))).sum(1)/5)
  def test_logsumexp(self): self.check(lambda x: x.logsumexp(1), rand(3, 5), df=lambda x, t: (np_softmax(x)*t).sum(1))

class TestMovement(JvpTestCase):
  def test_reshape(self): self.check(lambda x: x.reshape(2, 6)*x.reshape(2, 6), rand(3, 4), df=lambda x, t: 2*(x*t).reshape(2, 6))
  def test_expand(self): self.check(lambda x: x.reshape(3, 1).expand(3, 4)*2, rand(3), df=lambda x, t: np.broadcast_to(2*t[:, None], (3, 4)))
  def test_permute(self): self.check(lambda x: x.permute(2, 0, 1).sin(), rand(2, 3, 4), df=lambda x, t: (np.cos(x)*t).transpose(2, 0, 1))
  def test_pad(self): self.check(lambda x: x.pad(((1, 2), (0, 1))).exp(), rand(2, 3), df=lambda x, t: np.pad(np.exp(x)*t, ((1, 2), (0, 1))))
  def test_pad_value(self):
    self.check(lambda x: x.pad(((1, 1),), value=2.0)*x.sum(), rand(3), df=lambda x, t: np.pad(t, 1)*x.sum() + np.pad(x, 1, constant_values=2)*t.sum())
  def test_shrink(self): self.check(lambda x: x[1:, ::2]*3, rand(3, 4), df=lambda x, t: 3*t[1:, ::2])
  def test_flip(self): self.check(lambda x: x.flip(1)*x, rand(3, 4), df=lambda x, t: t[:, ::-1]*x + x[:, ::-1]*t)
  def test_repeat(self): self.check(lambda x: x.repeat(2, 1), rand(2, 3), df=lambda x, t: np.tile(t, (2, 1)))

class TestComposite(JvpTestCase):
  def test_matmul(self):
    self.check(lambda a, b: a @ b, rand(3, 4), rand(4, 2), df=lambda a, b, ta, tb: ta @ b + a @ tb)
  def test_softmax(self):
    self.check(lambda x: x.softmax(), rand(3, 5), df=lambda x, t: (s:=np_softmax(x))*(t - (s*t).sum(-1, keepdims=True)))
  def test_log_softmax(self): self.check(lambda x: x.log_softmax(), rand(3, 5), df=lambda x, t: t - (np_softmax(x)*t).sum(-1, keepdims=True))
  def test_cumsum(self): self.check(lambda x: x.cumsum(1), rand(3, 5), df=lambda x, t: t.cumsum(1))
  def test_fancy_index(self):
    self.check(lambda x: x[Tensor([2, 0, 2, 1])]*x[0], rand(3, 4), df=lambda x, t: t[[2, 0, 2, 1]]*x[0] + x[[2, 0, 2, 1]]*t[0])
  def test_gather(self):
    idx = np.array([[0, 2], [1, 1], [3, 0]])
    self.check(lambda x: x.gather(1, Tensor(idx)), rand(3, 4), df=lambda x, t: np.take_along_axis(t, idx, 1))
  def test_stack_cat(self):
    self.check(lambda x, y: Tensor.stack(x, y*x).cat(Tensor.stack(y, x), dim=1), rand(3), rand(3),
               df=lambda x, y, tx, ty: np.concatenate([np.stack([tx, ty*x + y*tx]), np.stack([ty, tx])], axis=1))
  def test_conv2d(self):
    self.check(lambda x, w: x.conv2d(w), rand(1, 2, 5, 5), rand(3, 2, 3, 3))
  def test_layernorm(self): self.check(lambda x: x.layernorm(), rand(3, 6))
  def test_sort(self): self.check(lambda x: x.sort(1)[0], rand(3, 5), df=lambda x, t: np.take_along_axis(t, np.argsort(x, 1), 1))

class TestStructural(JvpTestCase):
  def test_contiguous(self): self.check(lambda x: (x*2).contiguous().sin(), rand(5), df=lambda x, t: np.cos(2*x)*2*t)
  def test_contiguous_backward(self): self.check(lambda x: x.contiguous_backward()*x, rand(5), df=lambda x, t: 2*x*t)
  def test_detach(self): self.check(lambda x: x.detach()*x, rand(5), fd_check=False, df=lambda x, t: x*t)
  def test_detached_softmax_is_exact(self):
    # softmax detaches its max: the tangent still is softmax's (the max only shifts, it cancels)
    self.check(lambda x: x.softmax(0), rand(6), df=lambda x, t: (s:=np_softmax(x))*(t - (s*t).sum()))
  def test_multi(self):
    skip_without_cpu_devices()
    # sharded primal and tangent (MULTI), and a shard inside the function (COPY, SHRINK on a DEFINE_VAR, MULTI)
    x, t, devs = rand(4, 3), rand(4, 3), ("CPU:0", "CPU:1")
    _, dy = jvp(lambda a: (a.sin()*a).sum(1), (T(x).shard(devs, axis=0),), (T(t).shard(devs, axis=0),))
    self.assert_close(dy.numpy(), ((np.cos(x)*x + np.sin(x))*t).sum(1))
    _, dy = jvp(lambda a: a.shard(devs, axis=0).exp(), (T(x),), (T(t),))
    self.assert_close(dy.numpy(), np.exp(x)*t)
  def test_unrelated_output_is_zero(self):
    y, dy = jvp(lambda x: Tensor.ones(2, 3, dtype=dtypes.float64)*4, (T(rand(3)),), (T(rand(3)),))
    self.assert_close(dy.numpy(), np.zeros((2, 3)))

class TestApi(JvpTestCase):
  def test_constant_outputs_are_on_the_primals_device(self):
    # a Tensor of constants alone has no device on 0.14 (and would realize on the CPU): jvp puts a zero tangent and a constant output on
    # the primals' device
    x = T(rand(3))
    y, dy = jvp(lambda x: ((x*3).cast(dtypes.int32), Tensor(2.0)), (x,), (T(rand(3)),))
    self.assertEqual([t.device for t in y + dy], [x.device]*4)
    np.testing.assert_equal(dy[0].numpy(), np.zeros(3, np.int32))
  def test_several_arguments(self):
    x, y, z = rand(4), rand(4), pos(4)
    tx, ty, tz = rand(4), rand(4), rand(4)
    out, dout = jvp(lambda x, y, z: x*y + z.log(), (T(x), T(y), T(z)), (T(tx), T(ty), T(tz)))
    self.assert_close(out.numpy(), x*y + np.log(z))
    self.assert_close(dout.numpy(), tx*y + x*ty + tz/z)
  def test_none_tangent_is_zero(self):
    x, y, tx = rand(4), rand(4), rand(4)
    _, dout = jvp(lambda x, y: x*y, (T(x), T(y)), (T(tx), None))
    self.assert_close(dout.numpy(), tx*y)
  def test_pytree_primals(self):
    x, y, tx, ty = rand(3), rand(2), rand(3), rand(2)
    out, dout = jvp(lambda p: p["x"].exp() * p["y"][0].sum(), ({"x": T(x), "y": (T(y),)},), ({"x": T(tx), "y": (T(ty),)},))
    self.assert_close(dout.numpy(), np.exp(x) * tx * y.sum() + np.exp(x) * ty.sum())
  def test_pytree_dict_tangents_pair_by_key(self):
    # the tangents' dict written in another key order: each tangent still goes with the primal of its key (JAX pairs them by key)
    x, y, tx, ty = rand(3), rand(3), rand(3), rand(3)
    _, dout = jvp(lambda p: p["x"].sin() + p["y"] * 3, ({"x": T(x), "y": T(y)},), ({"y": T(ty), "x": T(tx)},))
    self.assert_close(dout.numpy(), np.cos(x) * tx + 3 * ty)
  def test_pytree_structure_mismatch(self):
    with self.assertRaisesRegex(TypeError, "jvp primal 0 and its tangent have different structures"):
      jvp(lambda p: p["x"], ({"x": T(rand(3))},), ((T(rand(3)),),))
  def test_has_aux(self):
    # JAX's has_aux: fn returns (output, aux), jvp (output, tangent, aux), aux not differentiated, a Python number in it as it was
    x, tx = rand(3), rand(3)
    y, dy, aux = jvp(lambda x: (x.sin(), {"s": x.sum(), "n": 2}), (T(x),), (T(tx),), has_aux=True)
    self.assert_close(y.numpy(), np.sin(x)); self.assert_close(dy.numpy(), np.cos(x) * tx)
    self.assert_close(aux["s"].numpy(), x.sum()); self.assertEqual(aux["n"], 2)
    with self.assertRaisesRegex(TypeError, "has_aux=True fn must return a pair"): jvp(lambda x: x.sin(), (T(x),), (T(tx),), has_aux=True)
  def test_has_aux_in_vmap(self):
    x, tx = rand(4, 3), rand(4, 3)
    y, dy, aux = vmap(lambda x, t: jvp(lambda x: (x.exp(), x.max()), (x,), (t,), has_aux=True))(T(x), T(tx))
    self.assert_close(dy.numpy(), np.exp(x) * tx); self.assert_close(aux.numpy(), x.max(1))
  def test_pytree_output(self):
    x, tx = rand(3), rand(3)
    out, dout = jvp(lambda x: {"a": x.sin(), "b": (x*2, [x.exp(), x.sum()])}, (T(x),), (T(tx),))
    self.assertEqual(set(dout), {"a", "b"})
    self.assertIsInstance(dout["b"], tuple)
    self.assertIsInstance(dout["b"][1], list)
    self.assert_close(out["b"][1][0].numpy(), np.exp(x))
    for got, want in [(dout["a"], np.cos(x)*tx), (dout["b"][0], 2*tx), (dout["b"][1][0], np.exp(x)*tx), (dout["b"][1][1], tx.sum())]:
      self.assert_close(got.numpy(), np.asarray(want))
  def test_none_in_output(self):
    # None is an empty subtree of the output (JAX's pytrees): its tangent is None
    x, tx = rand(3), rand(3)
    out, dout = jvp(lambda x: (x.sin(), None, {"a": None, "b": x * 2}), (T(x),), (T(tx),))
    self.assertIsNone(out[1])
    self.assertEqual((dout[1], dout[2]["a"]), (None, None))
    self.assert_close(dout[0].numpy(), np.cos(x) * tx)
    self.assert_close(dout[2]["b"].numpy(), 2 * tx)
  def test_tangent_is_the_primal(self):
    # the tangent of a reshape of x along x is that same reshape of x: the driver must not read it as "no rule"
    x = rand(3, 4)
    xt = T(x)
    _, dy = jvp(lambda x: x.reshape(12), (xt,), (xt,))
    self.assert_close(dy.numpy(), x.reshape(12))
  def test_unrealized_primal(self):
    x, t = rand(5), rand(5)
    xs = T(x).exp()   # a graph, not a buffer: matched by its UOp
    _, dy = jvp(lambda e: e.log(), (xs,), (T(t),))
    self.assert_close(dy.numpy(), t/np.exp(x))
  def test_jvp_tensors_graph_form(self):
    x, t = rand(5), rand(5)
    xt = T(x)
    y = (xt*xt).sum()
    z = xt.sin()
    dy, dz = jvp_tensors((y, z), (xt,), (T(t),))
    self.assert_close(dy.numpy(), np.asarray((2*x*t).sum()))
    self.assert_close(dz.numpy(), np.cos(x)*t)
  def test_jvp_tensors_inner_input(self):
    # an input in the middle of the graph: only its own tangent moves it
    x, t = rand(5), rand(5)
    xt = T(x)
    e = xt.exp()
    self.assert_close(jvp_tensors((e.log()*xt,), (e,), (T(t),))[0].numpy(), t/np.exp(x)*x)
  def test_jvp_uops_sub_fdiv(self):
    # SUB and FDIV don't come from Tensor methods, but they have rules
    a, b, ta, tb = pos(4), pos(4), rand(4), rand(4)
    A, B, TA, TB = T(a), T(b), T(ta), T(tb)
    for op, want in [(Ops.SUB, ta - tb), (Ops.FDIV, ta/b - a*tb/b**2)]:
      with self.subTest(op=op.name):
        # a raw FDIV runs only where the renderer has code for it (the C renderers; not the PYTHON emulator, upstream's as ours)
        if op not in Device[Device.DEFAULT].renderer.code_for_op: self.skipTest(f"{Device.DEFAULT}'s renderer has no code for {op}")
        got = jvp_uops([UOp(op, dtypes.float64, (A.uop, B.uop))], [A.uop, B.uop], [TA.uop, TB.uop])[0]
        self.assert_close(Tensor(got).numpy(), want)
  def test_transpose_of_gradient(self):
    # <u, jvp(t)> == <vjp(u), t>: primitive_jvps and pm_gradient are each other's transpose, ties included
    x = np.array([[1., 3., 3.], [2., 2., 2.]])
    for f in [lambda x: x.max(1), lambda x: x.maximum(x.flip(1)), lambda x: (x.softmax()*x).sum(0), lambda x: x.cumsum(1).sin()]:
      t, xt = rand(2, 3), T(x)
      y, dy = jvp(f, (xt,), (T(t),))
      u = rand(*y.shape)
      g = y.gradient(xt, gradient=T(u))[0]
      self.assertAlmostEqual(float((u*dy.numpy()).sum()), float((g.numpy()*t).sum()), places=9)
  def test_forward_over_reverse(self):
    # a Hessian-vector product: the jvp of a gradient
    x, t = rand(4), rand(4)
    def grad(x): return (x**3).sum().gradient(x)[0]
    self.check(grad, x, df=lambda x, t: 6*x*t)

class TestClosedOver(JvpTestCase):
  """as in JAX, fn gets fresh copies of the primals: a Tensor it closes over is a constant, even the primal itself"""
  def test_primal_closed_over(self):
    x, t = rand(5), rand(5)
    xt = T(x)
    self.assert_close(jvp(lambda z: z * xt, (xt,), (T(t),))[1].numpy(), x*t)
  def test_computed_from_primal_closed_over(self):
    x, t = rand(5), rand(5)
    xt = T(x)
    s = xt.sin()
    self.assert_close(jvp(lambda z: z.sin() - s, (xt,), (T(t),))[1].numpy(), np.cos(x)*t)
  def test_same_tensor_twice(self):
    # each primal moves along its own tangent: d(a*b) = ta*b + a*tb at a = b = x
    x, ta, tb = rand(4), rand(4), rand(4)
    xt = T(x)
    self.assert_close(jvp(lambda a, b: a*b, (xt, xt), (T(ta), T(tb)))[1].numpy(), ta*x + x*tb)

class TestErrors(VmapTestCase):
  def test_wrong_count(self):
    # a TypeError, as JAX's (primals and tangents of different tree structures)
    with self.assertRaisesRegex(TypeError, "2 primals but 1 tangents"): jvp(lambda x, y: x*y, (Tensor([1.0]), Tensor([2.0])), (Tensor([1.0]),))
  def test_more_tangents_than_primals(self):
    # the extra tangent was dropped and the call went on
    with self.assertRaisesRegex(TypeError, "1 primals but 2 tangents"): jvp(lambda x: x*2, (Tensor([1.0]),), (Tensor([1.0]), Tensor([2.0])))
  def test_tuple_tangent_for_list_primal(self):
    # as JAX's treedefs: a list isn't a tuple
    with self.assertRaisesRegex(TypeError, "different structures"): jvp(lambda p: p[0]*p[1], ([T(rand(2)), T(rand(2))],), ((T(rand(2)), T(rand(2))),))
  def test_shape_mismatch(self):
    with self.assertRaisesRegex(ValueError, r"tangent 0 has shape \(2,\), but its primal has shape \(3,\)"):
      jvp(lambda x: x*2, (Tensor([1.0, 2.0, 3.0]),), (Tensor([1.0, 2.0]),))
  def test_dtype_mismatch(self):
    with self.assertRaisesRegex(TypeError, "tangent 0 has dtype dtypes.float"):
      jvp(lambda x: x*2, (Tensor([1.0], dtype=dtypes.float64),), (Tensor([1.0], dtype=dtypes.float32),))
  def test_int_primal(self):
    with self.assertRaisesRegex(TypeError, "only floating point primals have tangents"): jvp(lambda x: x*2, (Tensor([1]),), (Tensor([1]),))
  def test_not_tuples(self):
    with self.assertRaisesRegex(TypeError, "must be tuples or lists"): jvp(lambda x: x, Tensor([1.0]), Tensor([1.0]))
  def test_non_tensor_output(self):
    with self.assertRaisesRegex(TypeError, "must return a Tensor"): jvp(lambda x: (x, "a"), (Tensor([1.0]),), (Tensor([1.0]),))
  def test_number_output_is_a_constant(self):
    # as in JAX: a Python number or numpy value fn returns is an array, its tangent zero
    (y, c, a), (dy, dc, da) = jvp(lambda x: (x*2, 3.5, np.ones(2)), (Tensor([1.0]),), (Tensor([0.5]),))
    self.assert_close(y.numpy(), np.array([2.0])); self.assert_close(dy.numpy(), np.array([1.0]))
    self.assert_close(c.numpy(), np.array(3.5)); self.assert_close(dc.numpy(), np.array(0.0))
    self.assert_close(a.numpy(), np.ones(2)); self.assert_close(da.numpy(), np.zeros(2))
  def test_op_without_rule(self):
    # MULACC (a late, codegen-level op no Tensor op makes) has no tangent rule: the error names it, no silent zero
    x, t = Tensor(rand(3)).uop, Tensor(rand(3)).uop
    with self.assertRaisesRegex(NotImplementedError, "no tangent rule for Ops.MULACC"): jvp_uops([UOp(Ops.MULACC, x.dtype, (x, x, x))], [x], [t])
  def test_assign_is_its_value(self):
    # clone is an assign to an empty buffer: the tangent is the value's
    x, t = rand(3), rand(3)
    self.assert_close(jvp(lambda x: Tensor.empty(3, dtype=dtypes.float64).assign(x*2), (Tensor(x),), (Tensor(t),))[1].numpy(), 2*t)
  def test_bitcast_is_zero(self):
    # reinterpreted bits are no derivative: a zero tangent of the output's shape and dtype, as JAX's (float0 for an int) and as
    # upstream's gradient, which gives none (a float64 bitcast to float32 on 0.12 is built from an int64 one)
    x = rand(3)
    for dt, np_dt in ((dtypes.int64, np.int64), (dtypes.float32, np.float32)):
      with self.subTest(dtype=dt):
        y, dy = jvp(lambda a: a.bitcast(dt), (Tensor(x),), (Tensor(rand(3)),))
        np.testing.assert_equal(y.numpy(), x.view(np_dt))
        self.assertEqual((dy.shape, dy.dtype), (y.shape, dt))
        np.testing.assert_equal(dy.numpy(), np.zeros(x.view(np_dt).shape, np_dt))
  def test_bitcast_zero_tangent(self):
    _, dy = jvp(lambda x, y: x.bitcast(dtypes.int64).cast(dtypes.float64)*0 + y, (Tensor(rand(3)), Tensor(rand(3))), (None, Tensor(np.ones(3))))
    np.testing.assert_equal(dy.numpy(), np.ones(3))
  def test_rule_table_covers_tensor_ops(self):
    # the ops Tensor methods put in the graph, on either line (0.14: CDIV/CMOD/FLOORDIV/FLOORMOD for IDIV/MOD, STACK, SUB, FDIV; no
    # REDUCE_AXIS, MULTI or ASSIGN)
    names = ("ADD MUL MAX NEG RECIPROCAL SQRT EXP2 LOG2 SIN POW TRUNC CMPLT CMPNE CMPEQ IDIV MOD CDIV CMOD FLOORDIV FLOORMOD AND OR XOR SHL "
             "SHR WHERE CAST BITCAST REDUCE_AXIS REDUCE RESHAPE EXPAND PERMUTE PAD SHRINK FLIP VMAPIN VMAPOUT CONTIGUOUS DETACH CONTIGUOUS_BACKWARD "
             "COPY MULTI ASSIGN STACK SUB FDIV").split()
    ops = {getattr(Ops, n) for n in names if hasattr(Ops, n)} | ({Ops.STORE, Ops.AFTER} if not LINE_012 else set())  # 0.14's assign
    self.assertEqual(ops - set(primitive_jvps), set())

class TestVmap(JvpTestCase):
  @staticmethod
  def f(x): return (x.softmax()*x).sum() + x.max()*x[0]   # realizes inside the scope (softmax) and reduces
  @staticmethod
  def df(x, t):
    s = np_softmax(x)
    ds = s*(t - (s*t).sum())
    return (ds*x + s*t).sum() + t[x.argmax()]*x[0] + x.max()*t[0]

  def test_jvp_of_vmap(self):
    xs, ts = rand(6, 5), rand(6, 5)
    ys, dys = jvp(vmap(self.f), (T(xs),), (T(ts),))
    self.assert_close(ys.numpy(), np_loop(lambda x: (np_softmax(x)*x).sum() + x.max()*x[0], xs))
    self.assert_close(dys.numpy(), np_loop(self.df, xs, ts))
  def test_vmap_of_jvp(self):
    xs, ts = rand(6, 5), rand(6, 5)
    self.assert_close(vmap(lambda x, t: jvp(self.f, (x,), (t,))[1])(T(xs), T(ts)).numpy(), np_loop(self.df, xs, ts))
  def test_vmap_of_jacfwd_through_contiguous_under_spec2(self):
    # jacfwd's tangents are made of constants, which have no device: Tensor.contiguous leaves such a value as it is, and so must its
    # tangent rule, or SPEC=2's check that the graph renders back to itself fails
    from tinygrad import jacfwd
    from tinygrad.helpers import Context
    xs = rand(3, 2)
    with Context(SPEC=2): got = vmap(jacfwd(lambda x: (-(-x)).contiguous().sin()))(T(xs)).numpy()
    self.assert_close(got, np_loop(lambda x: np.diag(np.cos(x)), xs))
  def test_vmap_of_jvp_unbatched_weight(self):
    # the weight is outside the scope and has a tangent too: the tangent of each example gets the weight's tangent
    xs, ts, w, tw = rand(6, 4), rand(6, 4), rand(4), rand(4)
    got = vmap(lambda x, t: jvp(lambda x, w: (x*w).sin().sum(), (x, T(w)), (t, T(tw)))[1])(T(xs), T(ts)).numpy()
    self.assert_close(got, np_loop(lambda x, t: (np.cos(x*w)*(t*w + x*tw)).sum(), xs, ts))
  def test_jvp_of_nested_vmap(self):
    xs, ts = rand(3, 4, 5), rand(3, 4, 5)
    _, dys = jvp(vmap(vmap(lambda x: (x*x).sum()*x.max())), (T(xs),), (T(ts),))
    self.assert_close(dys.numpy(), np_loop(lambda x, t: np_loop(lambda x, t: 2*(x*t).sum()*x.max() + (x*x).sum()*t[x.argmax()], x, t), xs, ts))
  def test_jacobian_columns(self):
    # jvp_tensors under a vmap over the basis: the Jacobian of a graph built outside the scope, column by column
    x = rand(3)
    xt = T(x)
    y = Tensor.stack(xt[0]*xt[1], xt[2].sin(), xt.sum())
    jac = vmap(lambda v: jvp_tensors((y,), (xt,), (v,))[0], in_axes=1, out_axes=1)(Tensor.eye(3, dtype=dtypes.float64)).numpy()
    self.assert_close(jac, np.array([[x[1], x[0], 0], [0, 0, np.cos(x[2])], [1, 1, 1]]))
  def test_inner_scope_stack_jacobian(self):
    # an inner vmap scope, a stack of values that depend on gamma multiplied by gamma again; the Jacobian through an outer vmap (its
    # gamma column once came out zero)
    z = np.array([0.3, 0.7, 1.3])   # x0, x1, gamma
    zt = T(z)
    r = UOp.range(1, -1, AxisType.LOOP)
    vg = (KEPT, r)
    xv, g = zt[:2].reshape(2, 1).vmapin(vg), zt[2:]
    y = xv * g
    output = (g * Tensor.stack(y[0], y[1])).vmapout(vg).flatten()
    want = np.array([[z[2]**2, 0, 2*z[2]*z[0]], [0, z[2]**2, 2*z[2]*z[1]]])
    self.assert_close(jvp_tensors((output,), (zt,), (T(np.array([0., 0., 1.])),))[0].numpy(), want[:, 2])
    jac = vmap(lambda v: jvp_tensors((output,), (zt,), (v,))[0], in_axes=1, out_axes=1)(Tensor.eye(3, dtype=dtypes.float64)).numpy()
    self.assert_close(jac, want)

if __name__ == "__main__":
  unittest.main()
