"""Ray backend: long-lived actors, each owning a contiguous shard of the training clients.

The shard's data `problem.subset(rows)` is shipped to its actor once, at creation (the
driver process keeps only its object-store ref, for restarts), and never leaves it. Per
round the driver sends the broadcast payload (inline with each call up to INLINE_BYTES,
else put in the object store once) to every actor that owns sampled clients, with their
global ids; the actor returns its shard's pre-summed
message

    S_a = sum_{m in sampled, m in shard a} p_m * message_m,    W_a = sum p_m

(computed by `weighted_sum`, chunk by chunk), and the driver adds them: sum_a S_a, sum_a W_a.
Client randomness is keyed by the global client id (`Key(seed, round, ids)`), so the result
equals the local backend's up to floating-point summation order, for any number of actors.

Faults: an actor whose process dies (killed, out of memory, node lost) is restarted by Ray
(`max_restarts`) in the same placement-group bundle; its constructor rebuilds the shard from
the data the backend keeps in the object store (`ray.put`, one ref per shard), and Ray
resubmits the interrupted call (`max_task_retries`). The algorithm travels by reference with
every call, so a fresh actor fetches it itself. A call is a pure function of (algorithm,
shard data, payload, ids, seed, round), so the redone round equals an undisturbed one.
The exception is client state (`Algorithm.client_state`, e.g. CoCoA+ duals), which each
actor keeps in its own store next to its shard, keyed by the backend's run token (dropped
when the next run starts or the backend closes): a restart loses it, and the backend
raises instead of continuing with wrong numbers.
An actor ended on purpose (`ray.kill`) or out of restarts is an error (RuntimeError).

Resources: inside a Ray Tune trial that reserved a placement group (see `fco_ray.sweep.trainable.trial_bundles`),
actor i runs in the trial's bundle i + 1 (bundle 0 is the trial itself). Otherwise the
backend reserves its own placement group of `actors` bundles {"CPU": cpus_per_actor}
(strategy SPREAD or PACK) and releases it in `close()`.
"""
from __future__ import annotations

import os
import time
import uuid

