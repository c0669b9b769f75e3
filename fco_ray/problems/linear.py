"""Federated linear regression with a sparse (E1, LASSO) or low-rank (E2) ground truth.

Model: `y = <X, W> + b` with features `X` of shape `feature_shape` ((d,) or (p, q)), loss
`f = (<X, W> + b - y)^2` (the FCO paper's, no 1/2, so its learning rates and `lam` carry over
one to one), psi = lam * ||W||_1 or lam * ||W||_*, intercept `b` unregularized. The centralized
LASSO objective `mean (y - <x, w> - b)^2 + lam ||w||_1` is twice scikit-learn's `Lasso`
objective `1/(2n) ||y - Xw - b||^2 + alpha ||w||_1` at `alpha = lam / 2` (same minimizer).
`val_mse` is the mean squared error on validation clients.

Client heterogeneity: client m's features are shifted by its own `mu_m ~ N(0, shift^2 I)`
(`shift = 0`: IID clients). A shift adds a rank-one term `mu_m mu_m^T` of eigenvalue about
`shift^2 d` to client m's Hessian, which bounds the stable client rates.
"""
from __future__ import annotations


import numpy as np

from ..data.stores import ClientData
from ..ops import regularizers as R
from ..ops.tree import Params
from .base import Problem

NONZERO = 1e-4  # |w_i| above this counts as in the support (the FCO paper's E1 rule)
RANK_TOL = 1e-4  # singular values above this count towards the rank (E2)


class LinearRegression(Problem):
    #: its rule (the clients' gradient, psi's prox): fco_ray.rules.problems.LeastSquares; the
    #: composite family's local steps are accelerated by numba under an l1 penalty
    #: (fco_ray.accelerators.least_squares) and under a nuclear one (fco_ray.accelerators.lowrank)
    rule = "fco_ray.rules.problems:least_squares"

    def loss_and_grad(self, params: Params, batch):
        xf, resid = self._residuals(params, batch["x"], batch["y"])
        wr = batch["weight"] * resid
        return np.einsum("cb,cb->c", wr, resid), self._grads(2.0 * wr, xf)

    def _overrides(self, *names: str) -> bool:
        """Whether a subclass (or this instance itself) has its own version of any of these
        methods: the stacked metrics compute this class's metrics themselves, and must not
        bypass another's."""
        return any(n in vars(self) or getattr(type(self), n) is not getattr(LinearRegression, n)
                   for n in names)

    @staticmethod
    def _residuals(params: Params, x: np.ndarray, y: np.ndarray):
        """Features as (C, B, P) and residuals r_cb = <x_cb, W_c> + b_c - y_cb, (C, B)."""
        c, b = x.shape[0], x.shape[1]
        xf = x.reshape(c, b, -1)
        resid = np.matmul(xf, params["w"].reshape(c, -1, 1))[..., 0]
        resid += params["b"].reshape(c, 1)
        resid -= y
        return xf, resid

    def _grads(self, wr: np.ndarray, xf: np.ndarray) -> Params:
        """Gradients sum_b wr_cb x_cb (W) and sum_b wr_cb (b) of weighted residuals wr."""
        c = xf.shape[0]
        return {"w": np.matmul(wr[:, None, :], xf).reshape((c,) + self.shapes["w"]), "b": wr.sum(axis=1)}

    def loss(self, params: Params) -> float:
        """F(W, b) = (1/M) sum_m sum_i weight_mi (<x_mi, W> + b - y_mi)^2, without the
        gradient: one pass over the training data instead of the two of `full_loss_grad`
        (every evaluation computes it; same value up to summation order)."""
        return self.mse(params, self.train)

    def predict(self, params: Params, data: ClientData) -> np.ndarray:
        xf = data.arrays["x"].reshape(data.num_clients, data.arrays["x"].shape[1], -1)
        return xf @ params["w"].reshape(-1) + params["b"]

    def mse(self, params: Params, data: ClientData) -> float:
        resid = self.predict(params, data) - data.arrays["y"]
        return float(np.sum(data.full_weights() * resid**2) / data.num_clients)

    def evaluate(self, params: Params) -> dict[str, float]:
        out = {}
        if self.val is not None:
            out["val_mse"] = self.mse(params, self.val)
        out.update(self._model_metrics(params["w"]))
        return out

    def _model_metrics(self, w: np.ndarray) -> dict[str, float]:
        """Support metrics (E1) or rank and recovery error (E2) of one model's weights."""
        truth = self.info.get("w_true")
        if len(self.shapes["w"]) == 1:
            return support_metrics(w, truth)
        out = {"rank": float(np.sum(np.linalg.svd(w, compute_uv=False) > RANK_TOL))}
        if truth is not None:
            out["recovery_error"] = float(np.linalg.norm(w - truth))
        return out

    def metrics_stack(self, stacked: Params, count: int) -> list[dict[str, float]]:
        """`metrics` of G stacked models with one pass over the training (and validation)
        data for all of them: predictions X W^T for G models as one matrix product instead
        of G passes over the samples. Same values as `metrics` up to summation order."""
        if self._overrides("metrics", "evaluate", "objective", "loss", "mse", "predict"):
            return super().metrics_stack(stacked, count)
        w = np.asarray(stacked["w"], dtype=float).reshape(count, -1)
        b = np.broadcast_to(np.asarray(stacked["b"], dtype=float), (count,))
        with np.errstate(all="ignore"):
            train = self._mse_stack(w, b, self.train)
            val = self._mse_stack(w, b, self.val) if self.val is not None else None
            out = []
            for g in range(count):
                params = {"w": w[g].reshape(self.shapes["w"]), "b": b[g]}
                row = {"train_loss": train[g] + float(self.psi.value(params))}
                if val is not None:
                    row["val_mse"] = val[g]
                row.update(self._model_metrics(params["w"]))
                out.append(row)
        return out

    def _mse_stack(self, w: np.ndarray, b: np.ndarray, data: ClientData) -> np.ndarray:
        """`mse` of the G models (w: (G, P), b: (G,)) on `data`: shape (G,)."""
        x = data.arrays["x"].reshape(-1, w.shape[1])
        resid = x @ w.T
        resid += b
        resid -= data.arrays["y"].reshape(-1, 1)
        weights = data.full_weights().reshape(1, -1)
        return (weights @ resid**2).reshape(-1) / data.num_clients


