"""The four data statistics that Konecny, McMahan, Ramage, Richtarik (2016, Sec. 4.1) give for
their (non-public) posts, computed for any E7 data on the split the paper uses for each:

- `majority_error`: test error of predicting the training data's majority class for every
  test post. The paper's 0.3316 is its classification error of predicting -1 (the majority
  class) for every post, not called a test error there: the same predictor, measured here
  on the test posts;
- `author_majority_error`: test error of predicting, for each test post, its author's
  majority class on the author's training posts (a tie: the global majority) (paper 0.1714);
- `optimum_error`: test error of w*, the L2-regularized logistic regression optimum on the
  pooled training data (paper 0.2627);
- `rare_feature_share`: share of the features occurring in the training data that occur on
  fewer than 10% of the nodes. The paper's "> 0.88" is the share of features present on
  fewer than 1,000 of its 10,000 nodes: 10% of the nodes, applied here to the nodes generated.
"""
from __future__ import annotations

import numpy as np

from .stores import SparseNodes

#: the paper's values (Sec. 4.1); `majority_error`: its error of predicting -1 (not
#: called a test error); `rare_feature_share` is given there as "> 0.88" of the features, on < 1,000 of 10,000 nodes
PAPER = {"majority_error": 0.3316, "author_majority_error": 0.1714, "optimum_error": 0.2627,
         "rare_feature_share": 0.88}
RARE_NODE_SHARE = 0.10  # "present on fewer than 10% of nodes"


def majority_errors(train: SparseNodes, test_y: np.ndarray, test_node: np.ndarray) -> tuple[float, float]:
    """(majority_error, author_majority_error) on the test posts `test_y` (+-1), whose
    authors are `test_node` (indices of `train`'s nodes)."""
    test_y, test_node = np.asarray(test_y, dtype=np.float64), np.asarray(test_node)
    if len(test_y) == 0 or len(test_y) != len(test_node):
        raise ValueError(f"need as many test nodes as test labels (> 0), got {len(test_node)} "
                         f"and {len(test_y)}")
    if test_node.min() < 0 or test_node.max() >= train.num_clients:
        raise ValueError(f"test nodes must be in [0, {train.num_clients}), got "
                         f"{test_node.min()}..{test_node.max()}")
    owner = train.node_of_row()
    majority = 1.0 if np.sum(train.y) > 0 else -1.0  # a tie: -1
    margin = np.bincount(owner, weights=train.y, minlength=train.num_clients)
    author = np.where(margin > 0, 1.0, np.where(margin < 0, -1.0, majority))
    return float(np.mean(test_y != majority)), float(np.mean(test_y != author[test_node]))


def rare_feature_share(train: SparseNodes, node_share: float = RARE_NODE_SHARE) -> tuple[float, int]:
    """(share of the occurring features present on fewer than `node_share` of the nodes,
    number of features that occur on no node)."""
    owner = train.node_of_row()
    pairs = np.unique(owner[np.repeat(np.arange(train.x.shape[0]), np.diff(train.x.indptr))]
                      .astype(np.int64) * train.dim + train.x.indices)
    nodes_per_feature = np.bincount(pairs % train.dim, minlength=train.dim)
    occurring = nodes_per_feature > 0
    rare = np.sum(occurring & (nodes_per_feature < node_share * train.num_clients))
    return float(rare / max(occurring.sum(), 1)), int(np.sum(~occurring))


def text_statistics(train: SparseNodes, test: SparseNodes, test_node: np.ndarray,
                    optimum_error: float) -> dict[str, float]:
    """The four statistics (see the module doc) plus `unused_features`; `optimum_error` is
    w*'s test error (`SparseTextLogReg.from_nodes(train, test).optimum.test_error`: the data
    layer does not solve problems)."""
    majority, author = majority_errors(train, test.y, test_node)
    share, unused = rare_feature_share(train)
    return {"majority_error": majority, "author_majority_error": author,
            "optimum_error": float(optimum_error), "rare_feature_share": share,
            "unused_features": unused}