import numpy as np
import ray
from ray import cloudpickle
from ray.util.placement_group import (
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .. import cluster
from ..random import Key
from .local import ClientStates, add_sums, weighted_sum

STRATEGIES = {"spread": "SPREAD", "pack": "PACK"}


#: Broadcasts up to this size are sent inline with each actor call instead of through the
#: object store: for E1's 8 KB payload a `ray.put` per round cost more than the call itself
#: (benchmarks/README.md). Ray's own limit for inlining task arguments is 100 KiB.
INLINE_BYTES = 64 * 1024


#: Rounds whose busiest actor computes for less than SMALL_ROUND_S go through a compiled
#: Ray graph (`ray.dag`, shared-memory channels) after SMALL_ROUNDS such rounds in a row:
#: a round trip to 2 actors costs 0.6-0.9 ms there instead of 1.2-2.4 ms for two actor
#: calls (load ~9 on the 2-core benchmark machine, benchmarks/results/ray_round.md). The
#: graph's readers poll: the driver burns its core while it waits and an idle actor about a
#: quarter of one, so rounds with more work than LARGE_ROUND_S go back to plain calls
#: (their call overhead is small beside the work, and the cores are the actors').
SMALL_ROUND_S, LARGE_ROUND_S, SMALL_ROUNDS = 0.02, 0.1, 2
#: How long the driver waits for a compiled round (Ray's default is 10 s); an actor that
#: dies mid-round is noticed by Ray within seconds and the round is redone by plain calls.
COMPILED_GET_TIMEOUT_S = 24 * 3600.0


def _nbytes(tree) -> int:
    """Bytes of the arrays in a (nested) dict / tuple of arrays and scalars."""
    if isinstance(tree, dict):
        return sum(_nbytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_nbytes(v) for v in tree)
    return int(np.asarray(tree).nbytes)


class ShardWorker:
    """The client shard held by one actor: its data plus global client id -> local row.

    `shard_ref`: [object ref of the shard's Problem]; wrapped in a list so that Ray passes
    the ref itself, which the backend keeps alive: a restarted actor reads it again."""

    def __init__(self, shard_ref: list, client_ids: np.ndarray, chunk_size: int):
        (ref,) = shard_ref
        self.problem = ray.get(ref)
        self.client_ids = np.asarray(client_ids)  # sorted global ids; local row = position
        self.chunk_size = chunk_size
        self.algorithm, self.algorithm_id = None, None  # the algorithm and its pickle / ref id
        self.received = 0  # bytes of the last round's arguments (payload + ids)
        self.states: dict[str, ClientStates] = {}  # run token -> its client states

    def _use(self, algorithm) -> None:
        """Load the algorithm when it is new to this actor (also after a restart).
        `algorithm`: its pickle (bytes, sent with every call: comparing a few KB costs
        nothing, while an object ref in the arguments costs Ray a borrower round trip per
        call) or, for a large one, [object ref] (wrapped so that Ray passes the ref)."""
        if isinstance(algorithm, bytes):
            if algorithm != self.algorithm_id:
                self.algorithm, self.algorithm_id = cloudpickle.loads(algorithm), algorithm
            return
        (ref,) = algorithm
        if ref.hex() != self.algorithm_id:
            self.algorithm, self.algorithm_id = ray.get(ref), ref.hex()

    def holds_state(self, run: str) -> bool:
        """Whether this actor holds client state of run `run` (a restarted actor has none)."""
        return len(self.states.get(run, ())) > 0

    def end_run(self, run: str) -> None:
        """Drop the client state of run `run`."""
        self.states.pop(run, None)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Local rows of the global client ids `ids` (all must be on this shard)."""
        rows = np.minimum(np.searchsorted(self.client_ids, ids), len(self.client_ids) - 1)
        bad = self.client_ids[rows] != ids
        if np.any(bad):
            raise ValueError(f"clients {ids[bad].tolist()} are not on this shard "
                             f"(ids {self.client_ids[0]}..{self.client_ids[-1]})")
        return rows

    def map_clients(self, algorithm, payload: dict, ids: np.ndarray, seed: int,
                    rnd: int, run: str) -> tuple[dict, float, int, bool, float]:
        """sum_m p_m * message_m over this shard's clients `ids` (global), in chunks; plus
        this process's pid, whether it now holds client state of run `run` (see
        `RayBackend._check_restarts`) and the seconds the call computed."""
        began = time.perf_counter()
        self._use(algorithm)
        self.received = _nbytes(payload) + _nbytes(ids)
        rows = self.rows(ids)
        states = self.states.setdefault(run, ClientStates()) if self.algorithm.client_state else None
        parts = []
        for start in range(0, len(ids), self.chunk_size):
            chunk = slice(start, start + self.chunk_size)
            parts.append(weighted_sum(self.algorithm, self.problem, payload, rows[chunk],
                                      Key(seed, rnd, ids[chunk]), states))
        sums, weight = add_sums(parts)
        return sums, weight, os.getpid(), self.holds_state(run), time.perf_counter() - began

    def map_round(self, args: tuple, index: int):
        """`map_clients` inside the compiled graph: `args` = (algorithm, payload, seed,
        round, run, ids of actor 0, ids of actor 1, ...); None if no client is this actor's."""
        algorithm, payload, seed, rnd, run, *ids = args
        if len(ids[index]) == 0:
            return None
        return self.map_clients(algorithm, payload, ids[index], seed, rnd, run)

    def stats(self) -> dict:
        """What this actor holds: its clients, the bytes of their data, where it runs."""
        context = ray.get_runtime_context()
        return {
            "clients": len(self.client_ids),
            "data_bytes": _nbytes(self.problem.train.arrays) + self.problem.train.sizes.nbytes,
            "received_bytes": self.received,
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "placement_group_id": context.get_placement_group_id(),
        }


#: restarts of one actor whose process died (each redoes the interrupted call)
MAX_RESTARTS = 3
ShardActor = ray.remote(ShardWorker)


