"""Per-example gradients: `.gradient` called INSIDE a vmapped function is the gradient of one example's loss, not summed over the batch."""
import unittest
import numpy as np
from tinygrad import Tensor, vmap
from tinygrad.uop.ops import Ops
from tinygrad.fork_line import LINE_012
from tinygrad.vmap import vmap_range, varg
from vmap_oracle import rand, bracket, VmapTestCase, param

N, D, H, C = 5, 3, 4, 3

class TestPerExampleGradients(VmapTestCase):
  def per_example(self, loss_fn, *ws:np.ndarray, xs:np.ndarray, ys:np.ndarray) -> list[np.ndarray]:
    """the gradients of loss_fn(*ws, x, y) w.r.t. ws for each example (x, y), as one batched call"""
    def grad_fn(*args): return loss_fn(*args).gradient(*args[:len(ws)])
    wts = [param(w) for w in ws]
    return [g.numpy() for g in vmap(grad_fn, in_axes=(None,)*len(ws)+(0, 0))(*wts, Tensor(xs), Tensor(ys))]

  def grad_to_lazy_argument_batch_axis_last(self, fn, dfn):
    # the batch put last is a PERMUTE moved into the batched elementwise ops, not into the argument (a lazy product here): the gradient
    # is taken with respect to that very UOp
    a, b, c = rand(N, D), rand(N, D), rand(D, N)
    h = Tensor(a) * Tensor(b)
    g = (vmap(fn, out_axes=1)(h) * Tensor(c)).sum().gradient(h)[0]
    self.assert_close(g.numpy(), dfn(a * b) * c.T)
  def test_gradient_to_a_lazy_argument_batch_axis_last(self):
    self.grad_to_lazy_argument_batch_axis_last(lambda e: e.sin() * 2, lambda v: 2 * np.cos(v))
  def test_gradient_to_a_lazy_argument_cloned_batch_axis_last(self):
    # a clone's batch is its source's batch, here the argument itself
    self.grad_to_lazy_argument_batch_axis_last(lambda e: e.clone(), np.ones_like)

  def test_linear(self):
    w, b, xs, ys = rand(D), rand(1), rand(N, D), rand(N)
    gw, gb = self.per_example(lambda w, b, x, y: ((x*w).sum() + b[0] - y) ** 2, w, b, xs=xs, ys=ys)
    d = 2 * (xs @ w + b[0] - ys)
    self.assert_close(gw, d[:, None] * xs)
    self.assert_close(gb, d[:, None])

  def test_mlp_relu(self):
    w1, w2, xs, ys = rand(D, H), rand(H), rand(N, D), rand(N)
    g1, g2 = self.per_example(lambda w1, w2, x, y: ((x @ w1).relu() @ w2 - y) ** 2, w1, w2, xs=xs, ys=ys)
    h = xs @ w1
    d = 2 * (np.maximum(h, 0) @ w2 - ys)
    self.assert_close(g1, np.einsum("nd,nh->ndh", xs, d[:, None] * w2 * (h > 0)))
    self.assert_close(g2, d[:, None] * np.maximum(h, 0))

  def test_softmax_cross_entropy(self):
    w, b, xs, ys = rand(D, C), rand(C), rand(N, D), np.arange(N) % C
    def loss(w, b, x, y): return -((x @ w + b).log_softmax() * (Tensor.arange(C) == y).float().cast(w.dtype)).sum()
    gw, gb = self.per_example(loss, w, b, xs=xs, ys=ys)
    z = xs @ w + b
    p = np.exp(z - z.max(-1, keepdims=True))
    dz = p / p.sum(-1, keepdims=True) - np.eye(C)[ys]
    self.assert_close(gw, np.einsum("nd,nc->ndc", xs, dz))
    self.assert_close(gb, dz)

  def test_mapped_input(self):
    w, xs = rand(D, H), rand(N, D)
    gx = vmap(lambda w, x: ((x @ w).tanh() ** 2).sum().gradient(x)[0], in_axes=(None, 0))(Tensor(w), Tensor(xs)).numpy()
    t = np.tanh(xs @ w)
    self.assert_close(gx, (2 * t * (1 - t**2)) @ w.T)

  def test_bracket(self):
    # the same with a hand-built scope
    w, xs = rand(D), rand(N, D)
    wt = param(w)
    self.assert_close(bracket(lambda x: (x*wt).sum().sin().gradient(wt)[0], Tensor(xs)).numpy(), np.cos(xs @ w)[:, None] * xs)

  def test_backward_outside_still_sums(self):
    # a loss outside the scope: the gradient of an unbatched weight is summed over the batch, as before
    w, xs = rand(D), rand(N, D)
    wt = param(w)
    vmap(lambda w, x: (x*w).sum().sin(), in_axes=(None, 0))(wt, Tensor(xs)).sum().backward()
    self.assert_close(wt.grad.numpy(), (np.cos(xs @ w)[:, None] * xs).sum(0))

  def test_vmapout_of_ended_range(self):
    # a REDUCE over the batch RANGE inside the scope ends it: vmapout over it broadcasts the batch sum (it used to hang codegen)
    xs = rand(N, D)
    r = vmap_range(N)
    s = Tensor(Tensor(xs).vmapin(varg(2, {0: r})).uop.reduce(r, arg=Ops.ADD))
    self.assert_close(s.vmapout(varg(2, {0: r})).numpy(), np.broadcast_to(xs.sum(0), (N, D)))

  @unittest.skipIf(LINE_012, "the 0.12 line reduces over a vmap RANGE (test_vmapout_of_ended_range)")
  def test_reduce_over_vmap_range_named(self):
    # 0.14 batches a scope by rules at its VMAPOUT and has no REDUCE over a RANGE there: the idiom is named, not a crash in rangeify
    x = Tensor(xs:=rand(N, D))
    r = vmap_range(N)
    s = Tensor(x.vmapin(varg(2, {0: r})).uop.reduce(r, arg=Ops.ADD))
    for what in (s, s.vmapout(varg(2, {0: r}))):
      with self.assertRaisesRegex(NotImplementedError, "REDUCE over a vmap RANGE inside its scope"): what.numpy()
    self.assert_close(x.numpy(), xs)

