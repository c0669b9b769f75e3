"""Statistics of a sparse (CSR) sample's nonzero pattern per node, compiled (numba): the counts
and FSVRG's scalings that the text problem (fco_ray/problems/text.py) computes once per data set.
Compiled on first use and cached on disk where that is possible (`kernels.CACHE`).
Tests: tests/engine/test_svrg.py (test_sparsity_scalings_match_their_definitions).
"""
from __future__ import annotations

import numpy as np

from .kernels import kernel


@kernel()
def sparsity_scalings(indices, indptr, offsets, d):
    """FSVRG's s_k^j = (n^j n_k) / (n n_k^j) at every stored nonzero, and omega^j, from the
    nonzero pattern: n^j samples with feature j, n_k^j those on node k (the nonzero's node),
    omega^j nodes with feature j. Two passes over the indices."""
    n_j, n_kj, omega = sparsity_counts(indices, indptr, offsets, d)
    n = offsets[-1]
    s = np.empty(indices.size)
    for k in range(offsets.size - 1):
        n_k = offsets[k + 1] - offsets[k]
        for p in range(indptr[offsets[k]], indptr[offsets[k + 1]]):
            s[p] = np.float64(n_j[indices[p]] * n_k) / np.float64(n * n_kj[p])
    return s, omega


@kernel()
def sparsity_counts(indices, indptr, offsets, d):
    """FSVRG's counts from the nonzero pattern, one pass per node: n^j (samples with feature
    j), n_k^j at every stored nonzero (samples of its node with that feature) and omega^j
    (nodes with feature j)."""
    n_j = np.zeros(d, np.int64)
    omega = np.zeros(d, np.int64)
    n_kj = np.empty(indices.size, np.int64)
    count = np.zeros(d, np.int64)
    support = np.empty(d, np.int64)
    for k in range(offsets.size - 1):
        used = 0
        for p in range(indptr[offsets[k]], indptr[offsets[k + 1]]):
            j = indices[p]
            if count[j] == 0:
                support[used] = j
                used += 1
            count[j] += 1
        for p in range(indptr[offsets[k]], indptr[offsets[k + 1]]):
            n_kj[p] = count[indices[p]]
        for q in range(used):
            j = support[q]
            n_j[j] += count[j]
            omega[j] += 1
            count[j] = 0
    return n_j, n_kj, omega
