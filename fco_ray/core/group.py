"""The member axis: G configurations of one algorithm run as one unit, a *group*.

The round loop (`fco_ray.core.engine.run_rounds`) always runs a group; a single run is a group of
one. This module is the one place that knows how a group's members are laid out: below it,
algorithms and problems see one member (a rule, under `jax.vmap`) or serve the whole group
themselves (an accelerator's or the SVRG family's batched loops, given the (G, ...) layout).

- `RuleGroup` (G >= 1): an algorithm defined by its rule (`fco_ray.rules.algorithms`: every
  dense algorithm, and a user's `RuleAlgorithm`). Every leaf of its state is on a leading
  member axis (G, ...), and the rule runs under `jax.vmap` over the members.
- `Single` (G = 1): an algorithm written in NumPy (the SVRG family on CSR data, centralized,
  a user's own), its state as the algorithm holds it; every call goes straight through.
- `Stacked` (G >= 1): a NumPy algorithm that serves a whole group itself (`serves_group`: the
  SVRG family's compiled passes over a node's data for every member), its state on the member
  axis where the members differ.

Members of a group share the problem, the seed (but on a device backend, `seeds`) and every
setting but the real-valued hyperparameters (`client_lr`, `server_lr`, ...) and, for a rule
where the problem allows it, the regularizer weight `problem.lam` (`ProblemParams.fusable_lam`,
`lams`). They sample the same clients and draw the same minibatch rows (randomness is keyed by
seed, round, client and step, never by configuration), so each member's numbers equal its run
alone (tests: 1e-12 to 1e-9).
"""
from __future__ import annotations

import abc

import numpy as np

from ..algorithms.base import Algorithm, is_real
from ..ops.random import Key, generator
from ..ops.tree import all_finite, size
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
    an algorithm defined by its rule is a `RuleGroup` of any size; a NumPy algorithm alone is
    `Single`, several are `Stacked`. `lams`, `seeds`: one regularizer weight / seed per
    configuration where they differ (None: the problem's / the run's)."""
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
        cache = vars(self).setdefault("_rule_hypers", {})  # the members are fixed: once per lam
        if lam not in cache:
            hyper = {f: self.member_hyper(f) for f in self.hp.real_fields()}
            lams = self.lams if self.lams is not None else [lam] * self.size
            cache[lam] = {**hyper, "lam": np.asarray(lams, float)}
        return cache[lam]

    def rule_key(self) -> str:
        """What a compiled rule of this group depends on beside the arrays it is given: the
        algorithm's settings that are not real numbers (those come in `rule_hyper`)."""
        if "_rule_key" not in vars(self):
            shared = {f: v for f, v in self.hp.model_dump().items() if not isinstance(v, float)}
            self._rule_key = repr(sorted(shared.items()))
        return self._rule_key


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


class Members(Group):
    """G members of one fusable algorithm class on a leading member axis: what the round loop
    asks of the member axis, for `Stacked` and `RuleGroup` alike."""

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
        if lams is not None and len(lams) != len(members):
            raise ValueError("a fused group over problem.lam takes one lam per member")
        if seeds is not None and len(seeds) != len(members):
            raise ValueError("a fused group over seeds takes one seed per member")
        self.cls, self.members, self.size = cls, members, len(members)
        self.lams = None if lams is None else [float(v) for v in lams]
        self.seeds = None if seeds is None else [int(s) for s in seeds]
        self.varying = varying_fields(hps)
        super().__init__(hps[0])  # the shared settings: clients per round, steps, weighting
        self.name = cls.name
        self.uses_clients, self.exchanges_per_round = cls.uses_clients, cls.exchanges_per_round
        self.presummed, self.supports = cls.presummed, cls.supports

    def select_clients(self, seed, rnd, num_clients):
        return self.members[0].select_clients(seed, rnd, num_clients)

    def client_weights(self, problem, rows):
        return self.members[0].client_weights(problem, rows)

    def start(self, problem, seed):
        if self.seeds is None:
            return self.server_init(problem, problem.init_params(generator(seed, INIT_TAG)))
        drawn = {s: problem.init_params(generator(s, INIT_TAG)) for s in dict.fromkeys(self.seeds)}
        return self.server_init(problem, [drawn[s] for s in self.seeds])

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