class RayBackend:
    """Client work on `actors` long-lived Ray actors (see the module docstring).

    `placement_timeout_s`: how long to wait for the cluster to grant the actors' CPUs
    before giving up with an error that says what was needed. `max_restarts`: how often
    each actor may be restarted after its process died (0: a dead actor is an error).
    `address`: the Ray cluster to join (host:port or ray://...; default $RAY_ADDRESS, else
    a new local cluster on loopback; see `fco_ray.cluster.connect`). Ignored when this
    process is already connected to Ray (e.g. inside a Tune trial).
    """

    name = "ray"

    def __init__(self, problem, actors: int = 2, cpus_per_actor: float = 1.0,
                 placement: str = "spread", chunk_size: int = 1024,
                 placement_timeout_s: float = 120.0, max_restarts: int = MAX_RESTARTS,
                 address: str | None = None):
        if placement not in STRATEGIES:
            raise ValueError(f"backend.placement must be one of {sorted(STRATEGIES)}, got {placement!r}")
        for key, value, low in (("actors", actors, 1), ("chunk_size", chunk_size, 1)):
            if value < low:
                raise ValueError(f"backend.{key} must be >= {low}, got {value!r}")
        if not cpus_per_actor > 0:
            raise ValueError(f"backend.cpus_per_actor must be > 0, got {cpus_per_actor!r}")
        # exactly the cluster named by `address` / $RAY_ADDRESS, else a new private local
        # one (never whichever cluster happens to run here): fco_ray/cluster.py
        self._connection = cluster.connect(address)
        self.started_ray = self._connection.initialized
        self.num_clients = problem.num_clients
        n = min(actors, self.num_clients)
        self.own_pg = None
        self.actors = []
        self._algorithm = self._algorithm_arg = None
        self._dag, self._small, self._plain_only = None, 0, False  # see _route
        self._seen: dict[int, tuple[int, bool]] = {}  # actor -> (pid, held state) at its last call
        self.run = uuid.uuid4().hex  # token of the current run's client state on the actors
        try:
            strategies = self._placement(n, cpus_per_actor, STRATEGIES[placement], placement_timeout_s)
            shards = np.array_split(np.arange(self.num_clients), n)
            self.starts = np.array([s[0] for s in shards])
            # kept for the actors' lifetime: a restarted actor rebuilds its shard from it
            self._shards = [ray.put(problem.subset(ids)) for ids in shards]
            retries = {"max_restarts": max_restarts, "max_task_retries": max_restarts}
            self.actors = [
                ShardActor.options(num_cpus=cpus_per_actor, scheduling_strategy=strategy, **retries)
                .remote([shard], ids, chunk_size)
                for shard, ids, strategy in zip(self._shards, shards, strategies)
            ]
        except BaseException:
            self.close()
            raise

    def _placement(self, n: int, cpus: float, strategy: str, timeout: float):
        """Scheduling strategies of the n actors: the enclosing trial's bundles 1..n, or
        the bundles of a placement group of our own."""
        pg = get_current_placement_group()
        if pg is not None:
            specs = pg.bundle_specs
            if len(specs) < n + 1 or any(s.get("CPU", 0) < cpus for s in specs[1:n + 1]):
                raise RuntimeError(
                    f"the enclosing placement group has bundles {specs}; the ray backend needs "
                    f"bundle 0 for the trial plus {n} bundles with >= {cpus} CPU (see fco_ray.sweep.trainable.trial_bundles)")
            return [PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i + 1)
                    for i in range(n)]
        self.own_pg = placement_group([{"CPU": cpus}] * n, strategy=strategy)
        if not self.own_pg.wait(timeout_seconds=timeout):
            total = ray.cluster_resources().get("CPU", 0.0)
            free = ray.available_resources().get("CPU", 0.0)
            raise RuntimeError(
                f"the Ray cluster cannot host the ray backend within {timeout:g} s: it needs "
                f"{n} actors x {cpus:g} CPU = {n * cpus:g} CPUs ({strategy}), the cluster has "
                f"{total:g} CPUs ({free:g} available); lower backend.actors or "
                f"backend.cpus_per_actor, or add nodes")
        return [PlacementGroupSchedulingStrategy(self.own_pg, placement_group_bundle_index=i)
                for i in range(n)]

    def start_run(self) -> None:
        """A new run begins: the actors drop the previous run's client state."""
        if any(held for _, held in self._seen.values()):
            self._get([actor.end_run.remote(self.run) for actor in self.actors])
        self.run, self._seen = uuid.uuid4().hex, {}

    def map_clients(self, algorithm, payload, client_ids: np.ndarray, key: Key) -> tuple[dict, float]:
        """sum_m p_m * message_m and sum_m p_m over the clients `client_ids`, shard by shard."""
        ids = np.asarray(client_ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_clients):
            raise ValueError(f"client ids must be in [0, {self.num_clients}), got {ids.min()}..{ids.max()}")
        if algorithm is not self._algorithm:  # a new algorithm object: pickle it once
            blob = cloudpickle.dumps(algorithm)
            # a large one goes to the object store once (the actors fetch it by ref)
            self._algorithm_arg = blob if len(blob) <= INLINE_BYTES else [ray.put(algorithm)]
            self._algorithm = algorithm
        owner = np.searchsorted(self.starts, ids, side="right") - 1
        per_actor = [ids[owner == a] for a in range(len(self.actors))]
        called = [a for a in range(len(self.actors)) if len(per_actor[a])]
        results = None
        if self._dag is not None:  # the graph writes the payload once to shared memory
            results = self._compiled_round(payload, per_actor, key)
        if results is None:
            # a small payload travels inside each call; a large one goes to the object
            # store once and every actor reads it from there
            shared = payload if _nbytes(payload) <= INLINE_BYTES else ray.put(payload)
            calls = [self.actors[a].map_clients.remote(self._algorithm_arg, shared, per_actor[a],
                                                       key.seed, key.round, self.run)
                     for a in called]
            results = self._get(calls)
        self._check_restarts(called, results)
        self._route(max(r[4] for r in results))
        sums, weight = add_sums([(r[0], r[1]) for r in results])
        return {k: np.array(v) for k, v in sums.items()}, weight  # own (writable) arrays

    # -- the compiled graph for small rounds (see SMALL_ROUND_S) ------------------------------
    def _route(self, seconds: float) -> None:
        """After a round whose busiest actor computed `seconds`: move small rounds onto the
        compiled graph, heavy ones back to plain calls (one way: a run that had heavy
        rounds stays on plain calls)."""
        if self._dag is not None:
            if seconds > LARGE_ROUND_S:
                self._teardown(plain_only=True)
            return
        self._small = self._small + 1 if seconds < SMALL_ROUND_S else 0
        if self._small >= SMALL_ROUNDS and not self._plain_only:
            self._compile()

    def _compile(self) -> None:
        from ray.dag import InputNode, MultiOutputNode

        try:
            with InputNode() as args:
                graph = MultiOutputNode([actor.map_round.bind(args, i)
                                         for i, actor in enumerate(self.actors)])
            self._dag = graph.experimental_compile(_submit_timeout=COMPILED_GET_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - not supported here (e.g. an old or remote setup)
            self._dag, self._plain_only = None, True

    def _compiled_round(self, payload, per_actor: list, key: Key) -> list | None:
        """The round's results through the compiled graph, or None when the graph broke
        (an actor died: Ray restarts it, and the caller redoes the round by plain calls,
        which wait for the restart)."""
        try:
            out = ray.get(self._dag.execute((self._algorithm_arg, payload, key.seed, key.round,
                                             self.run, *per_actor)),
                          timeout=COMPILED_GET_TIMEOUT_S)
        except ray.exceptions.RayTaskError as e:
            if not isinstance(e, (ray.exceptions.RaySystemError, ray.exceptions.RayActorError)):
                raise  # the client code's own error, as from a plain call
            self._teardown(plain_only=True)
            return None
        except (ray.exceptions.RaySystemError, ray.exceptions.RayActorError,
                ray.exceptions.RayChannelError):
            self._teardown(plain_only=True)
            return None
        return [r for r in out if r is not None]

    def _teardown(self, plain_only: bool = False) -> None:
        dag, self._dag, self._small = self._dag, None, 0
        self._plain_only = self._plain_only or plain_only
        if dag is not None:
            try:
                dag.teardown()
            except Exception:  # noqa: BLE001 - a broken graph may fail its teardown
                pass

    def _check_restarts(self, called: list[int], results: list) -> None:
        """A restarted actor (new pid) redid its call from the shard data alone; that is
        exact unless the old process held client state of this run (then it is lost)."""
        for a, (_, _, pid, state, _) in zip(called, results):
            before = self._seen.get(a)
            if before is not None and before[0] != pid and before[1]:
                raise RuntimeError(
                    f"Ray client actor {a} of the ray backend was restarted (pid {before[0]} -> "
                    f"{pid}) and lost the client state it held (e.g. CoCoA+ duals); this run "
                    "cannot continue exactly (rerun it)")
            self._seen[a] = (pid, state)

    def stats(self) -> list[dict]:
        """Per actor: clients and data bytes held, last round's argument bytes, node, group."""
        return self._get([actor.stats.remote() for actor in self.actors])

    @staticmethod
    def _get(refs):
        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(f"a Ray client actor of the ray backend died: {e}") from e

    def close(self):
        self._teardown()
        for actor in self.actors:
            ray.kill(actor)
        self.actors, self._shards = [], []
        if self.own_pg is not None:
            remove_placement_group(self.own_pg)
            self.own_pg = None
        if self.started_ray:
            cluster.disconnect(self._connection)
        self.started_ray = False