def support_metrics(w: np.ndarray, truth: np.ndarray | None) -> dict[str, float]:
    """Support precision / recall / F1 (nonzero = |w_i| > 1e-4) and density l0/d."""
    found = np.abs(w) > NONZERO
    out = {"density": float(found.mean())}
    if truth is not None:
        true = truth != 0
        tp = float(np.sum(found & true))
        precision = tp / found.sum() if found.any() else 0.0
        recall = tp / true.sum() if true.any() else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        out.update(precision=precision, recall=recall, f1=f1)
    return out


def _client_sizes(clients: int, samples_per_client) -> np.ndarray:
    sizes = np.broadcast_to(np.asarray(samples_per_client, dtype=np.int64), (clients,))
    return sizes.copy()


def _ar1_gaussian(rng, shape, rho: float) -> np.ndarray:
    """Gaussian rows with covariance Sigma_ij = rho^|i-j| along the last axis: the AR(1)
    recursion x_t = e_t + rho x_{t-1} (the numbers of scipy.signal.lfilter([1], [1, -rho]),
    bit for bit, without its 2 s import)."""
    e = rng.standard_normal(shape)
    e[..., 1:] *= np.sqrt(1 - rho**2)
    x = np.moveaxis(e, -1, 0).copy()  # time first: each step one contiguous slab
    for t in range(1, x.shape[0]):
        x[t] += rho * x[t - 1]
    return np.ascontiguousarray(np.moveaxis(x, 0, -1))


def _regression_clients(rng, sizes, feature_shape, w_true, bias, noise, shift, features) -> ClientData:
    n_max = int(sizes.max())
    x = features(rng, (len(sizes), n_max) + feature_shape)
    # client shift mu_m ~ N(0, shift^2 I); drawn for every shift, so the other draws stay the same
    x += shift * rng.standard_normal((len(sizes), 1) + feature_shape)
    mask = np.arange(n_max)[None, :] < sizes[:, None]
    x *= mask.reshape(mask.shape + (1,) * len(feature_shape))
    y = np.tensordot(x, w_true, axes=len(feature_shape)) + bias
    y += noise * rng.standard_normal(y.shape)
    return ClientData({"x": x, "y": y * mask}, sizes)


def make_lasso(*, seed: int, lam: float, clients: int, samples_per_client, dim: int,
               support: int, val_clients: int, bias: str, correlation: float,
               noise: float, shift: float) -> LinearRegression:
    """E1: w*_j = 1 for j < support; x = mu_m + delta, mu_m ~ N(0, shift^2 I),
    delta ~ N(0, Sigma), Sigma_ij = rho^|i-j|; y = <x, w*> + b* + N(0, noise^2)."""
    rng = np.random.default_rng([seed, 0xDA7A])
    w_true = (np.arange(dim) < support).astype(float)
    b_true = rng.standard_normal() if bias == "gaussian" else 0.0
    feats = lambda g, shape: _ar1_gaussian(g, shape, correlation)  # noqa: E731
    sizes = _client_sizes(clients, samples_per_client)
    train = _regression_clients(rng, sizes, (dim,), w_true, b_true, noise, shift, feats)
    val = _regression_clients(rng, _client_sizes(val_clients, int(sizes.max())), (dim,), w_true,
                              b_true, noise, shift, feats)
    return LinearRegression(
        train=train, val=val, shapes={"w": (dim,), "b": ()},
        psi=R.Blockwise({"w": R.L1(lam)}, {"w": (dim,), "b": ()}),
        name="lasso", info={"w_true": w_true, "b_true": b_true},
    )


def make_lowrank(*, seed: int, lam: float, clients: int, samples_per_client, dim: int,
                 rank: int, val_clients: int, noise: float, shift: float) -> LinearRegression:
    """E2: W* = diag(1,..,1,0,..,0) of rank `rank`; X = G + Mu_m, Mu_m with iid N(0, shift^2)
    entries; y = <X, W*> + N(0, noise^2)."""
    rng = np.random.default_rng([seed, 0xDA7A])
    w_true = np.diag((np.arange(dim) < rank).astype(float))
    feats = lambda g, shape: g.standard_normal(shape)  # noqa: E731
    sizes = _client_sizes(clients, samples_per_client)
    shape = (dim, dim)
    train = _regression_clients(rng, sizes, shape, w_true, 0.0, noise, shift, feats)
    val = _regression_clients(rng, _client_sizes(val_clients, int(sizes.max())), shape, w_true,
                              0.0, noise, shift, feats)
    return LinearRegression(
        train=train, val=val, shapes={"w": shape, "b": ()},
        psi=R.Blockwise({"w": R.Nuclear(lam)}, {"w": shape, "b": ()}),
        name="lowrank", info={"w_true": w_true},
    )
