"""`DeviceBackend`: whole rounds of a run or a fused group as one compiled JAX program.

The engine hands it the rounds between two evaluations (or checkpoints) at once
(`run_rounds`); it draws the sampled clients of those rounds on the host (the CPU engine's
sampler, `sampling`), runs them on the device as `lax.scan` over rounds of `jax.vmap` over
members (`fco_ray.rules.rounds`), and returns the group's state, the members whose broadcast
stopped being finite and, where the problem has metric rules (`fco_ray.rules.metrics`), every
member's metrics after the last round, computed in the same program (the engine's rows: the
host computes none). The problem's data goes to the device once; the group's state stays
there between calls (it is uploaded again only when the engine changes it: a member ended).
Members may differ in their rates, lam and seed (their keyed draws and sampled clients are
their own).

The rules are the algorithm's and the problem's (`Algorithm.rule`, `Problem.rule`): any pair
that declares one runs here, a user's own included. The other concerns live beside this
module: device memory (`memory`), the member layout (`layout`), the clients' draws
(`sampling`), communicated floats (`floats`), the metric rows (`rows`).
"""
from __future__ import annotations

import numpy as np

from ...runtime.errors import ConfigError
from . import DEVICES
from .environment import INSTALL, ONE_THREAD, _jax, jax_device  # noqa: F401 (re-exported)
from .floats import round_floats
from .layout import pad, pad_tree, padded_size
from .memory import check_memory, estimate_bytes, free_bytes  # noqa: F401 (re-exported)
from .rows import metric_names, table_rows
from .sampling import draw_clients


class DeviceBackend:
    """Runs a group's rounds on a JAX device (`run_rounds`); `map_clients` is not offered: the
    engine asks for whole rounds (`fco_ray.core.engine`)."""

    name = "device"
    compiles_rounds = True  # whole rounds: run_rounds (fco_ray.backends.base.CompiledRounds)

    def __init__(self, problem, device: str, nuclear_route: str = "householder"):
        self.jax = _jax()
        self.nuclear_route = nuclear_route
        self.device = jax_device(device)
        self.device_name = device
        self.problem = problem
        self.data = None  # the problem's arrays on the device, from the first round
        self.metric_data = None  # the arrays its metric rules read, on the device
        self.compiled: dict = {}  # (algorithm class, shared hyperparameters, shared seed) -> programs
        self.checked: set = set()
        self.floats: dict = {}  # (program, clients per round) -> floats up, down per member
        self.names: dict = {}  # program -> the columns of its rows
        self.resident = None  # (group, the state returned, its padded arrays on the device)

    def start_run(self) -> None:
        self.resident = None

    def close(self) -> None:
        self.compiled.clear()
        self.resident = None

    def put(self, tree):
        return self.jax.device_put(tree, self.device)

    # ---- the rules of a group ------------------------------------------------------------
    def _rules(self, group, shared: bool):
        """(rule, problem rule, metric rule or None, compiled rounds) of `group`; `shared`: its
        members share the seed."""
        algorithm = group.members[0]
        if not getattr(group, "runs_rule", False):  # a NumPy algorithm (the SVRG family, ...)
            raise ConfigError(
                f"backend.device {self.device_name!r}: no device program for algorithm "
                f"{algorithm.name!r}: it is written in NumPy, not as a rule (docs/custom_rules.md); "
                "use backend.device: cpu")
        rule = algorithm.make_rule()
        from ...rules.numpy_problem import problem_rule as rule_of  # JAX is loaded by now

        problem_rule = rule_of(self.problem, algorithm.hp.minibatch)
        if hasattr(problem_rule, "with_route"):
            problem_rule = problem_rule.with_route(self.nuclear_route)
        shared_hp = {f: v for f, v in algorithm.hp.model_dump().items() if not isinstance(v, float)}
        key = (type(algorithm), repr(sorted(shared_hp.items())), shared)  # real values come as arrays
        if key not in self.compiled:
            from ...rules.metrics import metric_rule
            from ...rules.rounds import compile_rounds

            metrics = metric_rule(self.problem)
            if self.data is None:
                self.data = self.put({k: np.asarray(v) for k, v in problem_rule.arrays().items()})
            if metrics is not None and self.metric_data is None:
                self.metric_data = self.put(metrics.arrays())
            self.compiled[key] = (rule, problem_rule, metrics, compile_rounds(rule, problem_rule, shared, metrics))
        return self.compiled[key]

    def _check_memory(self, group, problem_rule, clients: int) -> None:
        key = (group.size, clients)
        if key not in self.checked:
            check_memory(self.device, self.device_name, self.problem, group, problem_rule, clients)
            self.checked.add(key)

    def _members(self, group, state, size: int):
        """The group's state on the device, on the padded member axis: the arrays the last
        call left there where the engine hands back the state that call returned (and the
        group is the same), else uploaded from the host."""
        if self.resident is not None:
            last_group, last_state, arrays = self.resident
            if last_group is group and last_state is state:
                return arrays
        return self.put(pad_tree(state, size))  # a RuleGroup's state: every leaf on the member axis

    # ---- whole rounds --------------------------------------------------------------------
    def run_rounds(self, group, state, seeds: list[int], start: int, stop: int):
        """Rounds start..stop-1 of `group` from `state` (the group's layout); `seeds`: one per
        member. Returns (state, positions of the members that stopped, with the state they
        stopped at inside the returned state, floats up and down per member, rows): rows are
        each member's metrics after round stop - 1 (a list of dicts in member order), None
        where the problem has no metric rules (the host evaluates)."""
        shared = len(set(seeds)) == 1
        rule, problem_rule, metrics, run = self._rules(group, shared)
        g = group.size
        size = padded_size(g)
        rows, weights = draw_clients(group, self.problem, seeds, start, stop)  # (R, G, C)
        self._check_memory(group, problem_rule, rows.shape[-1])
        hyper = {k: pad(v, size) for k, v in {**group.rule_hyper(problem_rule.lam),
                                              "seed": np.asarray(seeds, np.uint64)}.items()}
        seed = hyper.pop("seed")
        if shared:  # one seed, one draw of clients for every member
            seed, rows, weights = seed[0], rows[:, 0], weights[:, 0]
        else:
            rows, weights = pad(rows.swapaxes(0, 1), size).swapaxes(0, 1), pad(weights.swapaxes(0, 1), size).swapaxes(0, 1)
        members = self._members(group, state, size)
        alive = np.arange(size) < g
        out, _, stopped, table = run(members, self.put(alive), self.put(np.full(size, -1)),
                                     self.put(hyper), self.put(seed), self.data, self.metric_data,
                                     self.put(rows.astype(np.int64)), self.put(weights.astype(np.float64)),
                                     self.put(np.arange(start, stop, dtype=np.int64)))
        host = self.jax.tree_util.tree_map(lambda v: np.asarray(v)[:g], out)
        stopped = [int(j) for j in np.flatnonzero(np.asarray(stopped)[:g] >= 0)]
        key = (id(run), rows.shape[-1])
        if key not in self.floats:  # shapes only: once per program and clients per round
            self.floats[key] = round_floats(self.jax, rule, problem_rule, self.data, members,
                                            {**hyper, "seed": np.zeros(size, np.uint64)}, rows.shape[-1])
        result = host
        self.resident = None if stopped else (group, result, out)
        member_rows = None
        if table is not None:
            if id(run) not in self.names:
                self.names[id(run)] = metric_names(self.jax, rule, problem_rule, metrics, members, hyper)
            member_rows = table_rows(table, self.names[id(run)], g)
        return result, stopped, self.floats[key], member_rows
