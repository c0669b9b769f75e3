"""The one round loop: sample, broadcast, client work, aggregate, server update, evaluate.

Its unit is a group of G configurations of one algorithm (`fco_ray.core.group`); a single run is a
group of one through the same code. Per-member status (finished / diverged, each at its own
round), the divergence rule and checkpoints live here, once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..backends.base import Backend
from ..ops.random import Key
from ..ops.tree import size
from ..problems.base import Problem
from .checkpoint import Snapshot
from .group import Group

NUMERICAL_FAILURES = (np.linalg.LinAlgError, FloatingPointError, OverflowError)

#: on_round(round, rows by member index, members that ended diverged since the last call)
OnRound = Callable[[int, dict[int, dict], list[int]], None]


@dataclass
class RunResult:
    records: list[dict] = field(default_factory=list)
    status: str = "finished"  # or "diverged"
    state: dict | None = None


def exchange(problem: Problem, group: Group, backend: Backend, payload: dict, seed: int,
             rnd: int) -> tuple[dict, float, float]:
    """One client exchange of a round: the round's clients run the group's client work on the
    backend; returns the weighted mean message and, per member, the floats sent up and down."""
    if not group.uses_clients:
        return {}, 0.0, 0.0
    ids = group.select_clients(seed, rnd, problem.num_clients)
    with np.errstate(all="ignore"):
        total, weight = backend.map_clients(group, payload, ids, Key(seed, rnd, ids))
    mean = {k: v / weight for k, v in total.items()}
    up, down = group.per_member(float(size(total) * len(ids)), float(size(payload) * len(ids)), payload)
    return mean, up, down


def _round(problem: Problem, group: Group, state, backend: Backend, seed: int, rnd: int):
    """One communication round of a group: (new state, floats per member up / down, the
    positions of members whose broadcast was not finite: they took no part)."""
    up = down = 0.0
    stopped: list[int] = []
    live = list(range(group.size))
    for _ in range(group.exchanges_per_round):
        payload = group.broadcast(state)
        bad = list(np.flatnonzero(~group.finite(payload)))
        if bad:
            stopped += [live[j] for j in bad]
            keep = [j for j in range(len(live)) if j not in bad]
            live = [live[j] for j in keep]
            if not live:
                return state, (up, down), stopped
            group, state = group.keep(keep), group.take(state, keep)
            payload = group.broadcast(state)
        mean, floats_up, floats_down = exchange(problem, group, backend, payload, seed, rnd)
        up, down = up + floats_up, down + floats_down
        with np.errstate(all="ignore"):
            state = group.server_update(problem, state, mean, rnd)
    return state, (up, down), stopped


def run_rounds(problem: Problem, group: Group, backend: Backend, *, rounds: int, eval_every: int,
               seed: int, on_round: OnRound | None = None, divergence: float | None = None,
               start: Snapshot | None = None, checkpoint_every: int = 0,
               on_checkpoint: Callable[[Snapshot], None] | None = None) -> list[RunResult]:
    """Run `rounds` communication rounds of every member of `group`; evaluate at round 0, every
    `eval_every`, and last. One RunResult per member, equal to the member's run alone.

    A member whose broadcast or objective is not finite, whose round fails numerically (e.g.
    an SVD that does not converge on huge entries) or, for a minimization problem and
    `divergence` not None, whose `train_loss` exceeds `divergence` times its round-0 value
    ends with status "diverged"; its records hold every row up to its last acceptable one,
    and the others go on. `on_round(round, rows, diverged)` is called at every evaluated round
    with the rows by member index and the members that ended diverged since the last call.

    Checkpoints (fco_ray.core.checkpoint): every `checkpoint_every` rounds `on_checkpoint` gets the
    state of the members still running (`Snapshot.active`) and every member's bound, just
    before that round's `on_round`; a run given `start` continues after `start.round` (its rows
    up to there are not recomputed) with the same numbers as an uninterrupted run.
    """
    backend.start_run()  # client state (Algorithm.client_state) of an earlier run is dropped
    count = group.size
    results = [RunResult() for _ in range(count)]
    announced: set[int] = set()  # diverged members already passed to on_round
    limits = [np.inf] * count  # train_loss above this ends a member (set from round 0)
    active = list(range(count))  # members still running, in group order
    first = 0
    seeds = group.seeds or [seed] * count  # each member's own (a group fused over seeds)
    compiled = backend.run_rounds if backend.compiles_rounds else None  # whole rounds at once
    if group.seeds and compiled is None:
        raise ValueError(f"backend {backend.name!r} runs one seed per group; members differ in seed")
    if start is None:
        state = group.start(problem, seed)
        comm = {"floats_up": 0.0, "floats_down": 0.0}
    else:  # those not active ended diverged before the checkpoint (and were announced)
        active = list(range(count)) if start.active is None else list(start.active)
        limits, first, state, comm = list(start.loss_limits), start.round, start.state, {**start.comm}
        if len(active) < count:
            group = group.keep(active)
        for i in set(range(count)) - set(active):
            results[i].status = "diverged"
            announced.add(i)

    def end(positions: list[int], at_state) -> None:
        """End the members at these positions of `active` as diverged; keep the others."""
        nonlocal group, state, active
        if not positions:
            return
        for j in positions:
            results[active[j]].status = "diverged"
            results[active[j]].state = group.member(at_state, j)
        keep = [j for j in range(len(active)) if j not in positions]
        active = [active[j] for j in keep]
        if active:
            group, state = group.keep(keep), group.take(state, keep)

    def record(rnd: int) -> None:
        rows, stopped = {}, []
        try:  # rows a compiled backend computed at this round (on the device), else the host's
            evaluated = device_rows.pop(rnd) if rnd in device_rows else group.evaluate(problem, state)
        except NUMERICAL_FAILURES:
            evaluated = [{"train_loss": np.nan}] * len(active)
        for j, i in enumerate(active):
            values = evaluated[j]
            loss = values.get("train_loss", 0.0)
            if not np.isfinite(loss) or loss > limits[i]:
                stopped.append(j)
                continue
            if rnd == 0 and divergence is not None and "minimize" in problem.kinds and loss > 0:
                limits[i] = divergence * loss
            row = {"round": rnd, **values, **comm}
            results[i].records.append(row)
            rows[i] = row
        end(stopped, state)
        if on_round is not None:
            ended = [i for i, r in enumerate(results) if r.status == "diverged" and i not in announced]
            announced.update(ended)
            on_round(rnd, rows, ended)

    def advance(rnd: int) -> None:
        nonlocal state, comm
        try:
            new, (up, down), stopped = _round(problem, group, state, backend, seed, rnd)
            end(stopped, state)
            if active:
                state = new  # holds exactly the members that took part
        except NUMERICAL_FAILURES:  # e.g. an SVD of huge numbers: find who, member by member
            states, failed, up, down = [], [], 0.0, 0.0
            for j in range(len(active)):
                try:
                    single, (up, down), stopped = _round(problem, group.keep([j]),
                                                         group.take(state, [j]), backend, seed, rnd)
                except NUMERICAL_FAILURES:
                    stopped = [0]
                if stopped:
                    failed.append(j)
                else:
                    states.append(single)
            end(failed, state)
            if active:
                state = group.join(states)
        comm = {"floats_up": float(up), "floats_down": float(down)}

    device_rows: dict[int, list[dict]] = {}  # round -> rows of the active members, from `compiled`

    def advance_compiled(rnd: int, stop: int) -> None:
        """Rounds rnd..stop-1 at once on a backend that compiles them (`run_rounds`)."""
        nonlocal state, comm
        state, stopped, floats, *rows = compiled(group, state, [seeds[i] for i in active], rnd, stop)
        comm = dict(zip(("floats_up", "floats_down"), floats))
        device_rows.clear()
        if rows and rows[0] is not None:  # the members' metrics after round stop - 1
            device_rows[stop] = [row for j, row in enumerate(rows[0]) if j not in stopped]
        end(stopped, state)

    def next_stop(rnd: int) -> int:
        """The first round after `rnd` that is evaluated or checkpointed (or the last)."""
        stops = [rounds, (rnd // eval_every + 1) * eval_every]
        if on_checkpoint is not None and checkpoint_every:
            stops.append((rnd // checkpoint_every + 1) * checkpoint_every)
        return min(stops)

    if start is None:
        record(0)
    rnd = first
    while rnd < rounds and active:
        if compiled is None:
            advance(rnd)
            done = rnd + 1
        else:
            done = next_stop(rnd)
            advance_compiled(rnd, done)
        rnd = done
        if active and on_checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
            on_checkpoint(Snapshot(done, state, dict(comm), loss_limits=list(limits), active=list(active)))
        if active and (done % eval_every == 0 or done == rounds):
            record(done)
    for j, i in enumerate(active):
        results[i].state = group.member(state, j)
    if on_round is not None and len(announced) < sum(r.status == "diverged" for r in results):
        on_round(rounds, {}, [i for i, r in enumerate(results)
                              if r.status == "diverged" and i not in announced])
    return results
