"""Dense problems as rules of one model and one client (see `fco_ray.rules`).

A problem rule holds no arrays: `arrays()` gives the data to put on the device once, and
every method takes it back as `data`, so a compiled round gets the data as an argument (not
as constants baked into the program). Methods:

- `grad(data, params, client, k, stream)`: client `client`'s stochastic gradient (or saddle
  operator (grad_x f, -grad_y f)) at local step k, its randomness keyed by (the member's
  seed, round, step k, `stream`, client id) exactly as the CPU engine draws it;
- `prox(params, t, lam)`: prox_{t psi} with psi's penalty weight lam;
- `project(params)`: onto psi's constraint set; `subgradient(params, lam)`: of the penalty.

`client` is a `Client`: the member's seed and round, the client's id, data row, sample
count and row offset, all traced numbers.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp

from . import keys
from .psi import Block
from .static import Static

BATCH, NOISE, NOISE2 = 1, 2, 3  # the stream tags of fco_ray.ops.random


class Client(NamedTuple):
    seed: jax.Array
    round: jax.Array
    id: jax.Array
    size: jax.Array  # the client's sample count
    offset: jax.Array  # its first row in the flat sample arrays

    def integers(self, k, stream, count: int):
        """`count` sample indices of this client (`Key.integers`), as flat rows."""
        ids, sizes = self.id[None], self.size[None]
        return keys.integers(self.seed, self.round, k, stream, ids, sizes, count)[0] + self.offset

    def normal(self, k, stream, count: int):
        return keys.normal(self.seed, self.round, k, stream, self.id[None], count)[0]


def sample_table(problem) -> dict:
    """Each client's sample count and first row in the flat (clients x max_samples) arrays."""
    train = problem.train
    return {"sizes": train.sizes.astype(np.int64),
            "offsets": np.arange(train.num_clients, dtype=np.int64) * train.max_samples}


def psi_blocks(psi) -> dict[str, Block] | None:
    """psi (`fco_ray.ops.regularizers.Blockwise`) as rule blocks, or None where a block has no
    rule (a constraint other than the box or the spectral ball)."""
    out = {}
    if len({float(reg.lam) for reg in psi.regs.values() if reg.penalty is not None}) > 1:
        return None  # one lam per member weighs every penalty (`Problem.with_lam`)
    for name, reg in psi.regs.items():
        if reg.constraint not in (None, "linf", "spectral") or reg.penalty not in (None, "l1", "nuclear"):
            return None
        spectral = reg.constraint == "spectral"
        if (spectral and reg.penalty == "l1") or (reg.constraint == "linf" and reg.penalty == "nuclear"):
            return None
        radius = float(reg.radius) if reg.constraint else float("inf")
        out[name] = Block(reg.penalty, radius, spectral)
    return out


def psi_lam(psi) -> float:
    """The weight of psi's penalties (0 without one); `Problem.with_lam` sets them all."""
    lams = {float(reg.lam) for reg in psi.regs.values() if reg.penalty is not None}
    return lams.pop() if len(lams) == 1 else 0.0


class Blockwise(Static):
    """psi block by block (from the problem's own psi); blocks without psi pass through.
    Rules of equal settings (blocks, batch, the model's shapes...) are equal
    (`fco_ray.rules.static`): they compile to one program; the data comes as an argument.
    psi's weight is not one of them: the traced methods take it as an argument (`lam`, from
    each member's `hyper`), and `self.lam`, the problem's own, is only the value the host
    puts there (`Group.rule_hyper`); so the runs of a lam path share their programs."""

    static_skip = ("problem", "lam")

    def __init__(self, problem, blocks: dict[str, Block]):
        self.problem, self.lam = problem, psi_lam(problem.psi)
        self.shapes = {b: tuple(s) for b, s in problem.shapes.items()}
        self.blocks = {b: blocks.get(b, Block(None)) for b in problem.shapes}

    def with_route(self, route: str) -> "Blockwise":
        """This rule with the nuclear prox computed by `route` (`psi.ROUTES`)."""
        for block in self.blocks.values():
            block.route = route
        return self

    def prox(self, params, t, lam):
        return {b: self.blocks[b].prox(x, t * lam) for b, x in params.items()}

    def project(self, params):
        return {b: self.blocks[b].project(x) for b, x in params.items()}

    def subgradient(self, params, lam):
        return {b: self.blocks[b].subgradient(x, lam) for b, x in params.items()}


