"""E7 data: a synthetic stand-in for the paper's public posts (one node per author).

The seed paper's data (Konecny et al. 2016: ~10,000 authors with 75..9,000 posts, bag of
words, label = "the post got a comment") is not public. This generator has the properties
that matter for the algorithms:

- **unbalanced nodes**: training sizes n_k from a Pareto law truncated to [min, max]
  (inverse CDF `n = m (1 - u (1 - (m/M)^a))^(-1/a)`, floored);
- **Zipf word frequencies**: word of rank r has probability prop. to (r + 1)^(-zipf_exponent);
- **per-node topic skew**: author k has a topic mix theta_k ~ Dirichlet(concentration); each
  post draws a topic z ~ theta_k, and each of its ~Poisson(words_per_doc) tokens is, with
  probability `topic_weight`, a Zipf rank mapped through the topic's own word permutation
  (topic-specific vocabulary), else a plain Zipf word;
- **labels skewed per author and per topic**: post i of author k on topic z has
  P(y = +1) = sigmoid(c + b_k + topic_signal t_z + signal <x_i, w_true>), with
  b_k ~ N(0, author_bias^2), t_z the standard normal quantiles at (z + 1/2) / topics in a
  random order (`topic_effects`, drawn from their own stream, so topic_signal = 0 leaves
  every other draw as it was) and w_true ~ N(0, I). The offset c sets the class
  balance: the mean of these probabilities over all posts is `positive_share` (c solved by
  bisection, `label_offset`; None: c = 0). `author_bias` is the part of an author's rate that
  no word reveals; `topic_signal` the part that the author's topical words reveal (authors
  with a concentrated topic mix keep a steady rate, and a global model learns it from their
  words).

The defaults are calibrated to the four statistics the paper gives for its data (Sec. 4.1:
majority class, per-author majority and optimum test errors, share of features on < 10% of
nodes), `results/e7_calibration.py`; the settings before that calibration
(`topic_concentration` 0.1, `zipf_exponent` 1.0, `signal` 3, `author_bias` 1, `topic_signal`
0, `positive_share` None) give the same data as before, draw for draw.

Features are term counts scaled to unit L2 norm per post (so the logistic loss is
1/4-smooth). Each node also gets t_k = round(n_k f / (1 - f)) held-out posts from the same
author (f = test_fraction), pooled into one test block. Generation runs over blocks of
nodes, so the transient memory is bounded and the result is O(nnz).
"""
from __future__ import annotations

import numpy as np

from ..ops.random import generator
from .stores import SparseNodes

DATA_TAG, SHUFFLE_TAG, TOPIC_LABEL_TAG = 0x7E47, 0x5AFF, 0x70B1
BLOCK_DOCS = 200_000  # posts generated at once (bounds the token arrays' memory)


def power_law_sizes(rng: np.random.Generator, clients: int, min_samples: int, max_samples: int,
                    exponent: float) -> np.ndarray:
    """Node sizes from a Pareto(exponent) law truncated to [min_samples, max_samples]."""
    u = rng.random(clients)
    tail = (min_samples / max_samples) ** exponent
    x = min_samples * (1.0 - u * (1.0 - tail)) ** (-1.0 / exponent)
    return np.clip(np.floor(x), min_samples, max_samples).astype(np.int64)


def _word_tables(rng, dim, topics, zipf_exponent):
    """Zipf CDF over ranks, its guide table (see `bag_of_words.bag_of_words`) and each
    topic's rank -> word permutation."""
    cdf = np.cumsum((np.arange(dim) + 1.0) ** -zipf_exponent)
    cdf /= cdf[-1]
    vocab = np.argsort(rng.random((topics, dim)), axis=1).astype(np.int32)  # topic t: rank -> word
    guide = np.searchsorted(cdf, np.arange(dim) / dim, side="left")
    return cdf, guide, vocab


def generate_text_nodes(**kwargs) -> tuple[SparseNodes, SparseNodes | None]:
    """(training nodes, pooled held-out block or None if test_fraction = 0); see module doc
    and `generate_text_data` for the keyword arguments."""
    train, test, _ = generate_text_data(**kwargs)
    return train, test


