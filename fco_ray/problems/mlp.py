"""E4: a ReLU multilayer perceptron whose weight matrices are each constrained to a norm
ball (`mlp`; default two hidden layers of 200 units, l1 balls as in the FCO paper, App. B.5).

Model: h_0 = x, h_l = relu(h_{l-1} W_l + b_l) for the hidden layers, logits = h_L W_out + b_out;
loss = softmax cross-entropy. psi = sum over the weight matrices of
indicator{||W_l||_1 <= radius} -- a `Blockwise` of one `L1Ball` per matrix; the biases are
unconstrained. All C clients run at once: every layer is one batched matmul
(C, B, n_in) @ (C, n_in, n_out), and backpropagation is the same in reverse.

Initialization: Glorot-uniform weights, zero biases, then projected onto the constraint set
so that the first iterate is feasible. The data options and metrics are those of
`fco_ray.problems.logistic`; the datasets are `fco_ray.data.datasets.DATASETS`.
"""
from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from ..data.datasets import DATASETS
from ..ops import regularizers as R
from ..ops.tree import Params
from .base import Problem
from .logistic import Classifier, _bias, _ImageParams, softmax_cross_entropy
from .registry import register_problem


class MLP(Classifier):
    """Blocks w0, b0, ..., w{L}, b{L} (the last pair is the output layer)."""

    rule: ClassVar = "fco_ray.rules.problems:mlp"  # its JAX rule (E4)

    @property
    def layers(self) -> int:
        return len(self.shapes) // 2

    @property
    def weight_blocks(self) -> tuple[str, ...]:
        return tuple(f"w{i}" for i in range(self.layers))

    def init_params(self, rng: np.random.Generator) -> Params:
        params = {}
        for i in range(self.layers):
            n_in, n_out = self.shapes[f"w{i}"]
            limit = np.sqrt(6.0 / (n_in + n_out))
            params[f"w{i}"] = rng.uniform(-limit, limit, (n_in, n_out))
            params[f"b{i}"] = np.zeros(n_out)
        return self.psi.project(params)

    def forward(self, params: Params, x: np.ndarray) -> list[np.ndarray]:
        """Activations [x, h_1, ..., h_L, logits] (unbatched or per-client params)."""
        acts = [x]
        for i in range(self.layers):
            z = np.matmul(acts[-1], params[f"w{i}"]) + _bias(params[f"b{i}"])
            acts.append(np.maximum(z, 0.0) if i < self.layers - 1 else z)
        return acts

    def loss_and_grad(self, params: Params, batch):
        acts = self.forward(params, batch["x"])
        loss, dz = softmax_cross_entropy(acts[-1], batch["y"], batch["weight"])
        grads = {}
        for i in reversed(range(self.layers)):
            grads[f"w{i}"] = np.matmul(np.swapaxes(acts[i], -1, -2), dz)
            grads[f"b{i}"] = dz.sum(axis=1)
            if i:
                # relu'(z) = 1 where the activation is positive; padding rows have dz = 0
                dz = np.matmul(dz, np.swapaxes(params[f"w{i}"], -1, -2)) * (acts[i] > 0)
        return loss, grads

    def predict(self, params, x):
        return np.argmax(self.forward(params, x)[-1], axis=-1)


MODEL_COPIES = 4  # server state, broadcast, a client's iterate and its gradient


class MlpParams(_ImageParams):
    """E4 constrained MLP; defaults: 200-200 ReLU, an l1 ball of radius 300 per weight matrix
    (binding on digits: unconstrained training reaches ||W||_1 ~ 1100, 2600, 280 per layer)."""

    DEFAULT_RADIUS: ClassVar[dict[str, float]] = {"l1_ball": 300.0, "l2_ball": 10.0}
    name: Literal["mlp"] = "mlp"
    problem_class: ClassVar[type[Problem]] = MLP
    hidden: list[int] = Field([200, 200], description="hidden layer widths")

    @field_validator("hidden")
    @classmethod
    def _widths(cls, v):
        if any(h < 1 for h in v):
            raise ValueError(f"problem.hidden widths must be >= 1, got {v}")
        return v

    def estimated_bytes(self):
        # at least MODEL_COPIES float64 copies of the weights live at once
        features, classes = DATASETS[self.dataset].features_classes(self)
        widths = [features, *self.hidden, classes]
        weights = sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))
        return {**super().estimated_bytes(),
                f"the model (problem.hidden={self.hidden}: {weights:,} weights, {MODEL_COPIES} "
                f"float64 copies)": MODEL_COPIES * 8 * weights}


@register_problem("mlp", MlpParams)
def build_mlp(p: MlpParams, seed: int) -> MLP:
    train, val, info = DATASETS[p.dataset].load(p, seed, binary=False)
    widths = [train.arrays["x"].shape[-1], *p.hidden, info["classes"]]
    shapes = {}
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
        shapes[f"w{i}"], shapes[f"b{i}"] = (n_in, n_out), (n_out,)
    ball = R.make(p.constraint, radius=p.radius)
    psi = R.Blockwise({f"w{i}": ball for i in range(len(widths) - 1)}, shapes)
    return MLP(train=train, val=val, shapes=shapes, psi=psi, name="mlp", info=info)