class Samples(Blockwise):
    """A problem whose clients hold samples: minibatches of `batch` rows drawn with
    replacement (None: every row of the client, weighted 1 / its size)."""

    def __init__(self, problem, blocks, batch: int | None):
        super().__init__(problem, blocks)
        self.batch, self.rows_per_client = batch, problem.train.max_samples

    def rows(self, client: Client, k, stream):
        """(rows, weights): the step's sample rows and their weights in the client's loss."""
        if self.batch is None:
            local = jnp.arange(self.rows_per_client)
            return client.offset + local, jnp.where(local < client.size, 1.0 / client.size, 0.0)
        return client.integers(k, stream, self.batch), None

    def mean(self, values, weights):
        """The weighted mean over the step's rows of per-row values (leading axis)."""
        if weights is None:
            return values / self.batch
        return values * weights.reshape(weights.shape + (1,) * (values.ndim - 1))


class LeastSquares(Samples):
    """Linear regression (E1 lasso, E2 low rank): f_m(w, b) = mean over the client's samples
    of (<x_i, w> + b - y_i)^2, w a vector or a matrix, b an unpenalized intercept."""

    def arrays(self) -> dict:
        train = self.problem.train
        return {"x": train.arrays["x"].reshape(-1, math.prod(self.problem.shapes["w"])),
                "y": train.arrays["y"].reshape(-1), **sample_table(self.problem)}

    def grad(self, data, params, client: Client, k, stream):
        rows, weights = self.rows(client, k, stream)
        xb, yb = data["x"][rows], data["y"][rows]
        resid = self.mean(xb @ params["w"].reshape(-1) + params["b"] - yb, weights)
        return {"w": (2.0 * (resid @ xb)).reshape(params["w"].shape), "b": 2.0 * resid.sum()}


class Bilinear(Blockwise):
    """E5: phi(x, y) = <A x - b, y> + psi(x) - psi(y); operator (A^T y, b - A x) plus
    sigma N(0, 1) per entry per call (one draw of nx + ny numbers per client, x first)."""

    def __init__(self, problem, blocks):
        super().__init__(problem, blocks)
        self.sigma = float(problem.info["noise"])

    def arrays(self) -> dict:
        return {"a": self.problem.info["A"], "b": self.problem.info["b"]}

    def grad(self, data, params, client: Client, k, stream):
        a, x, y = data["a"], params["x"], params["y"]
        gx, gy = a.T @ y, data["b"] - a @ x
        if self.sigma == 0.0:
            return {"x": gx, "y": gy}
        noise = self.sigma * client.normal(k, stream, x.size + y.size)
        return {"x": gx + noise[:x.size].reshape(x.shape), "y": gy + noise[x.size:].reshape(y.shape)}


class Adversarial(Samples):
    """E6: multinomial logistic regression (W, optional b) against one attack delta (psi on
    delta). Operator (grad_W f, grad_b f, -grad_delta f) of the mean cross-entropy."""

    classes = 10

    def arrays(self) -> dict:
        train = self.problem.train
        x = train.arrays["x"]
        return {"x": x.reshape(-1, x.shape[-1]), "y": train.arrays["y"].reshape(-1).astype("int64"),
                **sample_table(self.problem)}

    def grad(self, data, params, client: Client, k, stream):
        rows, weights = self.rows(client, k, stream)
        xa = data["x"][rows] + params["delta"]  # (B, d)
        logits = xa @ params["W"]
        if "b" in params:
            logits = logits + params["b"]
        err = jax.nn.softmax(logits, axis=-1) - jax.nn.one_hot(data["y"][rows], self.classes,
                                                                 dtype=logits.dtype)
        werr = (1.0 / self.batch) * err if weights is None else weights[:, None] * err
        out = {"W": xa.T @ werr, "delta": -(params["W"] @ werr.sum(axis=0))}
        if "b" in params:
            out["b"] = werr.sum(axis=0)
        return out


# ---- the rules of the built-in problems (`Problem.rule`: "fco_ray.rules.problems:NAME") ----
def least_squares(problem, batch_size):
    """E1, E2: an intercept `b` and a weight block `w` (vector or matrix) under psi."""
    blocks = psi_blocks(problem.psi)
    if blocks is None or set(problem.shapes) != {"w", "b"} or problem.shapes["b"] != ():
        return None
    return LeastSquares(problem, blocks, batch_size)


def bilinear(problem, batch_size):
    blocks = psi_blocks(problem.psi)
    return None if blocks is None else Bilinear(problem, blocks)


def adversarial(problem, batch_size):
    blocks = psi_blocks(problem.psi)
    return None if blocks is None else Adversarial(problem, blocks, batch_size)


# ---- E3 / E4: the classification problems (fco_ray.problems.logistic, fco_ray.problems.mlp) ----
def classifier_blocks(psi) -> dict[str, Block] | None:
    """`psi_blocks` plus the l1 and l2 balls of E4 (`psi.Ball`: a constraint alone, no
    penalty); None where a block has no rule."""
    from ..ops.regularizers import Blockwise as Regs
    from .psi import BALLS, Ball

    balls = {name: reg for name, reg in psi.regs.items() if reg.constraint in BALLS}
    if any(reg.penalty is not None for reg in balls.values()):
        return None
    rest = psi_blocks(Regs({n: r for n, r in psi.regs.items() if n not in balls}, psi.shapes))
    if rest is None:
        return None
    return {**rest, **{name: Ball(reg.constraint, float(reg.radius)) for name, reg in balls.items()}}


