"""In-process backend: the sampled clients' local steps as stacked NumPy computations."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..ops.random import Key
from ..runtime.heap import keep_freed_memory

#: Minibatch bytes that one block of stacked clients gathers per local step. A block whose
#: step data fits in the L2/L3 caches keeps the gathered batch in cache between the gather
#: and the passes over it (residuals, then gradient); one stack of thousands of clients
#: streams every pass through memory and pays page faults for each fresh array. On the
#: 2-core benchmark machine (1 MiB L2, 32 MiB L3) 2-5 MiB blocks were 1.5-3x faster than
#: 1000-client stacks (benchmarks/README.md).
BLOCK_BYTES = 3 << 20
MIN_BLOCK = 8  # below this the per-block Python overhead outweighs the cache gain


def block_size(algorithm, problem) -> int:
    """Clients per block: BLOCK_BYTES / (batch_size x bytes of one sample), at least MIN_BLOCK.
    A `presummed` algorithm streams its clients itself: one block. A group of G members
    (`fco_ray.core.group`) reads each client's minibatch once for its G rows and keeps G models
    per client: they count too."""
    train = problem.train
    if algorithm.presummed:
        return max(1, train.num_clients)
    batch = algorithm.hp.minibatch or train.max_samples
    group = algorithm.size
    per_client = batch * train.bytes_per_sample
    if group > 1:
        per_client += group * 8 * sum(math.prod(s) for s in problem.shapes.values())
    return max(1 if per_client * MIN_BLOCK > BLOCK_BYTES else MIN_BLOCK,
               int(BLOCK_BYTES // max(1, per_client)))


class RuleClients:
    """How a group written as its rule runs its clients here: a registered accelerator of the
    (rule, problem) pair where the record finds it faster (`fco_ray.accelerators`), else the
    rule compiled (`fco_ray.rules.host.Programs`, made at the first such group: JAX is
    imported only then). Owned by one executor (the local backend, a Ray actor)."""

    def __init__(self):
        self.compiled = None
        self.chosen: dict = {}  # (algorithm class, settings, problem id) -> accelerator or None
        self.last = None  # (group, problem, program, accelerator) of the last call

    def client_sums(self, group, problem, payload, rows, key) -> dict:
        """The weighted sum over the clients `rows` of every member's client message."""
        weights = group.client_weights(problem, rows)
        if self.last is None or self.last[0] is not group or self.last[1] is not problem:
            self.last = (group, problem, *self._choose(group, problem))
        _, _, program, accelerator = self.last
        if accelerator is not None:
            return accelerator.client_sums(group, problem, payload, rows, key, weights)
        return program.client_sums(payload, group.rule_hyper(program.problem_rule.lam), key.seed,
                                   key.round, key.client_ids, rows, weights)

    def _choose(self, group, problem) -> tuple:
        """(the compiled rule of `group` on `problem`, the accelerator chosen for it or None)."""
        if self.compiled is None:
            from ..rules.host import Programs as Compiled

            self.compiled = Compiled()
        program = self.compiled.get(group, problem)
        choice = (group.cls, group.rule_key(), group.size, id(problem))
        if choice not in self.chosen:
            from ..accelerators import choose

            self.chosen[choice] = choose(group, problem, program.problem_rule)
        return program, self.chosen[choice]


class ClientStates:
    """The per-client state of one run (`Algorithm.client_state`), by local client row:
    made by the algorithm at a client's first round, replaced after every round."""

    def __init__(self):
        self.by_row: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.by_row)

    def take(self, algorithm, problem, rows: np.ndarray) -> list:
        new = [int(r) for r in rows if int(r) not in self.by_row]
        if new:
            self.by_row.update(zip(new, algorithm.init_client_state(problem, np.array(new, np.int64))))
        return [self.by_row[int(r)] for r in rows]

    def put(self, rows: np.ndarray, states: list) -> None:
        if len(states) != len(rows):
            raise ValueError(f"client_update returned {len(states)} client states for {len(rows)} clients")
        self.by_row.update(zip((int(r) for r in rows), states))


