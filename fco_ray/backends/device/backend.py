"""`DeviceBackend`: whole rounds of a run or a fused group as one compiled JAX program.

The engine hands it the rounds between two evaluations (or checkpoints) at once
(`run_rounds`); it draws the sampled clients of those rounds on the host (the CPU engine's
sampler), runs them on the device as `lax.scan` over rounds of `jax.vmap` over members
(`fco_ray.rules.rounds`), and returns the group's state and the members whose broadcast
stopped being finite. The problem's data goes to the device once. Members may differ in
their rates, lam and seed (their keyed draws and sampled clients are their own).

The rules are the algorithm's and the problem's (`Algorithm.rule`, `Problem.rule`): any pair
that declares one runs here, a user's own included.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from ...runtime.errors import ConfigError
from ...runtime.limits import available_bytes, human
from . import DEVICES

INSTALL = "install the GPU extra: pip install -e '.[gpu]'"


#: XLA's CPU thread pool of one thread (its default takes every core)
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _jax():
    if os.environ.get("OMP_NUM_THREADS") == "1" and "XLA_FLAGS" not in os.environ and "jax" not in sys.modules:
        # a process held to one thread (Ray sets OMP_NUM_THREADS=1 in a task or trial of one
        # CPU): XLA's CPU pool follows, so that trials side by side do not oversubscribe the
        # cores (read when JAX first loads in the process)
        os.environ["XLA_FLAGS"] = ONE_THREAD
    try:
        import jax
    except ImportError as e:
        raise ConfigError(f"backend.device needs JAX ({e}); {INSTALL}, or use backend.device: cpu") from None
    jax.config.update("jax_enable_x64", True)  # the rules compute in float64
    return jax


def jax_device(device: str):
    """The JAX device of `backend.device` ('cuda': the first GPU; 'jax-cpu': the CPU)."""
    if device not in DEVICES:
        raise ConfigError(f"backend.device: must be one of {list(DEVICES)} for the device "
                          f"path, got {device!r}")
    jax = _jax()
    platform = "gpu" if device == "cuda" else "cpu"
    try:
        return jax.devices(platform)[0]
    except RuntimeError as e:
        raise ConfigError(f"backend.device: 'cuda' asked for, but JAX finds no GPU ({e}); "
                          f"{INSTALL} on a machine with an NVIDIA GPU, or use backend.device: cpu") from None


def free_bytes(dev) -> int:
    """Memory left on the device: the GPU allocator's limit minus what is in use; the host's
    available memory for JAX's CPU platform."""
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return available_bytes()


def estimate_bytes(data_bytes: int, model: int, message: int, group: int, clients: int) -> dict[str, int]:
    """Device memory of a round's program for a group, by part, from the shapes alone (lower
    bounds in the spirit of fco_ray/runtime/limits.py): the problem's data, and per member and
    client the live copies of a local step (model, gradient, prox temporaries: 6) plus the
    client's message."""
    return {"the problem's data": data_bytes,
            f"the clients' live iterates ({clients} clients x {group} members x {model} floats, "
            "6 copies)": 6 * 8 * clients * group * model,
            f"the clients' messages ({clients} clients x {group} members x {message} floats)":
                8 * clients * group * message}


def _pad(values: np.ndarray, size: int) -> np.ndarray:
    """Members padded to `size` with copies of member 0 (padding never runs: alive is False)."""
    return np.concatenate([values, np.repeat(values[:1], size - len(values), axis=0)]) if size > len(values) else values


