"""In-process backend: the sampled clients' local steps as stacked NumPy computations."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..random import Key

#: Minibatch bytes that one block of stacked clients gathers per local step. A block whose
#: step data fits in the L2/L3 caches keeps the gathered batch in cache between the gather
#: and the passes over it (residuals, then gradient); one stack of thousands of clients
#: streams every pass through memory and pays page faults for each fresh array. On the
#: 2-core benchmark machine (1 MiB L2, 32 MiB L3) 2-5 MiB blocks were 1.5-3x faster than
#: 1000-client stacks (benchmarks/README.md).
BLOCK_BYTES = 3 << 20
MIN_BLOCK = 8  # below this the per-block Python overhead outweighs the cache gain


def block_size(algorithm, problem) -> int:
    """Clients per block: BLOCK_BYTES / (batch_size x bytes of one sample), at least MIN_BLOCK.
    Without a batch size (full local passes) a client's whole data counts."""
    train = problem.train
    row = sum(v.nbytes for v in train.arrays.values()) / max(1, int(train.sizes.sum()))
    batch = getattr(algorithm.hp, "batch_size", None) or int(train.sizes.max())
    return max(MIN_BLOCK, int(BLOCK_BYTES // max(1.0, batch * row)))


def weighted_sum(algorithm, problem, payload, rows, key: Key) -> tuple[dict, float]:
    """Sum over the clients `rows` of weight * message (the shard-level pre-aggregation),
    computed block by block (see BLOCK_BYTES). Client randomness is keyed by client id,
    so blocking changes nothing but the order of the final sum."""
    rows = np.asarray(rows)
    ids = np.asarray(key.client_ids)
    # blocks of about block_size clients, of equal sizes (10 clients with a block size of 9
    # make one block, not 9 + 1); no rows: one empty block, as before blocking
    n = len(rows)
    blocks = max(1, round(n / block_size(algorithm, problem)))
    parts = []
    for i in range(blocks):
        part = slice(i * n // blocks, (i + 1) * n // blocks)
        messages = algorithm.client_update(problem, payload, rows[part],
                                           dataclasses.replace(key, client_ids=ids[part]))
        weights = algorithm.client_weights(problem, rows[part])
        parts.append(({k: _weighted(weights, v) for k, v in messages.items()}, float(weights.sum())))
    return add_sums(parts)


def _weighted(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """sum_c weights[c] * v[c] as one matrix-vector product (np.tensordot has more
    Python overhead for these small stacks)."""
    v = np.asarray(v)
    return (weights @ v.reshape(len(weights), -1)).reshape(v.shape[1:])


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
