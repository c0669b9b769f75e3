"""The one round loop: sample, broadcast, client work, aggregate, server update, evaluate."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .algorithms.base import Algorithm
from .problems.base import Problem
from .random import Key, generator
from .tree import all_finite, size

INIT_TAG = 0x1417
NUMERICAL_FAILURES = (np.linalg.LinAlgError, FloatingPointError, OverflowError)


@dataclass
class RunResult:
    records: list[dict] = field(default_factory=list)
    status: str = "finished"  # or "diverged"
    state: dict | None = None


def evaluate(problem: Problem, algorithm: Algorithm, state: dict) -> dict[str, float]:
    """Metrics of the server's output model, plus those of any extra outputs (suffixed)."""
    metrics = problem.metrics(algorithm.output(problem, state))
    for suffix, params in algorithm.extra_outputs(problem, state).items():
        metrics.update({f"{k}_{suffix}": v for k, v in problem.metrics(params).items()})
    return metrics


def run_rounds(problem: Problem, algorithm: Algorithm, backend, *, rounds: int, eval_every: int,
               seed: int, on_eval: Callable[[dict], None] | None = None,
               divergence: float | None = None) -> RunResult:
    """Run `rounds` communication rounds; evaluate at round 0, every `eval_every`, and last.

    A non-finite broadcast or objective, a numerical failure (e.g. an SVD that does not
    converge on huge entries) or, for a minimization problem and `divergence` not None, an
    objective `train_loss` above `divergence` times its round-0 value ends the run with status
    "diverged"; the records then hold every metric row up to the last acceptable one.
    """
    result = RunResult()
    state = algorithm.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))
    comm = {"floats_up": 0.0, "floats_down": 0.0}
    limit = np.inf  # train_loss above this ends the run (set from the round-0 value)

    def record(rnd: int) -> bool:
        nonlocal limit
        metrics = evaluate(problem, algorithm, state)
        loss = metrics.get("train_loss", 0.0)
        if not np.isfinite(loss) or loss > limit:
            return False
        if rnd == 0 and divergence is not None and "minimize" in problem.kinds and loss > 0:
            limit = divergence * loss
        row = {"round": rnd, **metrics, **comm}
        result.records.append(row)
        if on_eval is not None:
            on_eval(row)
        return True

    def advance(rnd: int) -> bool:
        """One communication round (all its exchanges); False if the iterates blew up."""
        nonlocal state, comm
        up = down = 0.0
        for _ in range(algorithm.exchanges_per_round):
            payload = algorithm.broadcast(state)
            if not all_finite(payload):
                return False
            mean = {}
            if algorithm.uses_clients:
                ids = algorithm.select_clients(seed, rnd, problem.num_clients)
                with np.errstate(all="ignore"):
                    total, weight = backend.map_clients(algorithm, payload, ids, Key(seed, rnd, ids))
                mean = {k: v / weight for k, v in total.items()}
                up += size(total) * len(ids)
                down += size(payload) * len(ids)
            with np.errstate(all="ignore"):
                state = algorithm.server_update(problem, state, mean, rnd)
        comm = {"floats_up": float(up), "floats_down": float(down)}
        return True

    try:
        finite = record(0)
        for rnd in range(rounds):
            if not finite:
                break
            finite = advance(rnd)
            done = rnd + 1
            if finite and (done % eval_every == 0 or done == rounds):
                finite = record(done)
    except NUMERICAL_FAILURES:  # e.g. an SVD of a matrix full of huge numbers
        finite = False
    if not finite:
        result.status = "diverged"
    result.state = state
    return result
