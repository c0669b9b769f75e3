"""Parameters are flat dicts of NumPy arrays ("blocks"); these helpers map over them."""
from __future__ import annotations

from typing import Callable

import numpy as np

Params = dict[str, np.ndarray]


def tmap(fn: Callable, *trees: Params) -> Params:
    return {k: fn(*(t[k] for t in trees)) for k in trees[0]}


def axpy(a: float, x: Params, y: Params) -> Params:
    """a * x + y, blockwise."""
    return {k: a * x[k] + y[k] for k in y}


def sub(x: Params, y: Params) -> Params:
    return {k: x[k] - y[k] for k in x}


def stack(tree: Params, n: int) -> Params:
    """Copy an unbatched tree onto n clients: (n, *shape) per block."""
    return {k: np.repeat(np.asarray(v)[None], n, axis=0) for k, v in tree.items()}


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
