"""Parameters are flat dicts of NumPy arrays ("blocks"); these helpers map over them."""
from __future__ import annotations

import numpy as np

Params = dict[str, np.ndarray]


def per_row(a, ndim: int):
    """A scalar, or one value per row of a stack (shape (R,)) shaped to broadcast over an
    array of `ndim` axes whose first axis is the rows: (R, 1, ..., 1). Fused runs keep a
    hyperparameter per stacked configuration this way (fco_ray.core.group)."""
    a = np.asarray(a) if not isinstance(a, (int, float)) else a
    if np.ndim(a) == 1 and ndim > 1:
        return a.reshape((-1,) + (1,) * (ndim - 1))
    return a


def axpy(a, x: Params, y: Params) -> Params:
    """a * x + y, blockwise; `a` a scalar or one value per row (see `per_row`)."""
    return {k: per_row(a, np.ndim(x[k])) * x[k] + y[k] for k in y}


def sub(x: Params, y: Params) -> Params:
    return {k: x[k] - y[k] for k in x}


def copy(tree: Params) -> Params:
    return {k: np.array(v, copy=True) for k, v in tree.items()}


def size(tree) -> int:
    """Number of floats in a tree (scalars count as one)."""
    if isinstance(tree, dict):
        return sum(size(v) for v in tree.values())
    return int(np.size(tree))


def all_finite(tree) -> bool:
    if isinstance(tree, dict):
        return all(all_finite(v) for v in tree.values())
    return bool(np.all(np.isfinite(tree)))
