"""The finite-sum "nodes" interface that the federated SVRG family needs of a problem.

A nodes problem holds n samples split over K nodes and offers exact, compiled per-node passes,
each returning the weighted sum of the given nodes' results as one (d,) vector (or (G, d) for
a stacked group's (G, d) models). How a pass runs is the algorithm's choice, handed over as one
value (`LocalPasses`, `SDCAPasses`), never as loose keyword knobs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..ops.random import Key


@dataclass(frozen=True)
class LocalPasses:
    """Local SVRG-type passes from w with drift eta g (FSVRG, naive FSVRG, DANE):

    - `h`: the step per node, (nodes,), or (nodes, G) for a stacked group;
    - `steps`: None = one pass over a keyed random permutation of each node's samples (stream
      PERMUTATION, step = pass); else steps[k] samples drawn with replacement (one pass);
    - `scaled`: FSVRG's per-feature scalings s_k^j; `passes`: passes, the anchor moved to each
      pass's result; `eta`, `mu`: DANE's drift weight and proximal weight (numbers or (G,))."""

    h: np.ndarray
    steps: np.ndarray | None = None
    scaled: bool = False
    passes: int = 1
    eta: float | np.ndarray = 1.0
    mu: float | np.ndarray = 0.0


@dataclass(frozen=True)
class SDCAPasses:
    """CoCoA+'s local SDCA: `passes` over random permutations, aggregation parameter `sigma`,
    `n` the total number of samples."""

    passes: int
    sigma: float
    n: float


@runtime_checkable
class Nodes(Protocol):
    """What a problem offers the SVRG family (kind "nodes")."""

    lam: float  # the L2 weight of f
    aggregation: np.ndarray  # FSVRG's A = diag(a^j), (d,)
    total_samples: int

    def node_sizes(self, rows) -> np.ndarray:
        """n_k of the given nodes."""

    def node_gradient_sum(self, rows, w: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """sum_k weights_k grad F_k(w)."""

    def node_pass_sum(self, rows, key: Key, w: np.ndarray, g: np.ndarray, weights: np.ndarray,
                      local: LocalPasses) -> np.ndarray:
        """sum_k weights_k (w_k - w) after node k's local passes (`LocalPasses`)."""

    def node_sdca_sum(self, rows, key: Key, w: np.ndarray, duals: np.ndarray, weights: np.ndarray,
                      local: SDCAPasses) -> np.ndarray:
        """sum_k weights_k (v_k - w) / sigma after CoCoA+'s local SDCA passes; `duals` are
        updated in place."""
