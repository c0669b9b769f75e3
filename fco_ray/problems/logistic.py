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

Datasets:
- `digits` (default, ships with scikit-learn): 8x8 pixels scaled to [0, 1]; a random 20 %
  test split; the rest split over `clients` by Dirichlet(`alpha`) label skew. For the binary
  problem only the two digits `classes` = (negative, positive) are kept (default 3 vs 8).
- `breast_cancer` (binary, ships with scikit-learn): features standardized with the
  training split's mean and standard deviation, then split like `digits`.
- `haxby` (binary, local copy, see `fco_ray.data.haxby`): one client per session.
- `emnist` (multinomial, local copy, see `fco_ray.data.emnist`): one client per writer,
  validation = the same writers' test examples.
- `synthetic_fmri` (binary, or `conditions` classes for the constrained problems; generated,
  see `fco_ray.data.synthetic_fmri`): a known sparse smooth weight map on a 3-D voxel grid,
  spatially correlated voxels, `subjects_per_client` subjects per client, labels from the
  logistic model; validation = `val_clients` clients of held-out subjects. On
  `sparse_logreg` the metrics add the support `precision`, `recall` and `f1` against the
  true map (nonzero = |w| > 1e-4).
"""
from __future__ import annotations

import abc
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ..data.partition import dirichlet_label_split
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


# ---- feasibility ------------------------------------------------------------------------

# ---- data -------------------------------------------------------------------------------

DEFAULT_CLIENTS = 20  # clients of the shipped (scikit-learn) datasets and of synthetic_fmri
SHIPPED_SIZES = {"digits": (1797, 64), "breast_cancer": (569, 30)}  # (samples, features)
EMNIST_SIZES = {True: (3383, 341_873 + 40_832), False: (3400, 671_585 + 77_483)}  # TFF's counts


def clients_from_pairs(pairs) -> ClientData:
    """ClientData with arrays `x`, `y` from per-client (x, y) pairs; empty clients dropped."""
    return ClientData.from_lists([{"x": x, "y": y} for x, y in pairs if len(y)])


def split_pooled(x: np.ndarray, y: np.ndarray, clients: int, alpha: float, seed: int,
                 test_fraction: float, standardize: bool = False):
    """A random test split (one validation client) and a Dirichlet(alpha) label-skewed split
    of the rest over `clients`. With `standardize`, features are z-scored with the training
    split's statistics. Returns (train, test or None)."""
    rng = np.random.default_rng([seed, 0xC1A5])
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    if standardize:
        mean, std = x[train].mean(axis=0), x[train].std(axis=0)
        x = (x - mean) / np.where(std > 0, std, 1.0)
    parts = dirichlet_label_split(y[train], clients, alpha, rng)
    train_data = clients_from_pairs([(x[train][p], y[train][p]) for p in parts])
    return train_data, (clients_from_pairs([(x[test], y[test])]) if n_test else None)


def shipped_dataset(name: str, classes: tuple[int, int] | None = None):
    """(x, y) of a scikit-learn dataset: `digits` (pixels / 16; with `classes` = (neg, pos)
    only those two digits, y = 1 for pos) or `breast_cancer` (y = 1 benign)."""
    from sklearn import datasets

    if name == "breast_cancer":
        return datasets.load_breast_cancer(return_X_y=True)
    x, y = datasets.load_digits(return_X_y=True)
    x = x / 16.0
    if classes is not None:
        keep = np.isin(y, classes)
        x, y = x[keep], (y[keep] == classes[1]).astype(np.int64)
    return x, y


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
    SYNTHETIC_KEYS: ClassVar[tuple[str, ...]] = (
        "grid", "support", "blobs", "smoothness", "noise_smoothness", "subject_shift", "signal",
        "val_clients", "subjects_per_client", "scans_per_subject")

    def estimated_bytes(self):
        if self.dataset == "synthetic_fmri":
            scans = ((self.clients or DEFAULT_CLIENTS) + self.val_clients) * self.subjects_per_client * self.scans_per_subject
            return {f"the synthetic_fmri scans ({scans:,} x {self.grid}^3 voxels, float64, twice; "
                    f"problem.clients, val_clients, subjects_per_client, scans_per_subject, grid)":
                    2 * 8 * scans * self.grid ** 3}
        if self.dataset == "haxby":  # one subject's 4-D BOLD series at a time, float32
            return {"one Haxby subject's BOLD series (40 x 64 x 64 x 1,452 float32)": 4 * 40 * 64 * 64 * 1452}
        if self.dataset == "emnist":  # float32 pixels, read once and copied into client arrays
            writers, examples = EMNIST_SIZES[self.only_digits]
            share = min(self.clients or writers, writers) / writers
            return {f"the EMNIST examples ({examples:,} x 784 float32, twice; x problem.clients"
                    f"={self.clients} / {writers:,} writers)": int(2 * 4 * 784 * examples * share)}
        n, d = SHIPPED_SIZES[self.dataset]
        return {f"the {self.dataset} data ({n:,} x {d} floats, twice)": 2 * 8 * n * d}

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
    def _synthetic_keys(self):
        """The generator's keys are set only with it, and its support fits its grid."""
        if self.dataset != "synthetic_fmri":
            given = [k for k in self.SYNTHETIC_KEYS if k in self.model_fields_set]
            if given:
                raise ValueError(f"problem.{given[0]} is only used by dataset 'synthetic_fmri', "
                                 f"got dataset {self.dataset!r} with {given[0]}={getattr(self, given[0])!r}")
            return self
        if self.support > self.grid ** 3:
            raise ValueError(f"problem.support must be in [1, {self.grid ** 3}] (problem.grid^3 "
                             f"voxels at grid={self.grid}), got {self.support}")
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
        if self.dataset == "haxby" and self.clients is not None:
            raise ValueError(f"problem.clients must be unset for dataset 'haxby' (one client per "
                             f"session), got {self.clients}")
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
    SYNTHETIC_KEYS: ClassVar[tuple[str, ...]] = (*_DataParams.SYNTHETIC_KEYS, "conditions")
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