def generate_text_data(*, seed: int, clients: int = 10000, min_samples: int = 75,
                        max_samples: int = 9000, size_exponent: float = 1.5, dim: int = 20000,
                        topics: int = 20, topic_concentration: float = 0.03,
                        topic_weight: float = 0.5, zipf_exponent: float = 1.2,
                        words_per_doc: float = 20.0, signal: float = 0.5,
                        author_bias: float = 2.5, topic_signal: float = 2.2,
                        positive_share: float | None = 0.3316, test_fraction: float = 0.1
                        ) -> tuple[SparseNodes, SparseNodes | None, np.ndarray]:
    """(training nodes, pooled held-out block or None, the node of each held-out row)."""
    import scipy.sparse as sp
    from scipy.special import expit
    from .bag_of_words import bag_of_words  # numba and scipy: on first use
    if clients < 1 or dim < 2 or topics < 1 or not 1 <= min_samples <= max_samples:
        raise ValueError(f"need clients >= 1, dim >= 2, topics >= 1 and 1 <= min_samples <= "
                         f"max_samples; got {clients}, {dim}, {topics}, {min_samples}, {max_samples}")
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if positive_share is not None and not 0 < positive_share < 1:
        raise ValueError(f"positive_share must be in (0, 1) or None, got {positive_share}")
    rng = generator(seed, DATA_TAG)
    sizes = power_law_sizes(rng, clients, min_samples, max_samples, size_exponent)
    held = np.rint(sizes * test_fraction / (1.0 - test_fraction)).astype(np.int64)
    theta_cdf = np.cumsum(rng.dirichlet(np.full(topics, topic_concentration), size=clients), axis=1)
    bias = author_bias * rng.standard_normal(clients)
    w_true = rng.standard_normal(dim)
    cdf, guide, vocab = _word_tables(rng, dim, topics, zipf_exponent)
    topic_effect = topic_signal * topic_effects(generator(seed, TOPIC_LABEL_TAG), topics)

    total = sizes + held
    ends = np.cumsum(total)
    parts = []  # per block: CSR values, column indices, nonzeros per row, logits, draws, test mask
    first = 0
    while first < clients:  # blocks of whole nodes with about BLOCK_DOCS posts
        last = max(first + 1, int(np.searchsorted(ends, ends[first] - total[first] + BLOCK_DOCS, "right")))
        nodes = np.arange(first, min(last, clients))
        node = np.repeat(nodes, total[nodes])
        u = rng.random(len(node))
        topic = np.minimum((u[:, None] > theta_cdf[node]).sum(axis=1), topics - 1)
        length = 1 + rng.poisson(words_per_doc - 1.0, len(node))
        tokens = int(length.sum())
        topical = rng.random(tokens) < topic_weight  # drawn first, then the Zipf ranks
        data, indices, indptr = bag_of_words(length, rng.random(tokens), topical, topic, cdf, guide,
                                             vocab)
        x = sp.csr_matrix((data, indices, indptr), shape=(len(node), dim))
        draw = rng.random(len(node))  # labels once the offset is known (below)
        logit = signal * (x @ w_true) + bias[node] + topic_effect[topic]
        # within a node posts are exchangeable: its last held[k] posts are the test posts
        position = np.arange(len(node)) - np.repeat(np.cumsum(total[nodes]) - total[nodes], total[nodes])
        parts.append((data, indices, np.diff(indptr), logit, draw, position >= sizes[node]))
        first = nodes[-1] + 1

    # all posts in one CSR matrix (rows sorted, distinct columns), then train / test rows
    indptr = np.concatenate([[0], np.cumsum(np.concatenate([p[2] for p in parts]))])
    x = sp.csr_matrix((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                       indptr), shape=(len(indptr) - 1, dim))
    x.has_canonical_format = True
    logit, is_test = np.concatenate([p[3] for p in parts]), np.concatenate([p[5] for p in parts])
    offset = 0.0 if positive_share is None else label_offset(logit, positive_share)
    y = np.where(np.concatenate([p[4] for p in parts]) < expit(logit + offset), 1.0, -1.0)
    rows = np.flatnonzero(~is_test)
    train = SparseNodes(x[rows], y[rows], sizes)
    if held.sum() == 0:
        return train, None, np.zeros(0, np.int64)
    rows = np.flatnonzero(is_test)
    return train, SparseNodes(x[rows], y[rows], [len(rows)]), np.repeat(np.arange(clients), held)


def topic_effects(rng: np.random.Generator, topics: int) -> np.ndarray:
    """The standard normal quantiles at (z + 1/2) / topics, z = 0..topics-1, in random order:
    normal-like effects whose spread does not change from seed to seed (20 i.i.d. draws
    have a standard deviation anywhere in 0.5..1.1, and with it the share of the labels that
    words can explain)."""
    from scipy.special import ndtri
    return ndtri((rng.permutation(topics) + 0.5) / topics)


def label_offset(logit: np.ndarray, share: float) -> float:
    """The offset c with mean(sigmoid(logit + c)) = share (bisection: the mean is increasing
    in c), i.e. the expected share of +1 labels over all posts (training and held out)."""
    from scipy.special import expit
    low, high = -60.0 - logit.max(), 60.0 - logit.min()
    for _ in range(100):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if np.mean(expit(logit + mid)) < share else (low, mid)
        if high - low < 1e-12:
            break
    return 0.5 * (low + high)


def reshuffle_nodes(nodes: SparseNodes, seed: int) -> SparseNodes:
    """The reshuffled twin (FSVRGR): the same samples randomly reassigned to nodes of the
    same sizes, which removes the non-IID structure but keeps the imbalance."""
    perm = generator(seed, SHUFFLE_TAG).permutation(nodes.x.shape[0])
    return SparseNodes(nodes.x[perm], nodes.y[perm], nodes.sizes)
