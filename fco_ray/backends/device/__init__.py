"""The device backend: whole rounds of a run or a fused group compiled as one JAX program
(fco_ray/backends/device/backend.py), on a GPU or on JAX's CPU platform.

`backend: {name: local, device: cpu | cuda | jax-cpu}`:
- `cpu` (default): the NumPy/numba engine (fco_ray/backends/local.py);
- `cuda`: the rules compiled for the first GPU (needs `pip install -e '.[gpu]'`);
- `jax-cpu`: the same programs on JAX's CPU platform (the CI check of the device code).

Every (algorithm, problem) pair whose classes declare a rule in JAX (`Algorithm.rule`,
`Problem.rule`, fco_ray/rules) runs here, a user's own included; a run's history equals the
CPU engine's to rounding (tests: 1e-9 relative). This module imports no JAX: the
configuration check (`unsupported`) runs without it.
"""
from __future__ import annotations

DEVICES = ("cpu", "cuda", "jax-cpu")


def _classes():
    from ...algorithms import ALGORITHMS
    from ...problems import PROBLEMS

    return ALGORITHMS, {name: spec.params.problem_class for name, spec in PROBLEMS.items()}


def supported_pairs() -> list[tuple[str, str]]:
    """(algorithm, problem) names whose classes both declare a rule and fit each other."""
    algorithms, problems = _classes()
    return [(a, p) for p, pc in problems.items() if pc.has_rule()
            for a, ac in sorted(algorithms.items()) if ac.has_rule() and ac.supports & pc.kinds]


def supported_text() -> str:
    by_problem: dict[str, list[str]] = {}
    for a, p in supported_pairs():
        by_problem.setdefault(p, []).append(a)
    return "; ".join(f"{p}: {', '.join(a)}" for p, a in by_problem.items())


def unsupported(algorithm: str, problem: str, batch_size=0) -> str | None:
    """Why (algorithm, problem) has no device program, or None if it has one."""
    if (algorithm, problem) not in supported_pairs():
        return (f"no device program for algorithm {algorithm!r} on problem {problem!r}; "
                f"supported pairs: {supported_text()} (or backend.device: cpu)")
    return None