class Classifier(Samples):
    """The samples of a classification problem: features `x` flat (rows, d), labels `y`."""

    label_dtype = "int64"

    def arrays(self) -> dict:
        train = self.problem.train
        x = train.arrays["x"]
        return {"x": x.reshape(-1, x.shape[-1]), "y": train.arrays["y"].reshape(-1).astype(self.label_dtype),
                **sample_table(self.problem)}

    def weights(self, weights, count: int):
        """The step's row weights: 1 / batch each (`Problem.minibatch`), or the client's."""
        return jnp.full(count, 1.0 / self.batch) if weights is None else weights

    def softmax_error(self, logits, y, weights):
        """weight_b (softmax(z_b) - e_{y_b}) (`logistic.softmax_cross_entropy`'s floats)."""
        e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
        dz = e / jnp.sum(e, axis=-1, keepdims=True) - jax.nn.one_hot(y, logits.shape[-1], dtype=logits.dtype)
        return dz * weights[:, None]


class BinaryLogistic(Classifier):
    """E3 (`logistic.BinaryLogistic`): f = log(1 + e^z) - y z, z = <x, w> + b, y in {0, 1};
    grad_w = sum_b weight_b (sigmoid(z_b) - y_b) x_b, grad_b the same sum without x."""

    label_dtype = "float64"

    def grad(self, data, params, client: Client, k, stream):
        rows, weights = self.rows(client, k, stream)
        xb = data["x"][rows]
        z = xb @ params["w"] + params["b"]
        r = self.weights(weights, z.shape[0]) * (jax.nn.sigmoid(z) - data["y"][rows])
        return {"w": r @ xb, "b": r.sum()}


class Multinomial(Classifier):
    """E4 (`logistic.Multinomial`): softmax cross-entropy of z = W^T x + b, W (d, k), b (k,)."""

    def grad(self, data, params, client: Client, k, stream):
        rows, weights = self.rows(client, k, stream)
        xb = data["x"][rows]
        dz = self.softmax_error(xb @ params["w"] + params["b"], data["y"][rows],
                                self.weights(weights, xb.shape[0]))
        return {"w": xb.T @ dz, "b": dz.sum(axis=0)}


class MLP(Classifier):
    """E4 (`mlp.MLP`): h_0 = x, h_l = relu(h_{l-1} W_l + b_l), logits = h_L W_out + b_out,
    softmax cross-entropy; backpropagation as there (relu'(z) = 1 where h > 0)."""

    def grad(self, data, params, client: Client, k, stream):
        layers = len(self.shapes) // 2
        rows, weights = self.rows(client, k, stream)
        acts = [data["x"][rows]]
        for i in range(layers):
            z = acts[-1] @ params[f"w{i}"] + params[f"b{i}"]
            acts.append(jnp.maximum(z, 0.0) if i < layers - 1 else z)
        dz = self.softmax_error(acts[-1], data["y"][rows], self.weights(weights, acts[0].shape[0]))
        out = {}
        for i in reversed(range(layers)):
            out[f"w{i}"], out[f"b{i}"] = acts[i].T @ dz, dz.sum(axis=0)
            if i:
                dz = (dz @ params[f"w{i}"].T) * (acts[i] > 0)
        return out


def binary_logistic(problem, batch_size):
    """E3 sparse_logreg: {"w": (d,), "b": ()}, psi on w (l1 by default)."""
    blocks = classifier_blocks(problem.psi)
    if blocks is None or set(problem.shapes) != {"w", "b"} or problem.shapes["b"] != () \
            or len(problem.shapes["w"]) != 1:
        return None
    return BinaryLogistic(problem, blocks, batch_size)


def multinomial(problem, batch_size):
    """E4 constrained_logreg: {"w": (d, k), "b": (k,)}, a ball on w."""
    blocks = classifier_blocks(problem.psi)
    shapes = problem.shapes
    if blocks is None or set(shapes) != {"w", "b"} or len(shapes["w"]) != 2 or shapes["b"] != shapes["w"][1:]:
        return None
    return Multinomial(problem, blocks, batch_size)


def mlp(problem, batch_size):
    """E4 mlp: blocks w0, b0, ..., w{L}, b{L}, a ball on each weight matrix."""
    blocks = classifier_blocks(problem.psi)
    layers = len(problem.shapes) // 2
    names = {f"{p}{i}" for i in range(layers) for p in "wb"}
    if blocks is None or layers < 1 or set(problem.shapes) != names:
        return None
    return MLP(problem, blocks, batch_size)
