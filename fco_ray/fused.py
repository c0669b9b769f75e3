"""Fused runs: G configurations of one algorithm that differ only in real-valued
hyperparameters (`client_lr`, `server_lr`, ...) as one stacked computation.

Members of a group share the problem, the seed and every other setting, so they sample the
same clients and draw the same minibatch rows (randomness is keyed by seed, round, client
and step, never by configuration). `Fused` presents the group to the unchanged engine
protocol as one algorithm:

- the server state holds every member on a leading member axis (G, ...); values equal
  across members (e.g. a step counter) stay plain numbers;
- the broadcast carries every member's payload; each client runs its local steps for all
  members at once as a stack of C * G rows (client-major: row c * G + g is member g on
  client c), with each varying hyperparameter one value per row (`tree.per_row`), so the
  rows a client reads at a step are read once per step and served to every member from
  cache;
- a client's message has shape (G, ...), so the backends' weighted sums over clients give
  every member's aggregate at once (on Ray actors too);
- members may also differ in the regularizer weight `problem.lam` where the problem allows
  it (`ProblemParams.fusable_lam`): every call that takes the problem then gets it with one
  weight per stacked row (`Problem.with_lam`), and each member is evaluated with its own.

The algorithm's own update rules run unchanged on the stacked rows: every fused member
computes the same floating-point operations as its unfused run, so results are equal
(tests: to 1e-12 relative). `run_fused` is the engine's round loop over a group, with one
status per member: a member whose broadcast or objective stops being finite ends
`diverged` with its finite rows, and the others go on.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .algorithms.base import Algorithm
from .checkpoint import Snapshot
from .engine import INIT_TAG, NUMERICAL_FAILURES, RunResult, exchange
from .problems.base import Problem
from .random import Key, generator
from .tree import PerRow, size


def _real(field) -> bool:
    """Whether a hyperparameter field holds a real number (only those can vary in a group)."""
    return field.annotation in (float, float | None)


def varying_fields(hps: list) -> list[str]:
    """Hyperparameters that differ across `hps` (one algorithm's); each must be a real
    number: other settings change the computation's shape or flow, not only its values."""
    fields = type(hps[0]).model_fields
    varying = [f for f in fields if len({repr(getattr(hp, f)) for hp in hps}) > 1]
    for f in varying:
        if any(isinstance(getattr(hp, f), bool) or not isinstance(getattr(hp, f), (int, float))
               for hp in hps) or not _real(fields[f]):
            raise ValueError(f"algorithm.{f} differs across the fused configurations; only "
                             "real-valued hyperparameters can be fused")
    return varying


def fusable(algorithm: type[Algorithm], problem_params: type, key: str) -> bool:
    """Whether the dotted config key `key` may differ inside a fused group of `algorithm`
    (a class) on a problem with parameter model `problem_params`: a real-valued
    hyperparameter of a fusable algorithm, or `problem.lam` where the problem's lam weighs
    psi alone (`ProblemParams.fusable_lam`) and the algorithm's clients take the stacked
    steps. The one rule of which configurations fuse (run_grid's groups, a sweep's trials)."""
    if not algorithm.fusable:
        return False
    if key == "problem.lam":
        return problem_params.fusable_lam and not hasattr(algorithm, "fused_client_update")
    field = algorithm.Hyper.model_fields.get(key.split(".", 1)[1]) if key.startswith("algorithm.") else None
    return field is not None and _real(field)


def fuse_key(hp) -> str:
    """Configurations of one algorithm with the same key can run fused: every setting
    except the real-valued hyperparameters."""
    fields = type(hp).model_fields
    fixed = {f: getattr(hp, f) for f in fields if not _real(fields[f])}
    return repr(sorted(fixed.items()))


def stack_states(states: list):
    """One state for all members: arrays get a leading member axis; numbers equal across
    members stay numbers."""
    first = states[0]
    if isinstance(first, dict):
        return {k: stack_states([s[k] for s in states]) for k in first}
    if np.ndim(first) == 0 and not isinstance(first, np.ndarray) and all(s == first for s in states):
        return first
    return np.stack([np.asarray(s) for s in states])


def take_members(tree, members):
    """The given members of a stacked state (numbers, shared by all, stay as they are)."""
    if isinstance(tree, dict):
        return {k: take_members(v, members) for k, v in tree.items()}
    return tree[members] if isinstance(tree, np.ndarray) and tree.ndim else tree


def member(tree, g: int):
    """Member g's own (unstacked) tree."""
    if isinstance(tree, dict):
        return {k: member(v, g) for k, v in tree.items()}
    return tree[g] if isinstance(tree, np.ndarray) and tree.ndim else tree


def finite_members(tree, count: int) -> np.ndarray:
    """(count,) bools: whether every value of each member of a stacked tree is finite (a
    number shared by all members counts for each)."""
    ok = np.ones(count, bool)
    for v in (tree.values() if isinstance(tree, dict) else [tree]):
        if isinstance(v, dict):
            ok &= finite_members(v, count)
        elif isinstance(v, np.ndarray) and v.ndim:
            ok &= np.isfinite(v.reshape(count, -1)).all(axis=1)
        else:
            ok &= bool(np.all(np.isfinite(v)))
    return ok


def _rows(payload: dict, clients: int, g: int) -> dict:
    """A stacked payload as per-row values for `clients` clients (client-major rows): each
    model tree becomes a `PerRow` tree, each number one value per row."""
    out = {}
    for k, v in payload.items():
        if isinstance(v, dict):
            out[k] = PerRow(_rows(v, clients, g))
        else:
            v = np.asarray(v)
            out[k] = (np.tile(v, (clients,) + (1,) * (v.ndim - 1)) if v.ndim
                      else np.full(clients * g, float(v)))
    return out


class Fused(Algorithm):
    """G members of one algorithm class as one algorithm (see the module docstring)."""

    def __init__(self, members: list[Algorithm], lams: list[float] | None = None):
        cls = type(members[0])
        if any(type(m) is not cls for m in members):
            raise ValueError("a fused group holds configurations of one algorithm")
        if not cls.fusable:
            raise ValueError(f"algorithm {cls.name!r} cannot run fused")
        hps = [m.hp for m in members]
        if len({fuse_key(hp) for hp in hps}) > 1:
            raise ValueError("fused configurations differ in more than real-valued hyperparameters")
        if lams is not None and (len(lams) != len(members) or hasattr(cls, "fused_client_update")):
            raise ValueError(f"algorithm {cls.name!r}: a fused group can vary problem.lam only "
                             "with one lam per member and the generic stacked client steps")
        self.cls, self.members, self.size = cls, members, len(members)
        self.lams = None if lams is None else [float(v) for v in lams]  # None: the problem's
        self.rows_per_client = self.size  # stacked rows per client (backends block by them)
        self.varying = varying_fields(hps)
        super().__init__(hps[0])  # the shared settings: clients per round, steps, weighting
        self.server = cls(self._hyper(1))
        self.name = cls.name

    @property
    def uses_clients(self):
        return self.cls.uses_clients

    @property
    def exchanges_per_round(self):
        return self.cls.exchanges_per_round

    def _hyper(self, repeat: int) -> SimpleNamespace:
        """The hyperparameters with each varying one as a value per row: members x `repeat`
        (client-major: `repeat` clients of G rows each)."""
        values = {f: getattr(self.hp, f) for f in type(self.hp).model_fields}
        for f in self.varying:
            values[f] = np.tile(np.array([getattr(m.hp, f) for m in self.members], float), repeat)
        return SimpleNamespace(**values)

    def _problem(self, problem: Problem, repeat: int) -> Problem:
        """The problem with each member's lam on its rows (members x `repeat`, client-major),
        or as it is when the members share the problem's lam."""
        if self.lams is None:
            return problem
        return problem.with_lam(np.tile(np.array(self.lams), repeat))

    def select_clients(self, seed, rnd, num_clients):
        return self.members[0].select_clients(seed, rnd, num_clients)

    def client_weights(self, problem, rows):
        return self.members[0].client_weights(problem, rows)

    def server_init(self, problem, params0):
        problems = [problem.with_lam(lam) for lam in self.lams] if self.lams else [problem] * self.size
        return stack_states([m.server_init(own, params0) for m, own in zip(self.members, problems)])

    def broadcast(self, state):
        return self.server.broadcast(state)

    @property
    def presummed(self):
        return self.cls.presummed

    def client_update(self, problem: Problem, payload, rows, key: Key):
        if hasattr(self.cls, "fused_client_update"):
            # the algorithm serves the whole group itself (e.g. the SVRG family's compiled
            # group passes: one pass over a node's data for every member): it gets the
            # stacked payload and the varying hyperparameters as (G,) arrays, and returns
            # messages (G, ...) already summed over `rows` (`presummed`)
            return self.cls(self._hyper(1)).fused_client_update(problem, payload, rows, key)
        clients, g = len(rows), self.size
        problem = self._problem(problem, clients)
        algorithm = self.cls(self._hyper(clients))
        stacked = dataclasses.replace(key, client_ids=np.repeat(np.asarray(key.client_ids), g))
        message = algorithm.client_update(problem, _rows(payload, clients, g),
                                          np.repeat(np.asarray(rows), g), stacked)
        return {k: v.reshape((clients, g) + v.shape[1:]) for k, v in message.items()}

    def server_update(self, problem, state, mean, rnd):
        return self.server.server_update(self._problem(problem, 1), state, mean, rnd)

    def output(self, problem, state):
        return self.server.output(self._problem(problem, 1), state)

    def extra_outputs(self, problem, state):
        return self.server.extra_outputs(self._problem(problem, 1), state)

    def extra_output_names(self):
        return self.members[0].extra_output_names()

    def keep(self, members: list[int]) -> "Fused":
        """The group of the given members only."""
        return Fused([self.members[i] for i in members],
                     None if self.lams is None else [self.lams[i] for i in members])


def metrics(problem: Problem, fused: Fused, stacked, count: int) -> list[dict[str, float]]:
    """Each member's metrics of a stacked model tree, with the member's own lam (those that
    share a lam evaluated together: `Problem.metrics_stack`)."""
    if fused.lams is None:
        return problem.metrics_stack(stacked, count)
    out: list = [None] * count
    for lam in dict.fromkeys(fused.lams):
        same = [j for j, v in enumerate(fused.lams) if v == lam]
        rows = problem.with_lam(lam).metrics_stack(take_members(stacked, same), len(same))
        for j, row in zip(same, rows):
            out[j] = row
    return out


def _round(problem: Problem, fused: Fused, state, backend, seed: int, rnd: int):
    """One communication round of a group: (new state, floats per member up / down, the
    positions of members whose broadcast was not finite: they took no part)."""
    up = down = 0.0
    stopped: list[int] = []
    live = list(range(fused.size))
    for _ in range(fused.exchanges_per_round):
        payload = fused.broadcast(state)
        bad = list(np.flatnonzero(~finite_members(payload, len(live))))
        if bad:
            stopped += [live[j] for j in bad]
            keep = [j for j in range(len(live)) if j not in bad]
            live = [live[j] for j in keep]
            if not live:
                return state, (up, down), stopped
            fused, state = fused.keep(keep), take_members(state, keep)
            payload = fused.broadcast(state)
        mean, floats_up, floats_down = exchange(problem, fused, backend, payload, seed, rnd)
        # per member: every message is stacked (G, ...); a payload's number shared by all
        # members (e.g. FeDualEx's t at one server rate) is one float of each member's own
        up += floats_up / fused.size
        down += floats_down * size(member(payload, 0)) / max(size(payload), 1)
        with np.errstate(all="ignore"):
            state = fused.server_update(problem, state, mean, rnd)
    return state, (up, down), stopped


def run_fused(problem: Problem, algorithms: list[Algorithm], backend, *, rounds: int,
              eval_every: int, seed: int,
              on_round: Callable[[int, dict, list], None] | None = None,
              divergence: float | None = None, start: Snapshot | None = None,
              checkpoint_every: int = 0,
              on_checkpoint: Callable[[Snapshot], None] | None = None,
              lams: list[float] | None = None) -> list[RunResult]:
    """The engine's round loop (`engine.run_rounds`) over a fused group: one RunResult per
    configuration, equal to its unfused run (same rows, same status, the same divergence
    rules). `on_round(round, rows, diverged)` is called at every evaluated round with the
    rows by configuration index and the configurations that ended diverged since the last
    call. Checkpoints as in `engine.run_rounds`: the snapshot holds the stacked state of the
    configurations still running (`Snapshot.active`) and every configuration's bound.
    `lams`: one regularizer weight per configuration where they differ (`Fused`); `problem`
    is then built with any of them."""
    backend.start_run()  # as engine.run_rounds: no client state of an earlier run
    results = [RunResult() for _ in algorithms]
    announced: set[int] = set()  # diverged configurations already passed to on_round
    limits = [np.inf] * len(algorithms)  # train_loss above this ends a member (engine.run_rounds)
    active = list(range(len(algorithms)))  # configurations still running, in group order
    first = 0
    if start is None:
        fused = Fused(algorithms, lams)
        state = fused.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))
        comm = {"floats_up": 0.0, "floats_down": 0.0}
    else:  # those not active ended diverged before the checkpoint (and were announced)
        active, limits, first = list(start.active), list(start.loss_limits), start.round
        fused = Fused([algorithms[i] for i in active], None if lams is None else [lams[i] for i in active])
        state, comm = start.state, {**start.comm}
        for i in set(range(len(algorithms))) - set(active):
            results[i].status = "diverged"
            announced.add(i)

    def end(positions: list[int], at_state) -> None:
        """End the members at these positions of `active` as diverged; keep the others."""
        nonlocal fused, state, active
        if not positions:
            return
        for j in positions:
            results[active[j]].status = "diverged"
            results[active[j]].state = member(at_state, j)
        keep = [j for j in range(len(active)) if j not in positions]
        active = [active[j] for j in keep]
        if active:
            fused, state = fused.keep(keep), take_members(state, keep)

    def record(rnd: int) -> None:
        outputs, extras, stopped = fused.output(problem, state), fused.extra_outputs(problem, state), []
        rows = {}
        with np.errstate(all="ignore"):
            evaluated = metrics(problem, fused, outputs, len(active))
            for suffix, params in extras.items():
                for row, more in zip(evaluated, metrics(problem, fused, params, len(active))):
                    row.update({f"{k}_{suffix}": v for k, v in more.items()})
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
            new, (up, down), stopped = _round(problem, fused, state, backend, seed, rnd)
            end(stopped, state)
            if active:
                state = new  # holds exactly the members that took part
        except NUMERICAL_FAILURES:  # e.g. an SVD of huge numbers: find who, member by member
            states, failed, up, down = [], [], 0.0, 0.0
            for j in range(len(active)):
                try:
                    single, (up, down), stopped = _round(problem, fused.keep([j]),
                                                         take_members(state, [j]), backend, seed, rnd)
                except NUMERICAL_FAILURES:
                    stopped = [0]
                if stopped:
                    failed.append(j)
                else:
                    states.append(single)
            end(failed, state)
            if active:
                state = _concat(states)
        comm = {"floats_up": float(up), "floats_down": float(down)}

    if start is None:
        record(0)
    for rnd in range(first, rounds):
        if not active:
            break
        advance(rnd)
        done = rnd + 1
        if active and on_checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
            on_checkpoint(Snapshot(done, state, dict(comm), loss_limits=list(limits), active=list(active)))
        if active and (done % eval_every == 0 or done == rounds):
            record(done)
    for j, i in enumerate(active):
        results[i].state = member(state, j)
    if on_round is not None and len(announced) < sum(r.status == "diverged" for r in results):
        on_round(rounds, {}, [i for i, r in enumerate(results)
                              if r.status == "diverged" and i not in announced])
    return results


def _concat(states: list):
    """Join single-member stacked states into one stacked state."""
    first = states[0]
    if isinstance(first, dict):
        return {k: _concat([s[k] for s in states]) for k in first}
    if isinstance(first, np.ndarray) and first.ndim:
        return np.concatenate(states)
    if all(s == first for s in states):
        return first
    return np.array(states, dtype=float)
