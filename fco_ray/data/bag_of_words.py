"""The E7 text generator's compiled core (numba): term-count rows of generated documents, as
CSR arrays. Only fco_ray/data/text_generator.py calls it (numba and its compilation load on
first use); compiled once and cached on disk where that is possible (`ops.kernels.CACHE`).
Tests: tests/unit/test_text_generator.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.kernels import kernel


@kernel()
def bag_of_words(length, u_rank, topical, topic_of_doc, cdf, guide, vocab):
    """CSR rows of unit-L2-norm term counts, one row per document (the E7 generator).

    Document r has length[r] tokens, consecutive in `u_rank` / `topical`. Token t's word:
    rank = min(first i with cdf[i] >= u_rank[t], dim - 1) (NumPy's searchsorted 'left',
    found from the guide table guide[b] = first i with cdf[i] >= b / len(guide)), mapped
    through the document topic's word permutation `vocab` if `topical[t]`. A row holds the
    distinct words, sorted, with their counts divided by the row's L2 norm (summed in
    column order, as scikit-learn's `normalize`)."""
    docs, dim, buckets = length.size, cdf.size, guide.size
    indptr = np.zeros(docs + 1, np.int64)
    indices = np.empty(u_rank.size, np.int32)
    data = np.empty(u_rank.size)
    words = np.empty(length.max() if docs else 0, np.int64)
    t = 0
    nnz = 0
    for r in range(docs):
        n = length[r]
        for q in range(n):
            u = u_rank[t + q]
            i = guide[min(np.int64(u * buckets), buckets - 1)]
            while i > 0 and cdf[i - 1] >= u:
                i -= 1
            while i < dim and cdf[i] < u:
                i += 1
            rank = min(i, dim - 1)
            words[q] = vocab[topic_of_doc[r], rank] if topical[t + q] else rank
        t += n
        row = words[:n]
        for q in range(1, n):  # insertion sort in place: documents are short
            v = row[q]
            b = q - 1
            while b >= 0 and row[b] > v:
                row[b + 1] = row[b]
                b -= 1
            row[b + 1] = v
        start = nnz
        for q in range(n):
            if q > 0 and row[q] == row[q - 1]:
                data[nnz - 1] += 1.0
            else:
                indices[nnz] = row[q]
                data[nnz] = 1.0
                nnz += 1
        total = 0.0
        for p in range(start, nnz):
            total += data[p] * data[p]
        norm = math.sqrt(total)
        for p in range(start, nnz):
            data[p] /= norm
        indptr[r + 1] = nnz
    return data[:nnz].copy(), indices[:nnz].copy(), indptr
