"""Federated classification with linear models: l1-regularized binary logistic regression
(E3, `sparse_logreg`) and norm-ball constrained multinomial logistic regression (E4,
`constrained_logreg`).

Losses (per sample, averaged with the batch weights; the intercept is never regularized):
- binary, y in {0, 1}, z = <x, w> + b:   f = log(1 + e^z) - y z,   grad_z f = sigmoid(z) - y;
  psi = lam ||w||_1.
- multinomial, y in {0..k-1}, z = W^T x + b:   f = logsumexp(z) - z_y,   grad_z f = softmax(z) - e_y;
  psi = indicator{||W||_1 <= radius} or indicator{||W||_2 <= radius} (W only, not b).

The federated objective is the client mean `F = (1/M) sum_m (1/n_m) sum_{i in m} f_i`; with
`lam = 1/(C n)` and sample weights `n / (M n_m)` it equals scikit-learn's
`C sum_i s_i f_i + ||w||_1` divided by `C n` (tested against scikit-learn's l1
`LogisticRegression`, solver saga, which leaves the intercept unpenalized).

Metrics: `train_loss` (the regularized objective above), `train_accuracy` and `val_accuracy`
(fraction of correctly classified samples pooled over all training / validation samples;
for the constrained problems `val_accuracy` is the held-out *test* split), `density`
(fraction of weight entries with |w| > 1e-4; biases excluded).

Datasets (`problem.dataset`; each one's loader, memory estimate and own keys are its object in
`fco_ray.data.datasets.DATASETS`): `digits` (default; binary: the two digits `classes`),
`breast_cancer` (binary, standardized), `haxby` (binary, a local copy), `emnist`
(multinomial, a local copy), `synthetic_fmri` (binary, or `conditions` classes for the
constrained problems; generated with a known sparse weight map: on `sparse_logreg` the
metrics add the support `precision`, `recall` and `f1` against it, nonzero = |w| > 1e-4).
"""
from __future__ import annotations

import abc
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ..data.datasets import DATASETS, DEFAULT_CLIENTS
from ..data.datasets import clients_from_pairs  # noqa: F401  (tests build problems from pairs)
from ..data.stores import ClientData
from ..ops import regularizers as R
from ..ops.tree import Params
from .base import Problem
from .linear import NONZERO  # |w| above this counts as a nonzero weight (density)
from .linear import support_metrics
from .registry import ProblemParams, register_problem

POOL_CHUNK = 4096  # rows per chunk of the full-data passes (bounds activation memory)


