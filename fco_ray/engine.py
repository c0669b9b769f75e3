"""The one round loop: sample, broadcast, client work, aggregate, server update, evaluate."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .algorithms.base import Algorithm
from .checkpoint import Snapshot
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


def exchange(problem: Problem, algorithm: Algorithm, backend, payload: dict, seed: int,
             rnd: int) -> tuple[dict, float, float]:
    """One client exchange of a round: the round's clients run `client_update` on the
    backend; returns the weighted mean message and the floats sent up and down."""
    if not algorithm.uses_clients:
        return {}, 0.0, 0.0
    ids = algorithm.select_clients(seed, rnd, problem.num_clients)
    with np.errstate(all="ignore"):
        total, weight = backend.map_clients(algorithm, payload, ids, Key(seed, rnd, ids))
    mean = {k: v / weight for k, v in total.items()}
    return mean, float(size(total) * len(ids)), float(size(payload) * len(ids))


def run_rounds(problem: Problem, algorithm: Algorithm, backend, *, rounds: int, eval_every: int,
               seed: int, on_eval: Callable[[dict], None] | None = None,
               divergence: float | None = None, start: Snapshot | None = None,
               checkpoint_every: int = 0,
               on_checkpoint: Callable[[Snapshot], None] | None = None) -> RunResult:
    """Run `rounds` communication rounds; evaluate at round 0, every `eval_every`, and last.

    A non-finite broadcast or objective, a numerical failure (e.g. an SVD that does not
    converge on huge entries) or, for a minimization problem and `divergence` not None, an
    objective `train_loss` above `divergence` times its round-0 value ends the run with status
    "diverged"; the records then hold every metric row up to the last acceptable one.

    Checkpoints (fco_ray.checkpoint): every `checkpoint_every` rounds `on_checkpoint` gets
    the state, just before that round's metrics go to `on_eval`; a run given `start`
    continues after `start.round` (its rows up to there are not recomputed) with the same
    numbers as an uninterrupted run.
    """
    result = RunResult()
    backend.start_run()  # client state (Algorithm.client_state) of an earlier run is dropped
    if start is None:
        state = algorithm.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))
        comm, first = {"floats_up": 0.0, "floats_down": 0.0}, 0
        limit = np.inf  # train_loss above this ends the run (set from the round-0 value)
    else:
        state, comm, first, (limit,) = start.state, {**start.comm}, start.round, start.loss_limits

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
            mean, floats_up, floats_down = exchange(problem, algorithm, backend, payload, seed, rnd)
            up, down = up + floats_up, down + floats_down
            with np.errstate(all="ignore"):
                state = algorithm.server_update(problem, state, mean, rnd)
        comm = {"floats_up": float(up), "floats_down": float(down)}
        return True

    try:
        finite = record(0) if start is None else True
        for rnd in range(first, rounds):
            if not finite:
                break
            finite = advance(rnd)
            done = rnd + 1
            if finite and on_checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
                on_checkpoint(Snapshot(done, state, dict(comm), loss_limits=[limit]))
            if finite and (done % eval_every == 0 or done == rounds):
                finite = record(done)
    except NUMERICAL_FAILURES:  # e.g. an SVD of a matrix full of huge numbers
        finite = False
    if not finite:
        result.status = "diverged"
    result.state = state
    return result
