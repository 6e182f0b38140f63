"""jvp, jacfwd, jacrev and hessian composed with vmap in every order, and a JVP under an outer vmap whose primal has an inner vmap and
g * stack(...) of values depending on g (the derivative along g once came out zero). Oracles: numpy central differences in float64 of
a numpy version of each function, looped over examples, and analytic derivatives."""
import unittest
import numpy as np
from tinygrad import Tensor, UOp, dtypes, vmap, jvp, jacfwd, jacrev, hessian
from tinygrad.uop.ops import AxisType
from tinygrad.jvp import jvp_tensors
from tinygrad.vmap import varg
from vmap_oracle import VmapTestCase, ScheduledTestCase, rand, kernels, np_softmax, param, schedule_cache_size, cpu_devices_missing

def np_jac(nfn, x:np.ndarray, h=1e-6) -> np.ndarray:
  """the Jacobian of nfn at x by central differences: shape out.shape + x.shape"""
  cols = [(np.asarray(nfn(x + h*e)) - np.asarray(nfn(x - h*e))) / (2*h) for e in np.eye(x.size).reshape(x.size, *x.shape)]
  return np.moveaxis(np.stack(cols), 0, -1).reshape(np.shape(nfn(x)) + x.shape)

def np_jvp(nfn, x:np.ndarray, t:np.ndarray, h=1e-6) -> np.ndarray: return (np.asarray(nfn(x + h*t)) - np.asarray(nfn(x - h*t))) / (2*h)

# per-example functions, as (tinygrad, numpy) pairs
def mlp(x): return ((x.reshape(1, -1) @ W1).tanh() @ W2).reshape(-1).exp()
def np_mlp(x): return np.exp(np.tanh(x.reshape(1, -1) @ W1.numpy()) @ W2.numpy()).reshape(-1)
W1, W2 = Tensor(rand(4, 5)), Tensor(rand(5, 3))
def sm(x): return x.softmax() * x.sum()
def np_sm(x): return np_softmax(x) * x.sum()
def idx(x): return Tensor.stack(x[:2].sum(), x[2:].sum(), x.max())[[0, 2, 1, 0]] * x[0]       # indexing a reduce: realized inside
def np_idx(x): return np.stack([x[:2].sum(), x[2:].sum(), x.max()])[[0, 2, 1, 0]] * x[0]
FUNCS = {"mlp": (mlp, np_mlp), "softmax": (sm, np_sm), "index_reduce": (idx, np_idx)}

