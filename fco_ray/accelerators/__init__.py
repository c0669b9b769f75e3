"""Accelerators: faster implementations of one (algorithm rule, problem rule) pair's client
work on the host, registered against that pair.

The rule (`fco_ray.rules`) is the definition of every dense algorithm and problem; an
accelerator computes the same numbers (to rounding) by other means. Today, both for the
composite family's rules (`PrimalAveraging`, `DualAveraging`) on the least-squares problem:
- `least_squares_l1` (`least_squares`): a vector model under an l1 penalty (E1 lasso), the
  numba whole-step kernel `kernels.least_squares_steps`, the rules told apart by its thresholds;
- `least_squares_nuclear` (`lowrank`): a matrix model under a nuclear-norm penalty (E2
  lowrank), the numba minibatch gradients `kernels.least_squares_grads` of all clients and
  members per step and the nuclear prox as one batched NumPy SVD.

Nothing requires one: a pair without an accelerator, or one the recorded benchmark does not
find faster, runs its rule (`fco_ray.rules.host`). Every registered accelerator is checked against its rule by one
parametrized test (tests/engine/test_accelerators.py: rows and final models, 1e-9).

An accelerator is an object with
- `name`; `rules`: the algorithm rule classes and `problem_rule`: the problem rule class it
  serves (names: "module:Class");
- `serves(group, problem) -> bool`: whether it serves this group on this problem (its psi,
  its settings: the conditions its kernel needs);
- `client_sums(group, problem, payload, rows, key, weights) -> dict`: what the rule's
  `client` summed over the clients `rows` with `weights` gives, for every member (G, ...).

Which runs is chosen from the side-by-side record `speeds.json` beside this module, written
by `python benchmarks/accelerators.py --out benchmarks/results --speeds fco_ray/accelerators/speeds.json`:
an accelerator runs where its median time per configuration-round beats the rule's at the
nearest measured group size (`faster`). This module imports neither numba nor JAX.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..runtime.refs import resolve

SPEEDS = Path(__file__).with_name("speeds.json")

#: the registered accelerators, by name: "module:object"
ACCELERATORS: dict[str, str] = {
    "least_squares_l1": "fco_ray.accelerators.least_squares:LEAST_SQUARES_L1",
    "least_squares_nuclear": "fco_ray.accelerators.lowrank:LEAST_SQUARES_NUCLEAR",
}


def penalty_weight(psi, penalty: str) -> float | None:
    """lam if psi is lam times the `penalty` ("l1", "nuclear") on the block `w` and nothing
    else, 0 if psi is zero, else None (psi is not one an accelerator's kernel knows)."""
    regs = getattr(psi, "regs", None)
    if regs is None or set(regs) - {"w"}:
        return None
    reg = regs.get("w")
    if reg is None or (reg.penalty is None and reg.constraint is None):
        return 0.0
    if reg.penalty == penalty and reg.constraint is None:
        return float(reg.lam)
    return None


def load_speeds(path: Path = SPEEDS) -> dict:
    """{accelerator name: [{G, rule_ms, accelerator_ms}, ...]} (empty without a record)."""
    if not Path(path).exists():
        return {}
    return json.loads(Path(path).read_text())["accelerators"]


def faster(name: str, group: int, speeds: dict | None = None) -> bool:
    """Whether accelerator `name` was measured faster than its rule at the group size nearest
    `group` (log scale); an accelerator never measured is not chosen."""
    cases = (load_speeds() if speeds is None else speeds).get(name, [])
    case = min(cases, key=lambda c: abs(math.log(c["G"] / group)), default=None)
    return case is not None and case["accelerator_ms"] < case["rule_ms"]


def _qualname(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def registered(group, problem_rule) -> list:
    """The accelerators registered for `group`'s algorithm rule and this problem rule."""
    rule = resolve(group.cls.rule) if isinstance(group.cls.rule, str) else group.cls.rule
    out = []
    for ref in ACCELERATORS.values():
        acc = resolve(ref)
        if _qualname(rule) in acc.rules and _qualname(problem_rule) == acc.problem_rule:
            out.append(acc)
    return out


def choose(group, problem, problem_rule, speeds: dict | None = None):
    """The accelerator that runs `group`'s client work on `problem`, or None (its rule)."""
    for acc in registered(group, problem_rule):
        if acc.serves(group, problem) and faster(acc.name, group.size, speeds):
            return acc
    return None