class TestChunkedSharedWeight(VmapTestCase):
  """the gradient of a weight every example shares, through a chunked vmap: the sum over every chunk, its tail, and one-example ranges"""
  def grad_w(self, n:int, chunk_size:int|None, backward=False):
    w, xs = rand(D), rand(n, D)
    wt = param(w)
    losses = vmap(lambda x, w: (x * w).sum().sin(), in_axes=(0, None), chunk_size=chunk_size)(Tensor(xs), wt)
    if backward: losses.sum().backward()
    got = wt.grad if backward else losses.sum().gradient(wt)[0]
    self.assert_close(got.numpy(), (np.cos(xs @ w)[:, None] * xs).sum(0))

  def test_even_chunks(self): self.grad_w(6, 3)
  def test_chunks_and_tail(self): self.grad_w(8, 3)        # it summed every (chunk, tail) pair: paths from two scopes spanned each other
  def test_tail_of_one(self): self.grad_w(7, 3)            # a RANGE of one iteration is no REDUCE source
  def test_one_chunk_and_tail(self): self.grad_w(4, 3)
  def test_chunk_size_one(self): self.grad_w(4, 1)
  def test_backward(self): self.grad_w(8, 3, backward=True)

  def test_shared_weight_outside_the_examples_op(self):
    # b multiplies a per-example scalar: its gradient sums x.sum() over the examples (it failed codegen's verification with 2+ chunks)
    b, xs = rand(2), rand(6, D)
    bt = param(b)
    vmap(lambda b, x: x.sum() * b, in_axes=(None, 0), chunk_size=2)(bt, Tensor(xs)).sum().backward()
    self.assert_close(bt.grad.numpy(), np.full(2, xs.sum()))

  def test_loss_reads_the_outputs(self):
    # the loss's cotangent depends on every chunk's output: backward runs its chunks in a loop of its own (in the forward's loop the
    # schedule was a cycle: "the outer ranges make a cycle")
    w, c, xs = rand(D), rand(D), rand(5, D)
    wt = param(w)
    o = vmap(lambda w, x: x * w * Tensor(c), in_axes=(None, 0), chunk_size=2)(wt, Tensor(xs))
    (o * o).sum().backward()
    self.assert_close(wt.grad.numpy(), (2 * xs * w * c * xs * c).sum(0))

  def test_mlp_softmax_loss(self):
    w1, w2, xs, k = rand(D, H), rand(H, C), rand(9, D), np.arange(C, dtype=np.float64)
    t1, t2, tx = param(w1), param(w2), param(xs)
    logits = vmap(lambda w1, w2, x: (x @ w1).relu() @ w2, in_axes=(None, None, 0), chunk_size=4)(t1, t2, tx)
    (logits.softmax(-1) * Tensor(k)).sum().backward()
    h = xs @ w1
    z = np.maximum(h, 0) @ w2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = p * (k - (p * k).sum(1, keepdims=True))
    dh = (dz @ w2.T) * (h > 0)
    self.assert_close(t2.grad.numpy(), np.maximum(h, 0).T @ dz)
    self.assert_close(t1.grad.numpy(), xs.T @ dh)
    self.assert_close(tx.grad.numpy(), dh @ w1.T)

  def test_nested(self):
    w, xs = rand(D), rand(4, 5, D)
    wt = param(w)
    inner = vmap(lambda x, w: (x * w).sum() ** 2, in_axes=(0, None), chunk_size=2)
    vmap(inner, in_axes=(0, None), chunk_size=3)(Tensor(xs), wt).sum().backward()
    self.assert_close(wt.grad.numpy(), np.einsum("ij,ijd->d", 2 * (xs @ w), xs))

class TestBackwardInsideScope(unittest.TestCase):
  def test_backward_inside_vmap_raises(self):
    w = param(rand(D))
    with self.assertRaisesRegex(RuntimeError, r"backward\(\) inside a vmap scope"): vmap(lambda x: (x*w).sum().backward())(Tensor(rand(N, D)))
    self.assertIsNone(w.grad)

if __name__ == "__main__":
  unittest.main()