class Stacked(Members):
    """G members of a NumPy algorithm that serves a whole group itself (`serves_group`, the
    SVRG family): its update methods get the members' varying hyperparameters as (G,) arrays
    and the state on the member axis; a client exchange returns messages (G, ...) summed over
    its clients (`group_client_update`)."""

    def __init__(self, members: list[Algorithm], lams: list[float] | None = None,
                 seeds: list[int] | None = None):
        super().__init__(members, lams, seeds)
        if not self.cls.serves_group:
            raise ValueError(f"algorithm {self.name!r} cannot run fused: a NumPy algorithm fuses "
                             "only where it serves a whole group (serves_group); write it as a "
                             "rule (docs/custom_rules.md) to fuse it")
        if lams is not None:
            raise ValueError(f"algorithm {self.name!r}: a fused group over problem.lam needs a rule")
        values = {f: getattr(self.hp, f) for f in type(self.hp).model_fields}
        for f in self.varying:  # built without validation: each member's own Hyper was validated
            values[f] = self.member_hyper(f)
        self.server = self.cls(type(self.hp).model_construct(**values))

    def server_init(self, problem, params0):
        """`params0`: the initial model, or one per member (a group fused over seeds)."""
        inits = params0 if isinstance(params0, list) else [params0] * self.size
        return stack_states([m.server_init(problem, p0) for m, p0 in zip(self.members, inits)])

    def broadcast(self, state):
        return self.server.broadcast(state)

    def client_update(self, problem: Problem, payload, rows, key: Key):
        return self.server.group_client_update(problem, payload, rows, key)

    def server_update(self, problem, state, mean, rnd):
        return self.server.server_update(problem, state, mean, rnd)

    def output(self, problem, state):
        return self.server.output(problem, state)

    def extra_outputs(self, problem, state):
        return self.server.extra_outputs(problem, state)


class RuleGroup(Members):
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
        self._rule = None
        self._next = None  # (state, its broadcast) from the last server step

    def __getstate__(self):
        return {**self.__dict__, "_programs": None, "_rule": None, "_next": None}

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
        """The members' states from the rule's `init`; a rule of the user's own (not one of
        `fco_ray.rules`, which the tests check) is traced once first: pieces that do not fit
        are refused naming the rule's class and method (`rules.host.check_rule`)."""
        state = super().start(problem, seed)
        program = self._program(problem)
        if not type(program.rule).__module__.startswith("fco_ray.rules."):
            from ..rules.host import check_rule

            check_rule(program, _member(state, 0), {k: v[0] for k, v in self._hyper_of(program).items()},
                       problem.shapes)
        return state

    @property
    def rule(self):
        """The members' rule (one object: the rule is made from their shared settings)."""
        if self._rule is None:
            self._rule = self.members[0].make_rule()
        return self._rule

    def broadcast(self, state):
        """The members' broadcast: the one the last server step computed with this state (the
        same compiled call), else computed now."""
        if self._next is not None and self._next[0] is state:
            return self._next[1]
        from ..rules.host import broadcast

        return broadcast(self.rule, state)

    def client_update(self, problem: Problem, payload, rows, key: Key, programs=None):
        """The weighted sum over `rows` of the members' client messages (G, ...), by the
        executor's `programs` (its accelerator of the pair, or the compiled rule)."""
        if programs is None:
            raise TypeError(f"algorithm {self.name!r} is written as a rule: its clients run "
                            "through an executor's programs (fco_ray.backends.local.RuleClients)")
        return programs.client_sums(self, problem, payload, rows, key)

    def server_update(self, problem, state, mean, rnd):
        program = self._program(problem)
        new, payload = program.server(state, mean, self._hyper_of(program))
        self._next = (new, payload)
        return new

    def output(self, problem, state):
        return self.outputs(problem, state)[0]

    def extra_outputs(self, problem, state):
        return self.outputs(problem, state)[1]

    def outputs(self, problem, state) -> tuple[dict, dict]:
        """The members' output models and extra outputs, from one compiled call."""
        program = self._program(problem)
        return program.outputs(state, self._hyper_of(program))

    def evaluate(self, problem, state):
        with np.errstate(all="ignore"):
            output, extra = self.outputs(problem, state)
            rows = self._metrics(problem, output)
            for suffix, params in extra.items():
                for row, more in zip(rows, self._metrics(problem, params)):
                    row.update({f"{k}_{suffix}": v for k, v in more.items()})
        return rows


def _stack_all(states: list):
    """One state for all members with every leaf on the member axis (G, ...)."""
    if isinstance(states[0], dict):
        return {k: _stack_all([s[k] for s in states]) for k in states[0]}
    return np.stack([np.asarray(s) for s in states])
