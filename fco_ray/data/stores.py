"""Client data stores: where a problem keeps its training clients' samples.

Two stores, one protocol (`ClientStore`): `num_clients`, `sizes` (samples per client),
`max_samples`, `take(rows)` (the given clients, in that order, as a store of the same kind)
and `bytes_per_sample` (memory of one sample, for the backends' blocking).

- `ClientData`: dense per-client arrays stacked and padded, (clients, max_samples, ...).
- `SparseNodes`: per-node sparse rows (CSR), node k = rows offsets[k]:offsets[k+1]; memory
  O(nnz + n), nothing is ever densified.

This module imports nothing from `fco_ray.problems` (problems build on stores, loaders in
`fco_ray.data` produce them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:  # scipy loads on first use, not with the config schemas
    import scipy.sparse as sp


class ClientStore(Protocol):
    sizes: np.ndarray

    @property
    def num_clients(self) -> int: ...

    @property
    def max_samples(self) -> int: ...

    @property
    def bytes_per_sample(self) -> int: ...

    def take(self, rows) -> "ClientStore": ...


def as_pm1(y) -> np.ndarray:
    """Labels as floats in {-1, +1}: {0, 1} maps 0 -> -1; anything else is an error."""
    y = np.asarray(y, dtype=float).ravel()
    values = set(np.unique(y).tolist())
    if values <= {-1.0, 1.0}:
        return y
    if values <= {0.0, 1.0}:
        return 2.0 * y - 1.0
    shown = sorted(values)[:6]
    raise ValueError(f"labels must be in {{-1, +1}} or {{0, 1}}, got values {shown}"
                     f"{' ...' if len(values) > 6 else ''}")


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for every (s, l), without a Python loop."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)


@dataclass
class ClientData:
    """Stacked per-client arrays of shape (clients, max_samples, ...) plus true sizes."""

    arrays: dict[str, np.ndarray]
    sizes: np.ndarray

    def __post_init__(self):
        self.sizes = np.asarray(self.sizes, dtype=np.int64)
        if self.sizes.ndim != 1 or len(self.sizes) == 0:
            raise ValueError("ClientData.sizes must be a non-empty 1-D array of sample counts")
        if np.any(self.sizes < 1):
            raise ValueError(f"every client needs at least one sample, got sizes {self.sizes.min()}..")
        for name, arr in self.arrays.items():
            if arr.shape[:1] != self.sizes.shape or arr.shape[1] < self.sizes.max():
                raise ValueError(
                    f"data array {name!r} has shape {arr.shape}; expected "
                    f"({len(self.sizes)}, >= {self.sizes.max()}, ...) for {len(self.sizes)} clients"
                )

    @classmethod
    def from_lists(cls, per_client: list[dict[str, np.ndarray]]) -> "ClientData":
        """Stack a list of per-client dicts of arrays (first axis = samples), padding with zeros."""
        if not per_client:
            raise ValueError("need at least one client")
        names = list(per_client[0])
        sizes = np.array([len(c[names[0]]) for c in per_client])
        arrays = {}
        for name in names:
            first = np.asarray(per_client[0][name])
            out = np.zeros((len(per_client), sizes.max()) + first.shape[1:], dtype=first.dtype)
            for i, c in enumerate(per_client):
                a = np.asarray(c[name])
                if len(a) != sizes[i]:
                    raise ValueError(f"client {i}: array {name!r} has {len(a)} rows, expected {sizes[i]}")
                out[i, : len(a)] = a
            arrays[name] = out
        return cls(arrays, sizes)

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    @property
    def max_samples(self) -> int:
        return self.arrays[next(iter(self.arrays))].shape[1]

    @property
    def bytes_per_sample(self) -> int:
        return sum(v.itemsize * int(np.prod(v.shape[2:], dtype=np.int64)) for v in self.arrays.values())

    def take(self, rows) -> "ClientData":
        rows = np.asarray(rows)
        return ClientData({k: v[rows] for k, v in self.arrays.items()}, self.sizes[rows])

    def gather(self, name: str, flat: np.ndarray) -> np.ndarray:
        """Rows of array `name` at flat indices client * max_samples + sample: one flat take
        is several times faster than 2-D fancy indexing."""
        v = self.arrays[name]
        return v.reshape((-1,) + v.shape[2:]).take(flat, axis=0)

    def full_weights(self) -> np.ndarray:
        """(clients, max_samples) weights 1/n_c on real rows, 0 on padding."""
        n = self.arrays[next(iter(self.arrays))].shape[1]
        mask = np.arange(n)[None, :] < self.sizes[:, None]
        return mask / self.sizes[:, None]

    def pooled(self) -> dict[str, np.ndarray]:
        """All real samples of all clients concatenated (for reference solvers)."""
        mask = np.arange(self.arrays[next(iter(self.arrays))].shape[1])[None, :] < self.sizes[:, None]
        return {k: v[mask] for k, v in self.arrays.items()}


@dataclass
class SparseNodes:
    """Per-node sparse data: CSR rows grouped by node (node k = rows offsets[k]:offsets[k+1]).

    `scale` (optional) holds FSVRG's per-coordinate scaling s_k^j at every stored nonzero
    (aligned with `x.data`), computed once from the whole training set, so that shards keep
    the global statistics. Values must be finite (a NaN or inf is an error: it is bad data,
    not a diverged run).
    """

    x: sp.csr_matrix
    y: np.ndarray
    sizes: np.ndarray
    scale: np.ndarray | None = None

    def __post_init__(self):
        import scipy.sparse as sp
        if not sp.issparse(self.x):
            raise ValueError(f"SparseNodes.x must be a scipy.sparse matrix, got {type(self.x).__name__}")
        self.x = sp.csr_matrix(self.x, dtype=np.float64)
        if not self.x.has_canonical_format or np.any(self.x.data == 0):
            self.x = self.x.copy()  # the fixes below work in place: leave the caller's matrix alone
            self.x.sum_duplicates()  # sorted, unique column indices per row
            self.x.eliminate_zeros()  # stored entries = the nonzero pattern FSVRG counts
        if not np.all(np.isfinite(self.x.data)):
            entry = np.flatnonzero(~np.isfinite(self.x.data))[0]
            row = int(np.searchsorted(self.x.indptr, entry, "right")) - 1
            raise ValueError(f"SparseNodes: row {row} holds a non-finite value (NaN or inf)")
        self.sizes = np.asarray(self.sizes, dtype=np.int64)
        if self.sizes.ndim != 1 or len(self.sizes) == 0 or np.any(self.sizes < 1):
            raise ValueError(f"SparseNodes.sizes must be a non-empty 1-D array of counts >= 1, "
                             f"got {self.sizes if self.sizes.size < 8 else self.sizes[:8]}")
        if self.x.shape[0] != self.sizes.sum():
            raise ValueError(f"SparseNodes: x has {self.x.shape[0]} rows but sizes sum to {self.sizes.sum()}")
        self.y = as_pm1(self.y)
        if len(self.y) != self.x.shape[0]:
            raise ValueError(f"SparseNodes: {len(self.y)} labels for {self.x.shape[0]} rows")
        if self.scale is not None and len(self.scale) != self.x.nnz:
            raise ValueError(f"SparseNodes.scale has {len(self.scale)} entries for {self.x.nnz} nonzeros")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    @property
    def max_samples(self) -> int:
        return int(self.sizes.max())

    @property
    def dim(self) -> int:
        return self.x.shape[1]

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The raw arrays (what a shard holds in memory)."""
        out = {"data": self.x.data, "indices": self.x.indices, "indptr": self.x.indptr, "y": self.y}
        if self.scale is not None:
            out["scale"] = self.scale
        return out

    @property
    def bytes_per_sample(self) -> int:
        """Average bytes of one sample (its nonzeros, their scalings, row pointer, label)."""
        return -(-sum(a.nbytes for a in self.arrays.values()) // max(1, self.x.shape[0]))

    def node_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_clients), self.sizes)

    def rows_of(self, nodes) -> np.ndarray:
        """Row indices (into x) of the given nodes, node by node."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return ranges(self.offsets[nodes], self.sizes[nodes])

    def take(self, nodes) -> "SparseNodes":
        """The given nodes (in that order) as SparseNodes; O(their nnz). All nodes in order:
        `self` (nothing mutates node data, so no copy is needed)."""
        import scipy.sparse as sp
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) == self.num_clients and np.array_equal(nodes, np.arange(self.num_clients)):
            return self
        rows = self.rows_of(nodes)
        lengths = np.diff(self.x.indptr)[rows]
        pos = ranges(self.x.indptr[rows], lengths)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        x = sp.csr_matrix((self.x.data[pos], self.x.indices[pos], indptr), shape=(len(rows), self.dim))
        x.has_canonical_format = True  # rows are copied whole, so still sorted and unique
        return SparseNodes(x, self.y[rows], self.sizes[nodes],
                           None if self.scale is None else self.scale[pos])


__all__ = ["ClientData", "ClientStore", "SparseNodes", "as_pm1", "ranges"]