class DeviceBackend:
    """Runs a group's rounds on a JAX device (`run_rounds`); `map_clients` is not offered: the
    engine asks for whole rounds (`fco_ray.core.engine`)."""

    name = "device"

    def __init__(self, problem, device: str, nuclear_route: str = "householder"):
        self.jax = _jax()
        self.nuclear_route = nuclear_route
        self.device = jax_device(device)
        self.device_name = device
        self.problem = problem
        self.data = None  # the problem's arrays on the device, from the first round
        self.compiled: dict = {}  # (algorithm class, shared hyperparameters) -> programs
        self.checked: set = set()
        self.floats: dict = {}  # (program, clients per round) -> floats up, down per member

    def start_run(self) -> None:
        pass

    def close(self) -> None:
        self.compiled.clear()

    def put(self, tree):
        return self.jax.device_put(tree, self.device)

    # ---- the rules of a group ------------------------------------------------------------
    def _rules(self, group, shared: bool):
        """(rule, problem rule, compiled rounds) of `group`; `shared`: its members share the seed."""
        algorithm = group.members[0]
        rule = algorithm.make_rule()
        problem_rule = self.problem.make_rule(getattr(algorithm.hp, "batch_size", None))
        if problem_rule is not None and hasattr(problem_rule, "with_route"):
            problem_rule = problem_rule.with_route(self.nuclear_route)
        if rule is None or problem_rule is None:
            raise ConfigError(
                f"backend.device {self.device_name!r}: no device program for algorithm "
                f"{algorithm.name!r} on problem {self.problem.name!r} (it needs a rule of both: "
                "Algorithm.rule, Problem.rule; docs/custom_rules.md), or use backend.device: cpu")
        shared_hp = {f: v for f, v in algorithm.hp.model_dump().items() if not isinstance(v, float)}
        key = (type(algorithm), repr(sorted(shared_hp.items())), shared)  # real values come as arrays
        if key not in self.compiled:
            from ...rules.rounds import compile_rounds

            if self.data is None:
                self.data = self.put({k: np.asarray(v) for k, v in problem_rule.arrays().items()})
            self.compiled[key] = (rule, problem_rule, compile_rounds(rule, problem_rule, shared))
        return self.compiled[key]

    def _check_memory(self, group, problem_rule, clients: int) -> None:
        key = (group.size, clients)
        if key in self.checked:
            return
        model = sum(math.prod(s) for s in self.problem.shapes.values())
        message = model * (1 + (group.hp.local_steps if getattr(group.hp, "ergodic", False) else 0))
        data = sum(np.asarray(v).nbytes for v in problem_rule.arrays().values())
        parts = estimate_bytes(data, model, message, group.size, clients)
        total, free = sum(parts.values()), free_bytes(self.device)
        if total > free:
            part, size = max(parts.items(), key=lambda item: item[1])
            raise ConfigError(
                f"backend.device {self.device_name!r}: a group of {group.size} configurations of "
                f"{group.name!r} on {self.problem.name!r} needs about {human(total)} of device "
                f"memory, more than the {human(free)} free; the largest part is {part}: "
                f"{human(size)}. Run smaller groups (run_grid max_group) or fewer clients per round")
        self.checked.add(key)

    # ---- whole rounds --------------------------------------------------------------------
    def run_rounds(self, group, state, seeds: list[int], start: int, stop: int):
        """Rounds start..stop-1 of `group` from `state` (the group's layout); `seeds`: one per
        member. Returns (state, positions of the members that stopped, with the state they
        stopped at inside the returned state)."""
        shared = len(set(seeds)) == 1
        rule, problem_rule, run = self._rules(group, shared)
        g = group.size
        size = 1 << max(0, (g - 1).bit_length())  # padded: fewer compilations as members leave
        rows, weights = [], []
        for rnd in range(start, stop):
            drawn = {s: group.select_clients(s, rnd, self.problem.num_clients) for s in set(seeds)}
            rows.append(np.stack([drawn[s] for s in seeds]))
            weights.append(np.stack([group.client_weights(self.problem, drawn[s]) for s in seeds]))
        rows, weights = np.stack(rows), np.stack(weights)  # (R, G, C)
        self._check_memory(group, problem_rule, rows.shape[-1])
        hyper = {k: _pad(v, size) for k, v in member_hyper(group, problem_rule, seeds).items()}
        seed = hyper.pop("seed")
        if shared:  # one seed, one draw of clients for every member
            seed, rows, weights = seed[0], rows[:, 0], weights[:, 0]
        else:
            rows, weights = _pad(rows.swapaxes(0, 1), size).swapaxes(0, 1), _pad(weights.swapaxes(0, 1), size).swapaxes(0, 1)
        members = {k: _pad_tree(v, size) for k, v in to_members(group, state).items()}
        alive = np.arange(size) < g
        out_state, _, stopped = run(self.put(members), self.put(alive), self.put(np.full(size, -1)),
                                    self.put(hyper), self.put(seed), self.data,
                                    self.put(rows.astype(np.int64)), self.put(weights.astype(np.float64)),
                                    self.put(np.arange(start, stop, dtype=np.int64)))
        out_state = self.jax.tree_util.tree_map(lambda v: np.asarray(v)[:g], out_state)
        stopped = np.asarray(stopped)[:g]
        floats_key = (id(run), rows.shape[-1])
        if floats_key not in self.floats:  # shapes only: once per program and clients per round
            self.floats[floats_key] = self._floats(rule, problem_rule, members, {**hyper, "seed": np.zeros(size, np.uint64)},
                                                   rows.shape[-1])
        floats = self.floats[floats_key]
        return (from_members(group, out_state, state), [int(j) for j in np.flatnonzero(stopped >= 0)],
                floats)

    def _floats(self, rule, problem_rule, members, hyper, clients: int) -> tuple[float, float]:
        """Floats a member's round sends up (its clients' messages) and down (the broadcast
        to each client), from the shapes of the rule's broadcast and client message."""
        from ...rules.problems import Client

        jax = self.jax
        one = jax.tree_util.tree_map(lambda v: v[0], members)
        own = {k: v[0] for k, v in hyper.items()}
        me = Client(np.uint64(0), np.uint64(0), np.uint64(0), np.int64(1), np.int64(0))
        payload = jax.eval_shape(rule.broadcast, one)
        message = jax.eval_shape(lambda st, hy: rule.client(problem_rule, self.data, rule.broadcast(st), hy, me),
                                 one, own)
        count = lambda tree: sum(math.prod(v.shape) for v in jax.tree_util.tree_leaves(tree))  # noqa: E731
        return float(count(message) * clients), float(count(payload) * clients)


