"""The sampled clients of a chunk of rounds, drawn on the host by the CPU engine's sampler (so a
member's clients are those of its CPU run), with their aggregation weights."""
from __future__ import annotations

import numpy as np


def draw_clients(group, problem, seeds: list[int], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, weights), each (R, G, C): rounds start..stop-1, one draw per distinct seed."""
    rows, weights = [], []
    for rnd in range(start, stop):
        drawn = {s: group.select_clients(s, rnd, problem.num_clients) for s in set(seeds)}
        rows.append(np.stack([drawn[s] for s in seeds]))
        weights.append(np.stack([group.client_weights(problem, drawn[s]) for s in seeds]))
    return np.stack(rows), np.stack(weights)
