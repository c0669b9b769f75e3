"""The member axis: G configurations of one algorithm run as one unit, a *group*.

The round loop (`fco_ray.core.engine.run_rounds`) always runs a group; a single run is a group of
one. The group is the one place that knows how its members are laid out:

- `Single` (G = 1): the algorithm's own state, unstacked; every call goes straight through.
- `Stacked` (G >= 1, a fusable algorithm): configurations that differ only in real-valued
  hyperparameters (`client_lr`, `server_lr`, ...) and, where the problem allows it, in the
  regularizer weight `problem.lam` (`ProblemParams.fusable_lam`), as one stacked computation.

Members of a stacked group share the problem, the seed and every other setting, so they
sample the same clients and draw the same minibatch rows (randomness is keyed by seed, round,
client and step, never by configuration):

- the server state holds every member on a leading member axis (G, ...); values equal across
  members (e.g. a step counter) stay plain numbers;
- the broadcast carries every member's payload; each client runs its local steps for all
  members at once as a stack of C * G rows (client-major: row c * G + g is member g on client
  c), with each varying hyperparameter one value per row (`tree.per_row`), and the key says
  so (`Key.members` = G), so a client's rows read its minibatch and draw its noise once;
- a client's message has shape (G, ...), so the backends' weighted sums over clients give
  every member's aggregate at once (on Ray actors too);
- where members differ in lam, every call that takes the problem gets it with one weight per
  stacked row (`Problem.with_lam`), and each member is evaluated with its own.

The algorithm's own update rules run unchanged on the stacked rows: every member computes the
same floating-point operations as its run alone, so results are equal (tests: to 1e-12).
"""
from __future__ import annotations

import abc
import dataclasses

import numpy as np

from ..algorithms.base import Algorithm, is_real
from ..ops.random import Key, generator
from ..ops.tree import PerRow, all_finite, size
from ..problems.base import Problem

INIT_TAG = 0x1417  # the key tag of a run's initial model draw: generator(seed, INIT_TAG)


def varying_fields(hps: list) -> list[str]:
    """Hyperparameters that differ across `hps` (one algorithm's); each must be a real
    number: other settings change the computation's shape or flow, not only its values."""
    fields = type(hps[0]).model_fields
    varying = [f for f in fields if len({repr(getattr(hp, f)) for hp in hps}) > 1]
    for f in varying:
        if any(isinstance(getattr(hp, f), bool) or not isinstance(getattr(hp, f), (int, float))
               for hp in hps) or not is_real(fields[f]):
            raise ValueError(f"algorithm.{f} differs across the fused configurations; only "
                             "real-valued hyperparameters can be fused")
    return varying


def fuse_key(hp) -> str:
    """Configurations of one algorithm with the same key can run fused: every setting
    except the real-valued hyperparameters."""
    fields = type(hp).model_fields
    fixed = {f: getattr(hp, f) for f in fields if not is_real(fields[f])}
    return repr(sorted(fixed.items()))


def make_group(algorithms: list[Algorithm], lams: list[float] | None = None,
               seeds: list[int] | None = None) -> "Group":
    """The group that runs `algorithms` (configurations of one algorithm class) together:
    one configuration alone is `Single`; several, or one with its own lam, are `Stacked`; an
    algorithm written as a rule alone is a `RuleGroup` of any size.
    `lams`, `seeds`: one regularizer weight / seed per configuration where they differ
    (None: the problem's / the run's)."""
    if algorithms[0].rule_only:
        return RuleGroup(algorithms, lams, seeds)
    if len(algorithms) == 1 and lams is None and seeds is None:
        return Single(algorithms[0])
    return Stacked(algorithms, lams, seeds)