def member_hyper(group, problem_rule, seeds: list[int]) -> dict[str, np.ndarray]:
    """The `hyper` of the members' rules: every real-valued hyperparameter (one value per
    member, whether or not it varies: a rule reads them all from here), psi's weight `lam`
    (each member's own) and the seed."""
    fields = group.hp.real_fields()
    hyper = {f: np.array([np.nan if getattr(m.hp, f) is None else getattr(m.hp, f) for m in group.members],
                         float) for f in fields}
    lams = group.lams if group.lams is not None else [problem_rule.lam] * group.size
    return {**hyper, "lam": np.asarray(lams, float), "seed": np.asarray(seeds, np.uint64)}


def _pad_tree(tree, size: int):
    if isinstance(tree, dict):
        return {k: _pad_tree(v, size) for k, v in tree.items()}
    return _pad(tree, size)


def to_members(group, state) -> dict:
    """The group's state with every leaf on a leading member axis (G, ...): a stacked group's
    arrays already are; its numbers shared by the members, and a single run's leaves, get one."""
    g = group.size

    def lift(v):
        if isinstance(v, dict):
            return {k: lift(x) for k, x in v.items()}
        v = np.asarray(v)
        if group.stacked and v.ndim:
            return v
        return np.broadcast_to(v, (g,) + v.shape).copy()

    return lift(state)


def from_members(group, arrays, template):
    """Member-axis arrays back in the group's layout, following `template` (the state the
    rounds started from): a number stays a number where every member has the same value."""

    def drop(v, t):
        if isinstance(t, dict):
            return {k: drop(v[k], t[k]) for k in t}
        number = np.ndim(t) == 0 and not isinstance(t, np.ndarray)
        if not group.stacked:
            return type(t)(v[0].item()) if number else v[0]
        return type(t)(v[0].item()) if number and np.all(v == v[0]) else v

    return drop(arrays, template)
