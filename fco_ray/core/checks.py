"""Checks that cross modules, in one place: does an algorithm fit a problem, do its
clients per round fit the problem's clients. Each raises `ConfigError` naming both sides
and what would fit, before any run starts (config parsing, sweep validation, the API).
"""
from __future__ import annotations

import difflib

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


def fitting_algorithms(problem: str | None) -> list[str]:
    """The registered algorithms that run on registered problem `problem` (all if unknown)."""
    from ..problems import PROBLEMS

    spec = PROBLEMS.get(problem) if isinstance(problem, str) else None
    if spec is None or problem == "custom":
        return sorted(ALGORITHMS)
    kinds = spec.params.problem_class.kinds
    return sorted(name for name, cls in ALGORITHMS.items() if cls.supports & kinds)


def unknown_name(what: str, name, allowed: list[str], every: list[str] | None = None,
                 scope: str = "") -> str:
    """The message for an unknown `what` (algorithm, problem) `name`: a "did you mean" from
    the names that fit (`allowed`; else from `every` registered name, saying it does not
    fit), then the names that fit (`scope` says where, e.g. "for problem 'lasso'")."""
    from ..runtime.errors import short_repr

    text = f"unknown {what} {short_repr(name)}"
    if isinstance(name, str) and len(name) <= 100:
        close = difflib.get_close_matches(name.lower(), every or allowed, n=1, cutoff=0.6)
        if close and close[0] in allowed:
            text += f" (did you mean {close[0]!r}?)"
        elif close:
            text += f" ({close[0]!r} is close but does not fit {scope.removeprefix('for ')})"
    return f"{text}; {what}s{' ' + scope if scope else ''}: {allowed}"


def check_clients(clients_per_round: int | None, num_clients: int, problem: str) -> None:
    """clients_per_round (None = all) is at most the problem's training clients."""
    if clients_per_round is not None and clients_per_round > num_clients:
        raise ConfigError(
            f"algorithm.clients_per_round must be <= {num_clients} (problem {problem!r} has "
            f"{num_clients} training clients), got {clients_per_round}")


def check_gpus_fit(gpus_per_trial: float, nodes: list[float], where: str) -> None:
    """ConfigError unless a trial's GPU share (`tune.gpus_per_trial`) fits one node of a
    cluster whose nodes have `nodes` GPUs (Tune would otherwise wait for it without end)."""
    if gpus_per_trial and gpus_per_trial > max(nodes, default=0.0):
        raise ConfigError(f"tune.gpus_per_trial: a trial needs {gpus_per_trial:g} GPU, but {where} "
                          f"has {sum(nodes):g} GPUs ({max(nodes, default=0.0):g} at most on one node); "
                          "run on a machine with a GPU, or use backend.device: cpu and "
                          "tune.gpus_per_trial: 0")


def device_pairs() -> list[tuple[str, str]]:
    """(algorithm, problem) names that run on a device backend: both classes declare a rule
    (`Algorithm.rule`, `Problem.rule`; fco_ray/rules) and they fit each other."""
    from ..algorithms import ALGORITHMS
    from ..problems import PROBLEMS

    problems = {name: spec.params.problem_class for name, spec in PROBLEMS.items()}
    return [(a, p) for p, pc in problems.items() if pc.has_rule()
            for a, ac in sorted(ALGORITHMS.items()) if ac.has_rule() and ac.supports & pc.kinds]


def device_pairs_text() -> str:
    by_problem: dict[str, list[str]] = {}
    for a, p in device_pairs():
        by_problem.setdefault(p, []).append(a)
    return "; ".join(f"{p}: {', '.join(a)}" for p, a in by_problem.items())


def no_device_program(algorithm: str, problem: str) -> str | None:
    """Why (algorithm, problem) does not run on a device backend, or None if it does."""
    if (algorithm, problem) not in device_pairs():
        return (f"no device program for algorithm {algorithm!r} on problem {problem!r}; "
                f"supported pairs: {device_pairs_text()} (or backend.device: cpu)")
    return None