class Group(Algorithm):
    """G configurations of one algorithm class presented to the engine and the backends as
    one algorithm, plus the operations on the member axis the round loop needs."""

    size: int
    members: list[Algorithm]
    #: whether the state's arrays carry a leading member axis (G, ...)
    stacked: bool
    #: the hyperparameters that differ across the members
    varying: list[str] = []
    #: one seed per member where they differ (None: the run's seed); only a backend that
    #: runs whole rounds (`run_rounds`) takes such a group
    seeds: list[int] | None = None
    #: one regularizer weight per member where they differ (None: the problem's own)
    lams: list[float] | None = None

    @abc.abstractmethod
    def start(self, problem: Problem, seed: int):
        """The group's state at round 0: each member's server state from the initial model
        that its seed (the run's `seed`, or the member's own in a group fused over seeds)
        draws (`Problem.init_params` from the generator keyed by (seed, INIT_TAG))."""

    @abc.abstractmethod
    def finite(self, tree) -> np.ndarray:
        """(G,) bools: whether each member's part of a state or payload is finite."""

    @abc.abstractmethod
    def take(self, tree, members: list[int]):
        """The given members' part of a state (members kept in that order)."""

    @abc.abstractmethod
    def keep(self, members: list[int]) -> "Group":
        """The group of the given members only (its state: `take(state, members)`)."""

    @abc.abstractmethod
    def member(self, tree, g: int):
        """Member g's own state, as its run alone would hold it."""

    @abc.abstractmethod
    def join(self, states: list):
        """One group state from single-member group states, in order."""

    @abc.abstractmethod
    def evaluate(self, problem: Problem, state) -> list[dict[str, float]]:
        """Each member's metrics of its output model (and of extra outputs, suffixed)."""

    @abc.abstractmethod
    def per_member(self, floats_up: float, floats_down: float, payload) -> tuple[float, float]:
        """An exchange's communicated floats as counted for each member's own run."""

    def member_hyper(self, field: str) -> np.ndarray:
        """(G,) the members' values of a hyperparameter (None: NaN)."""
        return np.array([np.nan if getattr(m.hp, field) is None else getattr(m.hp, field)
                         for m in self.members], float)

    def rule_hyper(self, lam: float) -> dict[str, np.ndarray]:
        """The `hyper` of the members' rules (fco_ray.rules): every real-valued
        hyperparameter, one value per member (varying or not: a rule reads them all from
        here), and psi's weight `lam` (each member's own where they differ, else `lam`, the
        problem's)."""
        hyper = {f: self.member_hyper(f) for f in self.hp.real_fields()}
        lams = self.lams if self.lams is not None else [lam] * self.size
        return {**hyper, "lam": np.asarray(lams, float)}

    def rule_key(self) -> str:
        """What a compiled rule of this group depends on beside the arrays it is given: the
        algorithm's settings that are not real numbers (those come in `rule_hyper`)."""
        shared = {f: v for f, v in self.hp.model_dump().items() if not isinstance(v, float)}
        return repr(sorted(shared.items()))


def evaluate_one(problem: Problem, algorithm: Algorithm, state: dict) -> dict[str, float]:
    """Metrics of the server's output model, plus those of any extra outputs (suffixed)."""
    metrics = problem.metrics(algorithm.output(problem, state))
    for suffix, params in algorithm.extra_outputs(problem, state).items():
        metrics.update({f"{k}_{suffix}": v for k, v in problem.metrics(params).items()})
    return metrics


class Single(Group):
    """One configuration: its state as its algorithm holds it, every call passed through."""

    size, stacked = 1, False

    def __init__(self, algorithm: Algorithm):
        super().__init__(algorithm.hp)
        self.algorithm, self.members, self.cls = algorithm, [algorithm], type(algorithm)
        self.name = algorithm.name
        for attr in ("uses_clients", "exchanges_per_round", "presummed", "client_state", "supports"):
            setattr(self, attr, getattr(algorithm, attr))

    def select_clients(self, seed, rnd, num_clients):
        return self.algorithm.select_clients(seed, rnd, num_clients)

    def client_weights(self, problem, rows):
        return self.algorithm.client_weights(problem, rows)

    def init_client_state(self, problem, rows):
        return self.algorithm.init_client_state(problem, rows)

    def server_init(self, problem, params0):
        return self.algorithm.server_init(problem, params0)

    def start(self, problem, seed):
        return self.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))

    def broadcast(self, state):
        return self.algorithm.broadcast(state)

    def client_update(self, problem, payload, rows, key, *client_state):
        return self.algorithm.client_update(problem, payload, rows, key, *client_state)

    def server_update(self, problem, state, mean, rnd):
        return self.algorithm.server_update(problem, state, mean, rnd)

    def output(self, problem, state):
        return self.algorithm.output(problem, state)

    def extra_outputs(self, problem, state):
        return self.algorithm.extra_outputs(problem, state)

    def extra_output_names(self):
        return self.algorithm.extra_output_names()

    def finite(self, tree):
        return np.array([all_finite(tree)])

    def take(self, tree, members):
        return tree

    def keep(self, members):
        return self

    def member(self, tree, g):
        return tree

    def join(self, states):
        return states[0]

    def evaluate(self, problem, state):
        return [evaluate_one(problem, self.algorithm, state)]

    def per_member(self, floats_up, floats_down, payload):
        return floats_up, floats_down


def stack_states(states: list):
    """One state for all members: arrays get a leading member axis; numbers equal across
    members stay numbers."""
    first = states[0]
    if isinstance(first, dict):
        return {k: stack_states([s[k] for s in states]) for k in first}
    if np.ndim(first) == 0 and not isinstance(first, np.ndarray) and all(s == first for s in states):
        return first
    return np.stack([np.asarray(s) for s in states])


