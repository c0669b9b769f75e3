"""E6: universal adversarial training of multinomial logistic regression (Bai & Bullins,
ICLR'24, Sec. 6 and App. A.3), on scikit-learn's 8x8 digits split over clients.

    min_{W, b} max_{||delta||_inf <= D}  (1/M) sum_m (1/n_m) sum_i CE(W^T (x_i + delta) + b, y_i)
                                         - lam ||delta||_1

W (d x k), classes k = 10, pixels x in [0, 1]^64 (d = 64). The attack `delta` is one
perturbation shared by all clients (the max player, block "delta"); psi1 = 0 (the model is
unregularized), psi2 = lam ||delta||_1 + indicator{||delta||_inf <= D}. Perturbed pixels are
not clipped to [0, 1] (clipping would make f non-smooth in delta).

The intercept `b` is optional (`bias`), and off by default, as in the paper's formulation
(`w^T (x_i + delta)`): with an intercept, a universal perturbation only shifts the logits by
the constant W^T delta, which the intercept absorbs exactly. Then grad_delta f = W (mean of
softmax - onehot) = W grad_b f vanishes whenever b is optimal, and the saddle point has
delta = 0 for any lam > 0.

Metrics: train_loss = phi(W, delta), val_accuracy (clean held-out digits), attacked_val_accuracy
(held-out digits + delta), density of delta (|v| >= 1e-5 counts as nonzero). `render_attack`
draws delta as an 8x8 image.
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from ..data.partition import digits_clients
from ..data.stores import ClientData
from ..ops import regularizers as R
from ..ops.tree import Params
from .registry import ProblemParams, register_problem
from .saddle import ZERO_TOL, SaddleProblem
from ..runtime.files import replacing

CLASSES = 10


class UniversalAdversarial(SaddleProblem):
    """Multinomial logistic regression against one l1-penalized, box-constrained attack."""

    rule = "fco_ray.rules.problems:adversarial"  # fco_ray.rules: on a device backend
    max_blocks = ("delta",)

    @classmethod
    def pictures(cls, model: dict, folder) -> list:
        """`attack.png`: the attack `delta` (`render_attack`, the image the E6 report shows)."""
        return [render_attack(model["delta"], Path(folder) / "attack.png")] if "delta" in model else []

    def loss_and_grad(self, params: Params, batch):
        """Weighted cross-entropy and its gradient in (W, b, delta) for each client.

        logits_i = W^T (x_i + delta) + b, e_i = softmax(logits_i) - onehot(y_i):
        grad_W = sum_i w_i (x_i + delta) e_i^T, grad_b = sum_i w_i e_i, grad_delta = W sum_i w_i e_i.
        """
        x, labels, weight = batch["x"], batch["y"], batch["weight"]
        w, delta = params["W"], params["delta"]
        xa = x + delta[:, None, :]
        # batched matrix products: np.matmul runs BLAS per client, far faster here than
        # np.einsum's loops (benchmarks/results/e6_numpy_matmul.md)
        logits = xa @ w
        if "b" in params:
            logits = logits + params["b"][:, None, :]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
        loss = -np.sum(weight * picked, axis=1)
        err = np.exp(logp) - np.eye(CLASSES)[labels]  # softmax - onehot
        werr = weight[..., None] * err
        werr_sum = werr.sum(axis=1)
        grads = {"W": np.swapaxes(xa, 1, 2) @ werr,
                 "delta": (w @ werr_sum[..., None])[..., 0]}
        if "b" in params:
            grads["b"] = werr_sum
        return loss, grads

    def predict(self, params: Params, x: np.ndarray) -> np.ndarray:
        logits = x @ params["W"]
        if "b" in params:
            logits = logits + params["b"]
        return np.argmax(logits, axis=-1)

    def accuracy(self, params: Params, x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(params, x) == y))

    def evaluate(self, params: Params) -> dict[str, float]:
        out = {"density": float(np.mean(np.abs(params["delta"]) >= ZERO_TOL))}
        if self.val is not None:
            pooled = self.val.pooled()
            out["val_accuracy"] = self.accuracy(params, pooled["x"], pooled["y"])
            out["attacked_val_accuracy"] = self.accuracy(params, pooled["x"] + params["delta"], pooled["y"])
        return out


def make_adversarial(*, seed: int, lam: float, radius: float, clients: int, alpha: float,
                     bias: bool, test_fraction: float) -> UniversalAdversarial:
    """Digits (pixels / 16) split over `clients` by Dirichlet(alpha) label skew (large alpha:
    nearly IID, like the paper's even split); the held-out part is one validation client."""
    split, x_tr, y_tr, x_te, y_te = digits_clients(clients, alpha, seed, test_fraction)
    train = ClientData.from_lists([{"x": x_tr[idx], "y": y_tr[idx]} for idx in split])
    val = ClientData.from_lists([{"x": x_te, "y": y_te}])
    d = x_tr.shape[1]
    shapes = {"W": (d, CLASSES), "delta": (d,)}
    if bias:
        shapes["b"] = (CLASSES,)
    return UniversalAdversarial(
        train=train, val=val, shapes=shapes,
        psi=R.Blockwise({"delta": R.L1Box(lam, radius)}, shapes), name="adversarial",
        info={"lam": lam, "radius": radius, "image_shape": (8, 8)},
    )


def render_attack(delta: np.ndarray, path: str | Path, title: str | None = None,
                  image_shape: tuple[int, int] = (8, 8)) -> Path:
    """Save the attack as a PNG: a blue (negative) - white (zero) - red (positive) map,
    symmetric around zero and rescaled to the attack's largest magnitude."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    img = np.asarray(delta, dtype=float).reshape(image_shape)
    scale = float(np.max(np.abs(img))) or 1.0
    fig = Figure(figsize=(2.6, 2.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = ax.imshow(img, cmap="bwr", vmin=-scale, vmax=scale, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    density = float(np.mean(np.abs(img) >= ZERO_TOL))
    ax.set_title(title or f"density {density:.2f}", fontsize=9)
    path = Path(path)
    with replacing(path) as temp:
        fig.savefig(temp, format="png", bbox_inches="tight")
    return path


# ---- registry entry (this module is imported at the end of problems/__init__.py) --------
class AdversarialParams(ProblemParams):
    """E6 universal adversarial training on digits; defaults: D = 0.05, lam = 0.1, 100 clients,
    no intercept (see the module docstring), nearly IID split (alpha = 100)."""

    problem_class: ClassVar[type] = UniversalAdversarial

    name: Literal["adversarial"] = "adversarial"
    fusable_lam: ClassVar[bool] = True  # lam weighs psi only (ProblemParams.fusable_lam)
    lam: float = Field(0.1, ge=0, allow_inf_nan=False, description="l1 weight on the attack")
    radius: float = Field(0.05, gt=0, allow_inf_nan=False, description="D: ||delta||_inf <= D")
    clients: int = Field(100, ge=1, le=1400)
    alpha: float = Field(100.0, gt=0, allow_inf_nan=False, description="Dirichlet label skew")
    bias: bool = Field(False, description="fit an intercept (absorbs any universal attack)")
    test_fraction: float = Field(0.2, gt=0, lt=1)

    def estimated_bytes(self):
        return {"the digits data (1,797 x 64 floats)": 8 * 1797 * 64}


@register_problem("adversarial", AdversarialParams)
def _adversarial(p: AdversarialParams, seed: int) -> UniversalAdversarial:
    return make_adversarial(seed=seed, **p.model_dump(exclude={"name", "data_seed"}))