class Classifier(Problem):
    """Shared parts of the classification problems.

    Full-data losses are computed over all rows at once with row weights 1/(M n_m) (0 on
    padding), in chunks: the same value as the client mean of the base class, without
    materializing one gradient per client (which would be M times the model size).
    """

    weight_blocks: ClassVar[tuple[str, ...]] = ("w",)

    @staticmethod
    def _rows(data: ClientData) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every row of `data` as flat views (clients * max_samples, ...) and its weight
        1/(M n_m) (0 on padding rows): no copy of the data."""
        arrays = {k: v.reshape((-1,) + v.shape[2:]) for k, v in data.arrays.items()}
        return arrays, (data.full_weights() / data.num_clients).reshape(-1)

    def full_loss_grad(self, params: Params, data: ClientData | None = None) -> tuple[float, Params]:
        arrays, weights = self._rows(self.train if data is None else data)
        loss, grads = 0.0, {k: np.zeros(np.shape(v)) for k, v in params.items()}
        stacked = {k: np.asarray(v)[None] for k, v in params.items()}  # one "client": all rows
        for start in range(0, len(weights), POOL_CHUNK):
            batch = {k: v[None, start:start + POOL_CHUNK] for k, v in arrays.items()}
            batch["weight"] = weights[None, start:start + POOL_CHUNK]
            chunk_loss, chunk_grads = self.loss_and_grad(stacked, batch)
            loss += float(chunk_loss[0])
            for k in grads:
                grads[k] += chunk_grads[k][0]
        return loss, grads

    @abc.abstractmethod
    def predict(self, params: Params, x: np.ndarray) -> np.ndarray:
        """Predicted labels of samples x (n, ...) under an unbatched model."""

    def accuracy(self, params: Params, data: ClientData) -> float:
        arrays, weights = self._rows(data)
        x, y, real = arrays["x"], arrays["y"], weights > 0
        hits = sum(int(np.sum((self.predict(params, x[s:s + POOL_CHUNK]) == y[s:s + POOL_CHUNK])
                              & real[s:s + POOL_CHUNK]))
                   for s in range(0, len(y), POOL_CHUNK))
        return hits / int(real.sum())

    def evaluate(self, params: Params) -> dict[str, float]:
        out = {"train_accuracy": self.accuracy(params, self.train)}
        if self.val is not None:
            out["val_accuracy"] = self.accuracy(params, self.val)
        out["density"] = density(params, self.weight_blocks)
        truth = self.info.get("w_true")
        if truth is not None and "w" in params and np.shape(truth) == np.shape(params["w"]):
            # a known truth of the same shape (synthetic_fmri, binary): support recovery
            out.update({k: v for k, v in support_metrics(params["w"], truth).items() if k != "density"})
        return out


def density(params: Params, blocks) -> float:
    """Fraction of entries of the weight blocks with |w| > 1e-4."""
    nonzero = sum(int(np.sum(np.abs(params[k]) > NONZERO)) for k in blocks)
    return nonzero / sum(np.size(params[k]) for k in blocks)


def _bias(b: np.ndarray) -> np.ndarray:
    """A bias (k,) or per-client biases (C, k) as a term broadcasting over (C, B, k)."""
    return np.expand_dims(b, -2)


class BinaryLogistic(Classifier):
    """Binary logistic regression, model {"w": (d,), "b": ()}."""

    rule: ClassVar = "fco_ray.rules.problems:binary_logistic"  # its JAX rule (E3)

    def loss_and_grad(self, params: Params, batch):
        from scipy.special import expit
        x, y, weight = batch["x"], batch["y"], batch["weight"]
        z = np.matmul(x, params["w"][..., None])[..., 0] + params["b"][:, None]
        loss = np.einsum("cb,cb->c", weight, np.logaddexp(0.0, z) - y * z)
        r = weight * (expit(z) - y)
        return loss, {"w": np.matmul(r[:, None, :], x)[:, 0], "b": r.sum(axis=1)}

    def predict(self, params, x):
        return (x @ params["w"] + params["b"] > 0).astype(np.int64)


class Multinomial(Classifier):
    """Multinomial logistic regression, model {"w": (d, k), "b": (k,)}."""

    rule: ClassVar = "fco_ray.rules.problems:multinomial"  # its JAX rule (E4)

    def loss_and_grad(self, params: Params, batch):
        x = batch["x"]
        logits = np.matmul(x, params["w"]) + _bias(params["b"])
        loss, dz = softmax_cross_entropy(logits, batch["y"], batch["weight"])
        return loss, {"w": np.matmul(np.swapaxes(x, -1, -2), dz), "b": dz.sum(axis=1)}

    def predict(self, params, x):
        return np.argmax(x @ params["w"] + params["b"], axis=-1)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray, weight: np.ndarray):
    """Loss (C,) = sum_b weight_b (logsumexp(z_b) - z_{b, y_b}) of logits z (C, B, k) and its
    gradient dL/dz = weight_b (softmax(z_b) - e_{y_b}) (C, B, k), computed stably."""
    top = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - top)
    total = e.sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
    loss = np.einsum("cb,cb->c", weight, (np.log(total) + top)[..., 0] - picked)
    dz = e / total
    np.put_along_axis(dz, y[..., None], np.take_along_axis(dz, y[..., None], axis=-1) - 1.0, axis=-1)
    dz *= weight[..., None]
    return loss, dz


# ---- configuration ----------------------------------------------------------------------

class _DataParams(ProblemParams):
    """Data options shared by the classification problems.

    `dataset` defaults to the problem's local-data source when `path` is given (so
    `--set problem.path=DIR` alone switches to it) and to `digits` otherwise.
    """

    LOCAL_DATASET: ClassVar[str]
    path: str | None = Field(None, description="local data directory (haxby, emnist)")
    clients: int | None = Field(None, ge=1, description=f"training clients of a shipped dataset "
                                f"(default {DEFAULT_CLIENTS}) or EMNIST writers (default all)")
    alpha: float = Field(0.5, gt=0, allow_inf_nan=False, description="Dirichlet label skew")
    test_fraction: float = Field(0.2, ge=0, le=0.9, description="held-out split of shipped data")
    # synthetic_fmri (fco_ray.data.synthetic_fmri); an error when set with another dataset
    # (its `own_keys` in fco_ray.data.datasets)
    grid: int = Field(10, ge=2, le=64, description="synthetic_fmri: voxels per side of the cubic grid")
    support: int = Field(50, ge=1, description="synthetic_fmri: nonzero voxels of each true map (<= grid^3)")
    blobs: int = Field(4, ge=1, le=100, description="synthetic_fmri: Gaussian bumps per true map")
    smoothness: float = Field(1.5, gt=0, le=32, allow_inf_nan=False,
                              description="synthetic_fmri: width (voxels) of the true map's bumps")
    noise_smoothness: float = Field(1.0, ge=0, le=32, allow_inf_nan=False,
                                    description="synthetic_fmri: width (voxels) of the noise smoothing (0: white)")
    subject_shift: float = Field(0.5, ge=0, le=100, allow_inf_nan=False,
                                 description="synthetic_fmri: scale of each subject's own offset")
    signal: float = Field(4.0, gt=0, le=1000, allow_inf_nan=False,
                          description="synthetic_fmri: standard deviation of the true logits")
    val_clients: int = Field(5, ge=0, le=100_000, description="synthetic_fmri: validation clients (held-out subjects)")
    subjects_per_client: int = Field(2, ge=1, le=10_000, description="synthetic_fmri: subjects per client")
    scans_per_subject: int = Field(20, ge=1, le=100_000, description="synthetic_fmri: scans per subject")

    def estimated_bytes(self):
        return DATASETS[self.dataset].estimated_bytes(self)

    @model_validator(mode="before")
    @classmethod
    def _default_dataset(cls, raw):
        if isinstance(raw, dict) and raw.get("dataset") is None:
            raw = {**raw, "dataset": cls.LOCAL_DATASET if raw.get("path") is not None else "digits"}
        return raw

    @model_validator(mode="after")
    def _path_use(self):
        # a path next to a shipped dataset would be silently ignored: reject it
        if self.path is not None and self.dataset != self.LOCAL_DATASET:
            raise ValueError(f"problem.path is only used by dataset {self.LOCAL_DATASET!r}, "
                             f"got dataset {self.dataset!r} with path {self.path!r}")
        return self

    @model_validator(mode="after")
    def _dataset_keys(self):
        """Keys another dataset owns are not set (the synthetic_fmri generator's), nor keys
        this dataset refuses (haxby: clients); its own constraints hold."""
        dataset = DATASETS[self.dataset]
        for other in DATASETS.values():
            given = [k for k in other.own_keys if k in self.model_fields_set]
            if other is not dataset and given:
                raise ValueError(f"problem.{given[0]} is only used by dataset {other.name!r}, "
                                 f"got dataset {self.dataset!r} with {given[0]}={getattr(self, given[0])!r}")
        for key, reason in dataset.unset_keys.items():
            if getattr(self, key) is not None:
                raise ValueError(f"problem.{key} must be unset for dataset {self.dataset!r} ({reason}), "
                                 f"got {getattr(self, key)}")
        dataset.check(self)
        return self


class SparseLogRegParams(_DataParams):
    """E3 l1-regularized binary logistic regression (lam = 1e-3 as in the paper). The paper's
    data is Haxby (`dataset: haxby`; `path: DIR`, or nilearn's data directories when unset);
    without a path the default is `digits` (3 vs 8), which runs anywhere."""

    LOCAL_DATASET: ClassVar[str] = "haxby"
    name: Literal["sparse_logreg"] = "sparse_logreg"
    problem_class: ClassVar[type[Problem]] = BinaryLogistic
    fusable_lam: ClassVar[bool] = True  # lam weighs psi only (ProblemParams.fusable_lam)
    lam: float = Field(1e-3, ge=0, allow_inf_nan=False)
    dataset: Literal["digits", "breast_cancer", "haxby", "synthetic_fmri"] = "digits"
    classes: tuple[int, int] = Field((3, 8), description="digits: (negative, positive) digit")
    mask: Literal["vt", "brain"] = Field("vt", description="haxby voxels: ventral temporal or whole brain")
    train_subjects: list[int] = Field([1, 2, 3, 4, 5], description="haxby training subjects")
    val_subjects: list[int] = Field([6], description="haxby validation subjects")
    standardize: bool = Field(True, description="haxby: z-score each voxel within each session")

    @model_validator(mode="after")
    def _valid(self):
        if len(set(self.classes)) != 2 or not all(0 <= c <= 9 for c in self.classes):
            raise ValueError(f"problem.classes must be two different digits in 0..9, got {list(self.classes)}")
        subjects = self.train_subjects + self.val_subjects
        if not self.train_subjects or not all(1 <= s <= 6 for s in subjects) or len(set(subjects)) < len(subjects):
            raise ValueError(f"problem.train_subjects {self.train_subjects} and val_subjects "
                             f"{self.val_subjects} must be distinct Haxby subjects in 1..6 "
                             f"(at least one training subject)")
        return self


class _ImageParams(_DataParams):
    """Digits (default) or federated EMNIST (`path: DIR` of TFF's HDF5 files), a norm-ball
    constraint on the weight matrices; `radius` defaults to DEFAULT_RADIUS[constraint]."""

    LOCAL_DATASET: ClassVar[str] = "emnist"
    DEFAULT_RADIUS: ClassVar[dict[str, float]]
    dataset: Literal["digits", "emnist", "synthetic_fmri"] = "digits"
    only_digits: bool = Field(True, description="emnist: 10 digit classes (True) or 62 classes")
    conditions: int = Field(2, ge=2, le=1000, description="synthetic_fmri: classes (experimental conditions)")
    constraint: Literal["l1_ball", "l2_ball"] = "l1_ball"
    radius: float = Field(gt=0, allow_inf_nan=False, description="radius of the ball (per matrix)")

    @model_validator(mode="before")
    @classmethod
    def _default_radius(cls, raw):
        if isinstance(raw, dict) and raw.get("radius") is None:
            raw = {**raw, "radius": cls.DEFAULT_RADIUS.get(raw.get("constraint", "l1_ball"), 1.0)}
        return raw


class ConstrainedLogRegParams(_ImageParams):
    """E4 multinomial logistic regression with ||W|| <= radius (W only, not the bias).
    Default radii bind on digits: the unconstrained solution after 200 FedAvg rounds has
    ||W||_1 ~ 300 and ||W||_2 ~ 18."""

    DEFAULT_RADIUS: ClassVar[dict[str, float]] = {"l1_ball": 100.0, "l2_ball": 10.0}
    name: Literal["constrained_logreg"] = "constrained_logreg"
    problem_class: ClassVar[type[Problem]] = Multinomial


@register_problem("sparse_logreg", SparseLogRegParams)
def build_sparse_logreg(p: SparseLogRegParams, seed: int) -> BinaryLogistic:
    train, val, info = DATASETS[p.dataset].load(p, seed, binary=True)
    shapes = {"w": (train.arrays["x"].shape[-1],), "b": ()}
    return BinaryLogistic(train=train, val=val, shapes=shapes, name="sparse_logreg", info=info,
                          psi=R.Blockwise({"w": R.L1(p.lam)}, shapes))


@register_problem("constrained_logreg", ConstrainedLogRegParams)
def build_constrained_logreg(p: ConstrainedLogRegParams, seed: int) -> Multinomial:
    train, val, info = DATASETS[p.dataset].load(p, seed, binary=False)
    shapes = {"w": (train.arrays["x"].shape[-1], info["classes"]), "b": (info["classes"],)}
    psi = R.Blockwise({"w": R.make(p.constraint, radius=p.radius)}, shapes)
    return Multinomial(train=train, val=val, shapes=shapes, psi=psi, name="constrained_logreg", info=info)
