"""The member axis padded to a power of two on the device (a `RuleGroup`'s state and
hyperparameters: `fco_ray.core.group` owns the layout; the device only pads it)."""
from __future__ import annotations

import numpy as np


def padded_size(g: int) -> int:
    """Members padded to a power of two: fewer compilations as members leave."""
    return 1 << max(0, (g - 1).bit_length())


def pad(values: np.ndarray, size: int) -> np.ndarray:
    """Members padded to `size` with copies of member 0 (padding never runs: alive is False)."""
    return np.concatenate([values, np.repeat(values[:1], size - len(values), axis=0)]) if size > len(values) else values


def pad_tree(tree, size: int):
    if isinstance(tree, dict):
        return {k: pad_tree(v, size) for k, v in tree.items()}
    return pad(tree, size)