def _take(tree, members):
    if isinstance(tree, dict):
        return {k: _take(v, members) for k, v in tree.items()}
    return tree[members] if isinstance(tree, np.ndarray) and tree.ndim else tree


def _member(tree, g: int):
    if isinstance(tree, dict):
        return {k: _member(v, g) for k, v in tree.items()}
    return tree[g] if isinstance(tree, np.ndarray) and tree.ndim else tree


def _concat(states: list):
    first = states[0]
    if isinstance(first, dict):
        return {k: _concat([s[k] for s in states]) for k in first}
    if isinstance(first, np.ndarray) and first.ndim:
        return np.concatenate(states)
    if all(s == first for s in states):
        return first
    return np.array(states, dtype=float)


def _finite(tree, count: int) -> np.ndarray:
    ok = np.ones(count, bool)
    for v in (tree.values() if isinstance(tree, dict) else [tree]):
        if isinstance(v, dict):
            ok &= _finite(v, count)
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


class Stacked(Group):
    """G members of one fusable algorithm class on a leading member axis (module docstring)."""

    stacked = True

    def __init__(self, members: list[Algorithm], lams: list[float] | None = None,
                 seeds: list[int] | None = None):
        cls = type(members[0])
        if any(type(m) is not cls for m in members):
            raise ValueError("a fused group holds configurations of one algorithm")
        if not cls.fusable:
            raise ValueError(f"algorithm {cls.name!r} cannot run fused")
        hps = [m.hp for m in members]
        if len({fuse_key(hp) for hp in hps}) > 1:
            raise ValueError("fused configurations differ in more than real-valued hyperparameters")
        if lams is not None and (len(lams) != len(members) or cls.serves_group):
            raise ValueError(f"algorithm {cls.name!r}: a fused group can vary problem.lam only "
                             "with one lam per member and the generic stacked client steps")
        if seeds is not None and len(seeds) != len(members):
            raise ValueError("a fused group over seeds takes one seed per member")
        self.cls, self.members, self.size = cls, members, len(members)
        self.lams = None if lams is None else [float(v) for v in lams]
        self.seeds = None if seeds is None else [int(s) for s in seeds]
        self.varying = varying_fields(hps)
        super().__init__(hps[0])  # the shared settings: clients per round, steps, weighting
        self.server = cls(self._hyper(1))
        self.name = cls.name
        self.uses_clients, self.exchanges_per_round = cls.uses_clients, cls.exchanges_per_round
        self.presummed, self.supports = cls.presummed, cls.supports

    def _hyper(self, repeat: int):
        """The members' hyperparameters as one Hyper of the algorithm's class whose varying
        fields hold a value per row: members x `repeat` (client-major: `repeat` clients of G
        rows each). Built without validation: each member's own Hyper was validated."""
        values = {f: getattr(self.hp, f) for f in type(self.hp).model_fields}
        for f in self.varying:
            values[f] = np.tile(self.member_hyper(f), repeat)
        return type(self.hp).model_construct(**values)

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
        """`params0`: the initial model, or one per member (a group fused over seeds)."""
        problems = [problem.with_lam(lam) for lam in self.lams] if self.lams else [problem] * self.size
        inits = params0 if isinstance(params0, list) else [params0] * self.size
        return stack_states([m.server_init(own, p0) for m, own, p0 in zip(self.members, problems, inits)])

    def start(self, problem, seed):
        if self.seeds is None:
            return self.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))
        drawn = {s: problem.init_params(generator(s, INIT_TAG)) for s in dict.fromkeys(self.seeds)}
        return self.server_init(problem, [drawn[s] for s in self.seeds])

    def broadcast(self, state):
        return self.server.broadcast(state)

    def client_update(self, problem: Problem, payload, rows, key: Key):
        if self.cls.serves_group:
            # the algorithm serves the whole group itself (e.g. the SVRG family's compiled
            # group passes: one pass over a node's data for every member): it gets the
            # stacked payload and the varying hyperparameters as (G,) arrays, and returns
            # messages (G, ...) already summed over `rows` (`presummed`)
            return self.cls(self._hyper(1)).group_client_update(problem, payload, rows, key)
        clients, g = len(rows), self.size
        problem = self._problem(problem, clients)
        algorithm = self.cls(self._hyper(clients))
        stacked = dataclasses.replace(key, client_ids=np.repeat(np.asarray(key.client_ids), g), members=g)
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

    def finite(self, tree):
        return _finite(tree, self.size)

    def take(self, tree, members):
        return _take(tree, members)

    def keep(self, members):
        return type(self)([self.members[i] for i in members],
                       None if self.lams is None else [self.lams[i] for i in members],
                       None if self.seeds is None else [self.seeds[i] for i in members])

    def member(self, tree, g):
        return _member(tree, g)

    def join(self, states):
        return _concat(states)

    def evaluate(self, problem, state):
        with np.errstate(all="ignore"):
            rows = self._metrics(problem, self.output(problem, state))
            for suffix, params in self.extra_outputs(problem, state).items():
                for row, more in zip(rows, self._metrics(problem, params)):
                    row.update({f"{k}_{suffix}": v for k, v in more.items()})
        return rows

    def _metrics(self, problem: Problem, stacked) -> list[dict[str, float]]:
        """Each member's metrics of a stacked model tree, with the member's own lam (those
        that share a lam evaluated together: `Problem.metrics_stack`)."""
        if self.lams is None:
            return problem.metrics_stack(stacked, self.size)
        out: list = [None] * self.size
        for lam in dict.fromkeys(self.lams):
            same = [j for j, v in enumerate(self.lams) if v == lam]
            rows = problem.with_lam(lam).metrics_stack(_take(stacked, same), len(same))
            for j, row in zip(same, rows):
                out[j] = row
        return out

    def per_member(self, floats_up, floats_down, payload):
        # every message is stacked (G, ...); a payload's number shared by all members (e.g.
        # FeDualEx's t at one server rate) is one float of each member's own
        return floats_up / self.size, floats_down * size(_member(payload, 0)) / max(size(payload), 1)