def synthetic_fmri(p: _DataParams, seed: int, conditions: int = 2):
    """Training clients, validation clients (None if val_clients = 0) and info (the truth
    `w_true`, `bayes_accuracy`, `classes`) of the synthetic_fmri stand-in."""
    from ..data.synthetic_fmri import make_synthetic_fmri

    data = make_synthetic_fmri(seed, conditions=conditions, clients=p.clients or DEFAULT_CLIENTS,
                               **{k: getattr(p, k) for k in _DataParams.SYNTHETIC_KEYS})
    info = {"dataset": "synthetic_fmri", "classes": conditions, "w_true": data.truth,
            "bayes_accuracy": data.bayes_accuracy}
    return clients_from_pairs(data.train), clients_from_pairs(data.val) if data.val else None, info


def image_data(p: _ImageParams, seed: int) -> tuple[ClientData, ClientData | None, dict]:
    """Training clients, validation (test) data and info for digits, federated EMNIST or
    synthetic_fmri (`conditions` classes)."""
    if p.dataset == "synthetic_fmri":
        return synthetic_fmri(p, seed, p.conditions)
    if p.dataset == "emnist":
        from ..data.emnist import load_emnist

        try:
            data = load_emnist(p.path, p.only_digits, p.clients, seed)
        except FileNotFoundError as e:
            raise ValueError(f"problem.path: {e}") from None
        test = [pair for pair in data.test if len(pair[1])]
        return (clients_from_pairs(data.train), clients_from_pairs(test) if test else None,
                {"classes": data.classes, "client_ids": data.client_ids})
    x, y = shipped_dataset("digits")
    train, val = split_pooled(x, y, p.clients or DEFAULT_CLIENTS, p.alpha, seed, p.test_fraction)
    return train, val, {"classes": 10}


@register_problem("sparse_logreg", SparseLogRegParams)
def build_sparse_logreg(p: SparseLogRegParams, seed: int) -> BinaryLogistic:
    info = {"dataset": p.dataset}
    if p.dataset == "haxby":
        from ..data.haxby import load_haxby

        try:
            data = load_haxby(p.path, p.train_subjects, p.val_subjects, p.mask, p.standardize)
        except FileNotFoundError as e:
            raise ValueError(f"problem.path: {e}") from None
        train = clients_from_pairs(data.train)
        val = clients_from_pairs(data.val) if data.val else None
        info.update(sessions_train=data.sessions_train, sessions_val=data.sessions_val)
    elif p.dataset == "synthetic_fmri":
        train, val, info = synthetic_fmri(p, seed)
    else:
        x, y = shipped_dataset(p.dataset, p.classes if p.dataset == "digits" else None)
        train, val = split_pooled(x, y, p.clients or DEFAULT_CLIENTS, p.alpha, seed, p.test_fraction,
                                  standardize=p.dataset == "breast_cancer")
    shapes = {"w": (train.arrays["x"].shape[-1],), "b": ()}
    return BinaryLogistic(train=train, val=val, shapes=shapes, name="sparse_logreg", info=info,
                          psi=R.Blockwise({"w": R.L1(p.lam)}, shapes))


@register_problem("constrained_logreg", ConstrainedLogRegParams)
def build_constrained_logreg(p: ConstrainedLogRegParams, seed: int) -> Multinomial:
    train, val, info = image_data(p, seed)
    shapes = {"w": (train.arrays["x"].shape[-1], info["classes"]), "b": (info["classes"],)}
    psi = R.Blockwise({"w": R.make(p.constraint, radius=p.radius)}, shapes)
    return Multinomial(train=train, val=val, shapes=shapes, psi=psi, name="constrained_logreg", info=info)
