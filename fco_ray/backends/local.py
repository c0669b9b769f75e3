"""In-process backend: the sampled clients' local steps as stacked NumPy computations."""
from __future__ import annotations

import numpy as np

from ..random import Key


def weighted_sum(algorithm, problem, payload, rows, key: Key) -> tuple[dict, float]:
    """Sum over the clients `rows` of weight * message (the shard-level pre-aggregation)."""
    messages = algorithm.client_update(problem, payload, rows, key)
    weights = algorithm.client_weights(problem, rows)
    return {k: np.tensordot(weights, v, axes=1) for k, v in messages.items()}, float(weights.sum())


def add_sums(parts: list[tuple[dict, float]]) -> tuple[dict, float]:
    total = dict(parts[0][0])
    for sums, _ in parts[1:]:
        for k, v in sums.items():
            total[k] = total[k] + v
    return total, sum(w for _, w in parts)


class LocalBackend:
    """All clients live in this process. `chunk_size` bounds the clients stacked at once
    (memory), without changing results beyond summation order."""

    name = "local"

    def __init__(self, problem, chunk_size: int = 1024):
        self.problem = problem
        self.chunk_size = chunk_size

    def map_clients(self, algorithm, payload, client_ids: np.ndarray, key: Key) -> tuple[dict, float]:
        parts = []
        for start in range(0, len(client_ids), self.chunk_size):
            ids = client_ids[start:start + self.chunk_size]
            parts.append(weighted_sum(algorithm, self.problem, payload, ids,
                                      Key(key.seed, key.round, ids)))
        return add_sums(parts)

    def close(self):
        pass
