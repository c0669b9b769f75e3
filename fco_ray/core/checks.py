"""Checks that cross modules, in one place: does an algorithm fit a problem, do its
clients per round fit the problem's clients. Each raises `ConfigError` naming both sides
and what would fit, before any run starts (config parsing, sweep validation, the API).
"""
from __future__ import annotations

from ..algorithms import ALGORITHMS
from ..algorithms.base import PROBLEM_KINDS
from ..runtime.errors import ConfigError


def check_fits(algorithm: str, kinds: frozenset[str], problem: str) -> None:
    """`algorithm` (a registered name) runs on a problem offering `kinds`, else ConfigError
    listing the algorithms that do. A problem named "custom" is checked when its instance
    is known (`fco_ray.run(config, problem=...)`)."""
    if problem == "custom" and kinds == frozenset({"minimize"}):
        return  # the placeholder section: run() checks the instance's own kinds
    needs = ALGORITHMS[algorithm].supports
    if needs & kinds:
        return
    fitting = sorted(name for name, cls in ALGORITHMS.items() if cls.supports & kinds)
    described = "; ".join(f"{k}: {PROBLEM_KINDS[k]}" for k in sorted(needs))
    raise ConfigError(
        f"algorithm {algorithm!r} does not fit problem {problem!r}: it needs a problem of kind "
        f"{sorted(needs)} ({described}), problem {problem!r} is of kind {sorted(kinds)}; "
        f"algorithms for this problem: {fitting}")


def check_clients(clients_per_round: int | None, num_clients: int, problem: str) -> None:
    """clients_per_round (None = all) is at most the problem's training clients."""
    if clients_per_round is not None and clients_per_round > num_clients:
        raise ConfigError(
            f"algorithm.clients_per_round must be <= {num_clients} (problem {problem!r} has "
            f"{num_clients} training clients), got {clients_per_round}")