class RuleGroup(Stacked):
    """G >= 1 configurations of an algorithm written as its rule alone
    (`fco_ray.algorithms.rule_based`). Every leaf of its state is on the member axis (G, ...),
    and the rule, written for one member, runs under `jax.vmap` over them: round by round on
    the host executors (`fco_ray.rules.host`: the clients' part where they are, in the local
    backend or on each Ray actor; broadcast, server and outputs here), or whole rounds on a
    device backend (which reads the same layout).

    Its compiled driver-side pieces are kept for the group's life (not pickled: a Ray actor
    compiles its own client part once, `rules.host.Programs`)."""

    runs_rule = True  # the backends hand it their compiled programs (`client_update`)
    presummed = True  # `client_update` returns the weighted sums over its clients

    def __init__(self, members: list[Algorithm], lams: list[float] | None = None,
                 seeds: list[int] | None = None):
        super().__init__(members, lams, seeds)
        self.presummed = True
        self._programs = None  # rules.host.Programs of the driver's side
        self._broadcast = None

    def __getstate__(self):
        return {**self.__dict__, "_programs": None, "_broadcast": None}

    def _program(self, problem: Problem):
        if self._programs is None:
            from ..rules.host import Programs

            self._programs = Programs()
        return self._programs.get(self, problem)

    def _hyper_of(self, program) -> dict:
        return self.rule_hyper(program.problem_rule.lam)

    def server_init(self, problem, params0):
        """Every member's state from the rule's `init`, each leaf on the member axis."""
        inits = params0 if isinstance(params0, list) else [params0] * self.size
        states = [m.server_init(problem, p0) for m, p0 in zip(self.members, inits)]
        return _stack_all(states)

    def start(self, problem, seed):
        state = super().start(problem, seed)
        from ..rules.host import check_rule

        program = self._program(problem)
        check_rule(program, _member(state, 0), {k: v[0] for k, v in self._hyper_of(program).items()},
                   problem.shapes)
        return state

    def broadcast(self, state):
        if self._broadcast is None:
            from ..rules.host import compile_broadcast

            self._broadcast = compile_broadcast(self.members[0].make_rule())
        return self._broadcast(state)

    def client_update(self, problem: Problem, payload, rows, key: Key, programs=None):
        """The weighted sum over `rows` of the members' client messages (G, ...), by the
        executor's compiled program (`programs`: the executor's `rules.host.Programs`)."""
        if programs is None:
            raise TypeError(f"algorithm {self.name!r} is written as a rule: its clients run "
                            "through an executor's compiled programs (fco_ray.rules.host)")
        program = programs.get(self, problem)
        return program.client_sums(payload, self._hyper_of(program), key.seed, key.round,
                                   key.client_ids, rows, self.client_weights(problem, rows))

    def server_update(self, problem, state, mean, rnd):
        program = self._program(problem)
        return program.server(state, mean, self._hyper_of(program))

    def output(self, problem, state):
        program = self._program(problem)
        return program.output(state, self._hyper_of(program))

    def extra_outputs(self, problem, state):
        program = self._program(problem)
        return program.extra_outputs(state, self._hyper_of(program))


def _stack_all(states: list):
    """One state for all members with every leaf on the member axis (G, ...)."""
    if isinstance(states[0], dict):
        return {k: _stack_all([s[k] for s in states]) for k in states[0]}
    return np.stack([np.asarray(s) for s in states])