class TestCompositions(VmapTestCase):
  def each(self, check):
    for name, (f, nf) in FUNCS.items():
      with self.subTest(fn=name): check(f, nf)

  def test_vmap_of_jvp(self):
    def check(f, nf):
      xs, ts = rand(6, 4), rand(6, 4)
      got = vmap(lambda x, t: jvp(f, (x,), (t,))[1])(Tensor(xs), Tensor(ts)).numpy()
      self.assert_close(got, np.stack([np_jvp(nf, x, t) for x, t in zip(xs, ts)]), atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_jvp_of_vmap(self):
    def check(f, nf):
      xs, ts = rand(6, 4), rand(6, 4)
      out, tan = jvp(vmap(f), (Tensor(xs),), (Tensor(ts),))
      self.assert_close(out.numpy(), np.stack([nf(x) for x in xs]))
      self.assert_close(tan.numpy(), np.stack([np_jvp(nf, x, t) for x, t in zip(xs, ts)]), atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_jvp_of_vmap_batch_axis_last(self):
    # the batch put last is a PERMUTE moved into the batched elementwise ops: the argument jvp seeds must stay in the graph as it is
    def check(f, nf):
      xs, ts = rand(6, 4), rand(6, 4)
      _, tan = jvp(vmap(f, out_axes=-1), (Tensor(xs),), (Tensor(ts),))
      self.assert_close(tan.numpy(), np.stack([np_jvp(nf, x, t) for x, t in zip(xs, ts)], -1), atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_jacobians_of_vmap_batch_axis_last(self):
    def check(f, nf):
      xs = rand(3, 4)
      want = np_jac(lambda b: np.stack([nf(x) for x in b], -1), xs)
      for jac in (jacfwd, jacrev):
        with self.subTest(jac=jac.__name__): self.assert_close(jac(vmap(f, out_axes=-1))(Tensor(xs)).numpy(), want, atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_vmap_of_jacfwd(self):
    def check(f, nf):
      xs = rand(5, 4)
      self.assert_close(vmap(jacfwd(f))(Tensor(xs)).numpy(), np.stack([np_jac(nf, x) for x in xs]), atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_jacfwd_of_vmap(self):
    def check(f, nf):
      xs = rand(3, 4)
      want = np_jac(lambda b: np.stack([nf(x) for x in b]), xs)
      self.assert_close(jacfwd(vmap(f))(Tensor(xs)).numpy(), want, atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_vmap_vmap_jvp(self):
    def check(f, nf):
      xs, ts = rand(3, 2, 4), rand(3, 2, 4)
      got = vmap(vmap(lambda x, t: jvp(f, (x,), (t,))[1]))(Tensor(xs), Tensor(ts)).numpy()
      self.assert_close(got, np.stack([np.stack([np_jvp(nf, x, t) for x, t in zip(a, b)]) for a, b in zip(xs, ts)]), atol=1e-6, rtol=1e-6)
    self.each(check)

  def test_vmap_of_jacrev_equals_jacfwd(self):
    def check(f, nf):
      xs = rand(5, 4)
      self.assert_close(vmap(jacrev(f))(Tensor(xs)).numpy(), vmap(jacfwd(f))(Tensor(xs)).numpy())
    self.each(check)

class TestJacobians(VmapTestCase):
  def test_constant_jacobian_is_on_the_arguments_device(self):
    # a constant Jacobian has no device on 0.14 (and would realize on the CPU): it goes on the argument's device
    x = Tensor(rand(3))
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        out = jac(lambda x: {"s": x.sum(), "z": (x*0).floor()})(x)
        self.assertEqual([out["s"].device, out["z"].device], [x.device]*2)
        self.assert_close(out["s"].numpy(), np.ones(3))
        self.assert_close(out["z"].numpy(), np.zeros((3, 3)))
  def test_constant_jacobian_on_another_device(self):
    # 0.14's basis (an eye) has no device: a Jacobian that doesn't depend on x's values (of x*2) is on x's device all the same
    if (why:=cpu_devices_missing()) is not None: self.skipTest(why)
    x = Tensor(rand(3), device="CPU:1")
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        self.assertEqual(jac(lambda x: x*2)(x).device, "CPU:1")
        self.assert_close(jac(lambda x: x*2)(x).numpy(), np.eye(3)*2)
  def test_shapes(self):
    for xshape, f in [((), lambda x: x*x), ((3,), lambda x: x.sum()), ((3,), lambda x: x*2), ((2, 3), lambda x: x.T.exp()),
                      ((3,), lambda x: x.reshape(3, 1) * x.reshape(1, 3))]:
      x = Tensor(rand(*xshape))
      out = f(x)
      with self.subTest(xshape=xshape, out=out.shape):
        self.assertEqual(jacfwd(f)(x).shape, out.shape + xshape)
        self.assertEqual(jacrev(f)(x).shape, out.shape + xshape)

  def test_matrix_input_values(self):
    A = rand(2, 3)
    self.assert_close(jacfwd(lambda a: (a*a).sum(0))(Tensor(A)).numpy(), np_jac(lambda a: (a*a).sum(0), A), atol=1e-6, rtol=1e-6)

  def test_tuple_argnums(self):
    x, y = rand(3), rand(2)
    f = lambda x, y: (x.reshape(3, 1) * y.reshape(1, 2)).sin().sum(1)
    nf = lambda x, y: np.sin(x[:, None] * y[None]).sum(1)
    for jac in (jacfwd, jacrev):
      jx, jy = jac(f, argnums=(0, 1))(Tensor(x), Tensor(y))
      self.assert_close(jx.numpy(), np_jac(lambda a: nf(a, y), x), atol=1e-6, rtol=1e-6)
      self.assert_close(jy.numpy(), np_jac(lambda b: nf(x, b), y), atol=1e-6, rtol=1e-6)

  def test_argnum_other_than_first(self):
    x, y = rand(3), rand(3)
    self.assert_close(jacfwd(lambda x, y: x*y.exp(), argnums=1)(Tensor(x), Tensor(y)).numpy(), np.diag(x*np.exp(y)))

  def test_pytree_output(self):
    x = rand(3)
    out = jacfwd(lambda x: {"s": x.sum(), "e": x.exp()})(Tensor(x))
    self.assert_close(out["s"].numpy(), np.ones(3))
    self.assert_close(out["e"].numpy(), np.diag(np.exp(x)))

  def test_none_in_output(self):
    x = rand(3)
    for jac in (jacfwd, jacrev):
      out = jac(lambda x: (x.exp(), None))(Tensor(x))
      self.assertIsNone(out[1])
      self.assert_close(out[0].numpy(), np.diag(np.exp(x)))

  def test_pytree_argument(self):
    # a dict of parameters, as JAX takes it: the Jacobian has the output's structure of the argument's structure
    w, v = rand(3), rand(2)
    f = lambda p: (p["w"] * p["bv"][1]).sin() * p["bv"][0].sum()
    for jac in (jacfwd, jacrev):
      J = jac(f)({"w": Tensor(w), "bv": (Tensor(v), Tensor(w))})
      self.assertEqual(set(J), {"w", "bv"})
      self.assert_close(J["w"].numpy(), np.diag(np.cos(w * w) * w * v.sum()))
      self.assert_close(J["bv"][0].numpy(), np.broadcast_to(np.sin(w * w)[:, None], (3, 2)))
      self.assert_close(J["bv"][1].numpy(), np.diag(np.cos(w * w) * w * v.sum()))

  def test_pytree_argument_hessian(self):
    w, x = rand(3), rand(3)
    H = hessian(lambda p: (p["a"] * p["b"]).sin().sum())({"a": Tensor(w), "b": Tensor(x)})
    self.assert_close(H["a"]["a"].numpy(), np.diag(-np.sin(w * x) * x * x))
    self.assert_close(H["a"]["b"].numpy(), np.diag(np.cos(w * x) - np.sin(w * x) * w * x))

  def test_pytree_argument_not_float(self):
    with self.assertRaisesRegex(TypeError, "argument 0 holds int"): jacfwd(lambda p: p["a"])({"a": Tensor(rand(3)), "n": 3})

  def test_hessian(self):
    x = rand(4)
    H = hessian(lambda x: (x*x*x).sum() + x[0]*x[1])(Tensor(x)).numpy()
    want = np.diag(6*x)
    want[0, 1] = want[1, 0] = 1
    self.assert_close(H, want)

  def test_prod_at_zeros(self):
    # jacfwd, jacrev and the hessian of prod where an entry or two is 0: d/dx_i = prod_{j!=i} x_j, d2/dx_i dx_j = prod_{k!=i,j} x_k
    def others(x, *skip): return np.prod(np.delete(x, list(skip)))
    for x in (np.array([2., 0., 3., .5]), np.array([2., 0., 3., 0.])):
      grad = np.array([others(x, i) for i in range(4)])
      H = np.array([[0. if i == j else others(x, i, j) for j in range(4)] for i in range(4)])
      for jac in (jacfwd, jacrev): self.assert_close(jac(lambda a: a.prod())(Tensor(x)).numpy(), grad)
      for hess in (hessian, lambda f: jacfwd(jacfwd(f)), lambda f: jacrev(jacrev(f))):
        self.assert_close(hess(lambda a: a.prod())(Tensor(x)).numpy(), H)

  def test_has_aux(self):
    # fn returns (output, aux): the Jacobian of output, aux as it is (JAX's has_aux)
    x = rand(3)
    for jac, want in ((jacfwd, np.diag(2*x*np.cos(x*x))), (jacrev, np.diag(2*x*np.cos(x*x))),
                      (hessian, np.diag(2*np.cos(x*x) - 4*x*x*np.sin(x*x)))):
      J, aux = jac(lambda a: ((a*a).sin() if jac is not hessian else (a*a).sin().sum(), {"e": a.exp().sum()}), has_aux=True)(Tensor(x))
      self.assert_close(J.numpy(), want)
      self.assert_close(aux["e"].numpy(), np.asarray(np.exp(x).sum()))
    with self.assertRaisesRegex(TypeError, "has_aux=True fn must return a pair"): jacfwd(lambda a: a.sin(), has_aux=True)(Tensor(x))

  def test_bad_argnums(self):
    with self.assertRaisesRegex(ValueError, "argnums 2 is out of range"): jacfwd(lambda x: x, argnums=2)(Tensor(rand(3)))
    with self.assertRaisesRegex(TypeError, "float Tensors"): jacfwd(lambda x: x)(Tensor([1, 2, 3]))

class TestClosedOverConstant(ScheduledTestCase):
  """as in JAX, jacfwd, jacrev and hessian see a Tensor fn closes over as a constant, even when it is the point they differentiate at"""
  def test_residual_per_example(self):
    # the Jacobian of f(z) - f(x) at z = x, per example: the closed-over f(x) doesn't move
    X = rand(5, 3)
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        got = vmap(lambda x: jac(lambda z: z.sin() - x.sin())(x))(Tensor(X)).numpy()
        self.assert_close(got, np.stack([np.diag(np.cos(x)) for x in X]))

  def test_weighted_by_the_point(self):
    X = rand(4, 3)
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        got = vmap(lambda x: jac(lambda z: z * x + z.sin())(x))(Tensor(X)).numpy()
        self.assert_close(got, np.stack([np.diag(x + np.cos(x)) for x in X]))

  def test_hessian(self):
    # (z.x)^2 with x fixed: the Hessian in z is 2 x x^T
    X = rand(4, 3)
    got = vmap(lambda x: hessian(lambda z: (z * x).sum() ** 2)(x))(Tensor(X)).numpy()
    self.assert_close(got, np.stack([2 * np.outer(x, x) for x in X]))

  def test_schedule_cache_hit_and_one_kernel(self):
    # the fresh copy (a multiply by a unique 1) is folded away and keyed like an input buffer: one kernel, a schedule-cache hit
    f = vmap(lambda x: jacfwd(lambda z: z.sin() - x.sin())(x))
    X = Tensor(rand(6, 3)).realize()
    f(X).realize()
    before = schedule_cache_size()
    self.assertEqual(kernels(lambda: f(X).realize()), 1)
    self.assertEqual(schedule_cache_size(), before)

class TestStatefulOpsInFn(VmapTestCase):
  """clone, `+=`, setitem and realize inside the function a transform differentiates: derivatives flow through them (they cut the graph:
  jacrev and hessian gave zeros, jacfwd raised or gave zeros), with and without a vmap around"""
  X = rand(3)
  def check(self, f, np_f, transforms=(jacfwd, jacrev)):
    for jac in transforms:
      with self.subTest(jac=jac.__name__):
        self.assert_close(jac(f)(Tensor(self.X)).numpy(), np_jac(np_f, self.X), atol=1e-6)
        X = rand(4, 3)
        self.assert_close(vmap(jac(f))(Tensor(X)).numpy(), np.stack([np_jac(np_f, x) for x in X]), atol=1e-6)

  def test_clone(self): self.check(lambda a: a.clone() * a, lambda a: a * a)
  def test_inplace_add(self):
    def f(a):
      z = a * 1
      z += a.sin()
      return z
    self.check(f, lambda a: a + np.sin(a))
  def test_setitem(self):
    # JAX's a.at[0].set(a[1] * a[2]) on a clone
    def f(a):
      z = a.clone()
      z[0] = a[1] * a[2]
      return z * a
    def np_f(a):
      z = a.copy()
      z[0] = a[1] * a[2]
      return z * a
    self.check(f, np_f)
  def test_setitem_slice(self):
    def f(a):
      z = a * 2
      z[1:] = a[:2].exp()
      return z
    def np_f(a): return np.concatenate([a[:1] * 2, np.exp(a[:2])])
    self.check(f, np_f)
  def test_realize(self): self.check(lambda a: (a * 2).realize().sin() * a, lambda a: np.sin(2 * a) * a)
  def test_hessian_through_clone(self):
    self.assert_close(hessian(lambda a: (a.clone() ** 3).sum())(Tensor(self.X)).numpy(), np.diag(6 * self.X))
  def test_jvp_through_setitem(self):
    t = rand(3)
    def f(a):
      z = a.clone()
      z[2] = a[0].square()
      return z
    got = jvp(f, (Tensor(self.X),), (Tensor(t),))[1].numpy()
    self.assert_close(got, np.array([t[0], t[1], 2 * self.X[0] * t[0]]))
  def test_reading_a_traced_value_raises(self):
    with self.assertRaisesRegex(RuntimeError, "can't read a tensor computed from an argument"): jacfwd(lambda a: a * (a * 2).numpy().sum())(Tensor(self.X))
  def test_closed_over_realized_data_unchanged(self):
    # a Tensor with data closed over and read, not written: still a constant, and still its own value after the call
    wn = rand(3)
    w = Tensor(wn).realize()
    self.assert_close(jacrev(lambda a: a * w)(Tensor(self.X)).numpy(), np.diag(wn))
    np.testing.assert_equal(w.numpy(), wn)

class TestPiecewiseConstant(VmapTestCase):
  """casts to int/bool and floor/ceil/round/mod have zero derivative almost everywhere, in reverse mode as in forward mode and JAX"""
  X = np.array([1.7, -2.3, 0.4, 3.2])
  def test_int_cast_has_no_gradient(self):
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        got = jac(lambda a: a.cast(dtypes.int32).cast(dtypes.float64) * 3 + a.cast(dtypes.bool).cast(dtypes.float64) * a)(Tensor(self.X)).numpy()
        self.assert_close(got, np.diag((self.X != 0).astype(np.float64)))
  def test_rounding(self):
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        got = jac(lambda a: a.floor() + a.ceil() * a + a.round() + a % 1.5)(Tensor(self.X)).numpy()
        self.assert_close(got, np.diag(np.ceil(self.X) + 1))
  def test_int_output_jacobians(self):
    # as JAX's: jacfwd of an integer output is its zero Jacobian, of its dtype; jacrev has no cotangent to pull back, a TypeError
    J = jacfwd(lambda a: a.argmax())(Tensor(self.X))
    self.assertEqual((J.shape, J.dtype), ((4,), dtypes.int32))
    np.testing.assert_equal(J.numpy(), np.zeros(4, np.int32))
    with self.assertRaisesRegex(TypeError, "jacrev requires float outputs"): jacrev(lambda a: a > 0)(Tensor(self.X))
  def test_backward_through_floor(self):
    x = param(self.X)
    (x.floor() * x).sum().backward()
    self.assert_close(x.grad.numpy(), np.floor(self.X))

class TestJacobianArguments(VmapTestCase):
  """keyword arguments go to fn undifferentiated, argnums may be numpy integers, and has_aux gives back what fn returned (JAX)"""
  X = rand(3)
  def test_kwargs(self):
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__): self.assert_close(jac(lambda a, s=1.0: a * s)(Tensor(self.X), s=2.5).numpy(), 2.5 * np.eye(3))
    self.assert_close(hessian(lambda a, p=2: (a ** p).sum())(Tensor(self.X), p=3).numpy(), np.diag(6 * self.X))
  def test_numpy_argnums(self):
    got = jacfwd(lambda a, b: a * b, argnums=np.int64(1))(Tensor(self.X), Tensor(2 * self.X)).numpy()
    self.assert_close(got, np.diag(self.X))
  def test_numpy_and_python_float_arguments(self):
    # as JAX takes them as arrays: a numpy array, a numpy scalar or a Python float argument is differentiated (it raised a TypeError)
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        self.assert_close(jac(lambda a: a.sin() * a.sum())(self.X).numpy(), np.diag(np.cos(self.X) * self.X.sum()) + np.sin(self.X)[:, None])
        self.assert_close(jac(lambda a: a.sin())(np.float64(0.7)).numpy(), np.cos(0.7))
        self.assert_close(jac(lambda t: t[0] * t[1] ** 2, argnums=0)((1.5, 0.5))[1].numpy(), np.float32(2 * 1.5 * 0.5), rtol=1e-6)
    self.assert_close(hessian(lambda a: (a ** 3).sum())(self.X).numpy(), np.diag(6 * self.X))
    with self.assertRaisesRegex(TypeError, "differentiates float Tensors, argument 0 is int"): jacfwd(lambda a: a * 2)(1)
  def test_aux_python_number(self):
    for jac in (jacfwd, jacrev):
      with self.subTest(jac=jac.__name__):
        _, aux = jac(lambda a: (a.sin(), {"n": 2.5, "s": a.sum()}), has_aux=True)(Tensor(self.X))
        self.assertEqual(aux["n"], 2.5)
        self.assert_close(aux["s"].numpy(), self.X.sum())

class TestKernelCounts(ScheduledTestCase):
  def test_vmap_jacfwd_one_kernel(self):
    f = lambda x: Tensor.stack(x[0] * x[1].sin(), x[2].exp() + x[3] * x[0], (x * x).sum())
    xs = Tensor(rand(50, 4)).realize()
    self.assertEqual(kernels(lambda: f(xs[0]).realize()), 1)
    self.assertEqual(kernels(lambda: vmap(jacfwd(f))(xs).realize()), 1)

  def test_jacfwd_kernels_do_not_grow_with_batch(self):
    f = lambda x: x.softmax()
    self.assertEqual(kernels(lambda: vmap(jacfwd(f))(Tensor(rand(3, 4)).realize()).realize()),
                     kernels(lambda: vmap(jacfwd(f))(Tensor(rand(40, 4)).realize()).realize()))

  def test_repeat_calls_hit_schedule_cache(self):
    f = lambda x: Tensor.stack(x[0] * x[1].sin(), x[2].exp())
    for jac in (jacfwd, jacrev):
      g, added = vmap(jac(f)), []
      for _ in range(3):
        x = Tensor(rand(20, 3)).realize()
        before = schedule_cache_size()
        g(x).realize()
        added.append(schedule_cache_size() - before)
      self.assertEqual(added[1:], [0, 0], jac.__name__)

# *** the JVP of a primal with an inner vmap and g * stack(values depending on g), under an outer vmap over basis tangents

def inner_scope_primal(z:Tensor, n:int, reduce:bool, depth:int) -> Tensor:
  """the primal, generalized from 2 values, one scope and no reduce: z = [x_0 .. x_{n-1}, g]; an inner scope (hand-built with RANGE
  id -1, nested `depth` deep) multiplies each x by g, and the result is g * stack(y_0 .. y_{n-1}) (or its stack of partial sums with
  `reduce`)"""
  x, g = z[:n].reshape(n, *(1,)*depth), z[n:]
  rngs = [UOp.range(1, -1-d, AxisType.LOOP) for d in range(depth)]
  xv = x
  for d, r in enumerate(rngs): xv = xv.vmapin(varg(xv.ndim, {1: r}))
  y = xv * g
  ys = [y[:i+1].sum() for i in range(n)] if reduce else [y[i] for i in range(n)]
  out = g * Tensor.stack(*ys)
  for r in reversed(rngs): out = out.vmapout(varg(out.ndim+1, {out.ndim: r}))
  return out.flatten()

def np_inner_scope_jacobian(z:np.ndarray, n:int, reduce:bool) -> np.ndarray:
  """d out / d z analytically: out_i = g^2 * s_i with s_i = x_i (or the partial sum x_0 + .. + x_i)"""
  x, g = z[:n], z[n]
  A = np.tril(np.ones((n, n))) if reduce else np.eye(n)
  return np.concatenate([g*g*A, (2*g*(A @ x))[:, None]], axis=1)

class TestInnerScopeJacobian(VmapTestCase):
  def check(self, n=2, reduce=False, depth=1):
    z_np = rand(n+1)
    z = Tensor(z_np)
    output = inner_scope_primal(z, n, reduce, depth)
    want = np_inner_scope_jacobian(z_np, n, reduce)
    # the direct JVP, one basis direction at a time
    direct = np.stack([jvp_tensors((output,), (z,), (Tensor(e),))[0].numpy() for e in np.eye(n+1)], axis=1)
    self.assert_close(direct, want)
    # the same JVPs under an outer vmap over the basis: the case whose gamma column came out zero
    jac = vmap(lambda v: jvp_tensors((output,), (z,), (v,))[0], in_axes=1, out_axes=1)(Tensor.eye(n+1, dtype=dtypes.float64)).numpy()
    self.assert_close(jac, want)
    self.assert_close(jacfwd(lambda z: inner_scope_primal(z, n, reduce, depth))(z).numpy(), want)

  def test_hand_written_tangent_primal_first(self):
    # the tangent as a forward-mode jvp outside tinygrad writes it, the primal factor first in each product: the form that lost the gamma
    # column when a realized dg's buffer and the index reading it disagreed about their vmap RANGEs (docs/internals.md, realization
    # inside a scope)
    z_np = rand(3)
    z = Tensor(z_np).realize()
    x, g = z[:2], z[2:]
    ri, ro = UOp.range(1, -1, AxisType.LOOP), UOp.range(3, -2, AxisType.LOOP)
    v = Tensor.eye(3, dtype=dtypes.float64).realize().vmapin(varg(2, {1: ro}))
    dx, dg = v[:2], v[2:]
    xv, dxv = x.reshape(2, 1).vmapin(varg(2, {1: ri})), dx.reshape(2, 1).vmapin(varg(2, {1: ri}))
    stack = lambda t: Tensor.stack(t[0], t[1])
    y, dy = xv*g, g*dxv + xv*dg
    dout = stack(y)*dg + g*stack(dy)
    self.assert_close(dout.vmapout(varg(2, {1: ri})).flatten().vmapout(varg(2, {1: ro})).numpy(), np_inner_scope_jacobian(z_np, 2, False))

  def test_minimal(self): self.check()
  def test_stack_of_3(self): self.check(n=3)
  def test_with_reduce(self): self.check(reduce=True)
  def test_stack_of_3_with_reduce(self): self.check(n=3, reduce=True)
  def test_depth_2(self): self.check(depth=2)
  def test_depth_3(self): self.check(n=3, depth=3)
  def test_depth_3_with_reduce(self): self.check(n=3, reduce=True, depth=3)

if __name__ == "__main__":
  unittest.main()
