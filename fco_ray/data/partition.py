"""Splitting a pooled labelled dataset over clients, and scikit-learn's digits as clients."""
from __future__ import annotations

import numpy as np


def dirichlet_label_split(labels: np.ndarray, clients: int, alpha: float,
                          rng: np.random.Generator, min_size: int = 1) -> list[np.ndarray]:
    """Label-skewed split: each class is divided over clients in Dirichlet(alpha) proportions.

    Small `alpha` gives clients few classes (non-IID); large `alpha` approaches IID. Redraws
    until every client has at least `min_size` samples. Returns one index array per client.
    """
    if clients < 1 or clients * min_size > len(labels):
        raise ValueError(f"clients must be in [1, {len(labels) // max(min_size, 1)}] for "
                         f"{len(labels)} samples, got {clients}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    for _ in range(1000):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for cls in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == cls))
            cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha))) * len(idx)).astype(int)[:-1]
            for c, chunk in enumerate(np.split(idx, cuts)):
                parts[c].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ValueError(f"could not give every one of {clients} clients {min_size} samples "
                     f"with alpha={alpha}; use fewer clients or a larger alpha")


def digits_clients(clients: int, alpha: float, seed: int, test_fraction: float = 0.2):
    """scikit-learn's 8x8 digits (pixels scaled to [0, 1]), a held-out test split, and the
    training part split over `clients` by Dirichlet label skew.

    Returns (client_indices, x_train, y_train, x_test, y_test).
    """
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng([seed, 0xD161])
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    split = dirichlet_label_split(y[train], clients, alpha, rng)
    return split, x[train], y[train], x[test], y[test]