def weighted_sum(algorithm, problem, payload, rows, key: Key,
                 states: ClientStates | None = None, programs=None) -> tuple[dict, float]:
    """Sum over the clients `rows` of weight * message (the shard-level pre-aggregation),
    computed block by block (see BLOCK_BYTES). Client randomness is keyed by client id,
    so blocking changes nothing but the order of the final sum. `states`: the run's client
    states, for an algorithm with `client_state`; `programs`: the executor's compiled rules
    (`RuleClients`), for a group that runs its rule (`runs_rule`: all its clients in one call)."""
    rows = np.asarray(rows)
    ids = np.asarray(key.client_ids)
    if getattr(algorithm, "runs_rule", False):
        sums = algorithm.client_update(problem, payload, rows, key, programs)
        return sums, float(algorithm.client_weights(problem, rows).sum())
    if algorithm.client_state and states is None:
        raise ValueError(f"algorithm {algorithm.name!r} keeps client state: pass the run's ClientStates")
    # blocks of about block_size clients, of equal sizes (10 clients with a block size of 9
    # make one block, not 9 + 1); no rows: one empty block, as before blocking
    n = len(rows)
    blocks = max(1, round(n / block_size(algorithm, problem)))
    parts = []
    for i in range(blocks):
        part = slice(i * n // blocks, (i + 1) * n // blocks)
        block_key = dataclasses.replace(key, client_ids=ids[part])
        if algorithm.client_state:
            messages, new = algorithm.client_update(problem, payload, rows[part], block_key,
                                                    states.take(algorithm, problem, rows[part]))
            states.put(rows[part], new)
        else:
            messages = algorithm.client_update(problem, payload, rows[part], block_key)
        weights = algorithm.client_weights(problem, rows[part])
        if not algorithm.presummed:
            messages = {k: _weighted(weights, v) for k, v in messages.items()}
        parts.append((messages, float(weights.sum())))
    return add_sums(parts)


def _weighted(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """sum_c weights[c] * v[c] as one matrix-vector product (np.tensordot has more
    Python overhead for these small stacks)."""
    v = np.asarray(v)
    return (weights @ v.reshape(len(weights), -1)).reshape(v.shape[1:])


def add_sums(parts: list[tuple[dict, float]]) -> tuple[dict, float]:
    total = dict(parts[0][0])
    for sums, _ in parts[1:]:
        for k, v in sums.items():
            total[k] = total[k] + v
    return total, sum(w for _, w in parts)


class LocalBackend:
    """All clients live in this process. `chunk_size` bounds the clients stacked at once
    (memory), without changing results beyond summation order."""

    name = "local"
    compiles_rounds = False  # the engine runs each round (fco_ray.backends.base)

    def __init__(self, problem, chunk_size: int = 1024):
        keep_freed_memory()  # client steps run in this process (fco_ray/runtime/heap.py)
        self.problem = problem
        self.chunk_size = chunk_size
        self.states = ClientStates()  # client state of the current run
        self.programs = RuleClients()  # how a rule's clients run here (fco_ray.rules.host)

    def start_run(self) -> None:
        """A new run begins: client state of an earlier run on this backend is dropped."""
        self.states = ClientStates()

    def map_clients(self, algorithm, payload, client_ids: np.ndarray, key: Key) -> tuple[dict, float]:
        parts = []
        for start in range(0, len(client_ids), self.chunk_size):
            ids = client_ids[start:start + self.chunk_size]
            parts.append(weighted_sum(algorithm, self.problem, payload, ids,
                                      Key(key.seed, key.round, ids), self.states, self.programs))
        return add_sums(parts)

    def close(self):
        self.states = ClientStates()
        self.programs = RuleClients()


def make_local(config, problem):
    """The `local` backend's factory (fco_ray.backends.registry): the NumPy engine, or with a
    device other than cpu whole rounds compiled with JAX (fco_ray/backends/device). `auto`
    is decided before (`LocalBackendConfig.for_work`); here it is the NumPy engine."""
    if config.device not in ("auto", "cpu"):
        from .device.backend import DeviceBackend

        return DeviceBackend(problem, config.device, config.nuclear_route)
    return LocalBackend(problem, chunk_size=config.chunk_size)
