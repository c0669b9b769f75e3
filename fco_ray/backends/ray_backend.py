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
resubmits the interrupted call (`max_task_retries`). The algorithm travels with every
call (its pickle, made once, a few hundred bytes; a large one by object ref) beside a token
of the driver's object, so a fresh actor has it and a warm one keeps its own copy (and what
it compiled for it) while the token stays. A call and its answer are each one pickle
(plain bytes to Ray: `ShardWorker.map_clients` says why). A call is a pure function of
(algorithm, shard data, payload, ids, seed, round), so the redone round equals an
undisturbed one.
The exception is client state (`Algorithm.client_state`, e.g. CoCoA+ duals), which each
actor keeps in its own store next to its shard, keyed by the backend's run token (dropped
when the next run starts or the backend closes): a restart loses it, and the backend
raises instead of continuing with wrong numbers.
An actor ended on purpose (`ray.kill`) or out of restarts is an error (RuntimeError).

Reuse: inside `fco_ray.backends.cluster.reuse()` a closed backend parks its actors (client state
dropped, CPUs kept) and the next backend on an equal problem (same content: `fingerprint`)
with the same actor settings takes them over: no shards shipped, no actors started, no
warm-up (benchmarks/results/ray_startup.md). Another problem ends the parked actors first.

Resources: inside a Ray Tune trial that reserved a placement group (see `fco_ray.sweep.trainable.trial_bundles`),
actor i runs in the trial's bundle i + 1 (bundle 0 is the trial itself). Otherwise the
backend reserves its own placement group of `actors` bundles {"CPU": cpus_per_actor}
(strategy SPREAD or PACK) and releases it in `close()`.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import uuid
from dataclasses import dataclass

import numpy as np
import ray
from ray import cloudpickle
from ray.util.placement_group import (
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..ops.random import Key
from ..runtime.heap import keep_freed_memory
from . import cluster
from .local import ClientStates, RuleClients, add_sums, weighted_sum

STRATEGIES = {"spread": "SPREAD", "pack": "PACK"}


#: Broadcasts up to this size are sent inline with each actor call instead of through the
#: object store: for E1's 8 KB payload a `ray.put` per round cost more than the call itself
#: (benchmarks/README.md). Ray's own limit for inlining task arguments is 100 KiB.
INLINE_BYTES = 64 * 1024


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
        keep_freed_memory()  # client steps run in this actor (fco_ray/runtime/heap.py)
        (ref,) = shard_ref
        self.problem = ray.get(ref)
        self.client_ids = np.asarray(client_ids)  # sorted global ids; local row = position
        self.chunk_size = chunk_size
        self.algorithm, self.algorithm_id = None, None  # the algorithm and its token
        self.received = 0  # bytes of the last round's arguments (payload + ids)
        self.states: dict[str, ClientStates] = {}  # run token -> its client states
        self.programs = RuleClients()  # the rules compiled in this actor, kept across runs

    def _use(self, token: str, sent) -> None:
        """The algorithm of this call: its pickle (a few hundred bytes, inside the call's
        bytes) or, for a large one, [its object ref] (wrapped so that Ray passes the ref),
        read only when `token` is new to this actor (also after a restart). While the token
        stays the same the actor keeps the object it has, with what it derived from it (its
        compiled rule, an accelerator's thresholds), instead of deriving them again."""
        if token == self.algorithm_id:
            return
        self.algorithm = ray.get(sent[0]) if isinstance(sent, list) else pickle.loads(sent)
        self.algorithm_id = token

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

    def map_clients(self, call: bytes, payload=None, algorithm=None) -> bytes:
        """sum_m p_m * message_m over this shard's clients `ids` (global), in chunks; plus
        this process's pid and whether it now holds client state of run `run` (see
        `RayBackend._check_restarts`), as the pickle of (sums, weight, pid, held).

        `call` is the pickle of (algorithm token, algorithm pickle, payload, ids, seed, rnd,
        run): plain bytes each way, which Ray passes as they are. Arrays handed to Ray
        directly go through its serializer (out-of-band buffers, per-array metadata), which
        cost E1 more than the client work it carried (benchmarks/results/ray_round_one_pickle.md,
        the no-op calls with and without bytes arguments). A large payload comes as its own
        argument (an object ref that Ray resolves), a large algorithm as [object ref]; then
        their places in `call` are None."""
        token, pickled, inline, ids, seed, rnd, run = pickle.loads(call)
        payload = inline if payload is None else payload
        self._use(token, pickled if algorithm is None else algorithm)
        self.received = _nbytes(payload) + _nbytes(ids)
        rows = self.rows(ids)
        states = self.states.setdefault(run, ClientStates()) if self.algorithm.client_state else None
        parts = []
        for start in range(0, len(ids), self.chunk_size):
            chunk = slice(start, start + self.chunk_size)
            parts.append(weighted_sum(self.algorithm, self.problem, payload, rows[chunk],
                                      Key(seed, rnd, ids[chunk]), states, self.programs))
        sums, weight = add_sums(parts)
        return pickle.dumps((sums, weight, os.getpid(), self.holds_state(run)), protocol=5)

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


@dataclass
class _Parked:
    """The actors of a closed backend, kept for the next backend on the same data."""
    key: tuple
    actors: list
    placement_group: object
    shards: list  # the shards' object refs (a restarted actor rebuilds from them)
    starts: np.ndarray
    job: str  # the Ray job they belong to (a new connection has other actors)


#: the parked actors of this process (inside `fco_ray.backends.cluster.reuse()`; at most one set)
_PARKED: list[_Parked] = []


def fingerprint(problem) -> str:
    """SHA-256 of the problem's pickle, its arrays read in place (pickle protocol 5 hands
    them over as buffers, no copy): two problems with this fingerprint hold the same data
    and the same regularizer, so a shard's actors can serve both."""
    buffers = []
    meta = cloudpickle.dumps(problem, protocol=5, buffer_callback=buffers.append)
    digest = hashlib.sha256(meta)
    for buffer in buffers:
        try:
            digest.update(buffer.raw())
        except BufferError:  # not contiguous: a copy
            digest.update(bytes(buffer))
    return digest.hexdigest()


def _job() -> str:
    return ray.get_runtime_context().get_job_id()


def _take_parked(key: tuple) -> _Parked | None:
    """The parked actors for `key` (removed from the pool), or None; parked actors of
    another key are ended (their CPUs are needed now)."""
    found = None
    while _PARKED:
        parked = _PARKED.pop()
        if parked.key == key and parked.job == _job():
            found = parked
        else:
            _end(parked.actors, parked.placement_group, parked.job)
    return found


def _end(actors: list, pg, job: str | None = None) -> None:
    """Kill `actors` and remove their placement group (nothing if their job is gone)."""
    if job is not None and (not ray.is_initialized() or job != _job()):
        return  # a former connection's: they ended with it
    for actor in actors:
        ray.kill(actor)
    if pg is not None:
        remove_placement_group(pg)


def release_parked() -> None:
    """End the parked actors (at the end of `fco_ray.backends.cluster.reuse()`)."""
    while _PARKED:
        parked = _PARKED.pop()
        _end(parked.actors, parked.placement_group, parked.job)


class RayBackend:
    """Client work on `actors` long-lived Ray actors (see the module docstring).

    `placement_timeout_s`: how long to wait for the cluster to grant the actors' CPUs
    before giving up with an error that says what was needed. `max_restarts`: how often
    each actor may be restarted after its process died (0: a dead actor is an error).
    `address`: the Ray cluster to join (host:port or ray://...; default $RAY_ADDRESS, else
    a new local cluster on loopback; see `fco_ray.backends.cluster.connect`). Ignored when this
    process is already connected to Ray (e.g. inside a Tune trial).
    """

    name = "ray"
    compiles_rounds = False  # the engine runs each round (fco_ray.backends.base)

    def __init__(self, problem, actors: int = 2, cpus_per_actor: float = 1.0,
                 placement: str = "spread", chunk_size: int = 1024,
                 placement_timeout_s: float = 120.0, max_restarts: int = MAX_RESTARTS,
                 address: str | None = None):
        # the settings were validated with the config (RayBackendConfig), at the edge
        # exactly the cluster named by `address` / $RAY_ADDRESS, else a new private local
        # one (never whichever cluster happens to run here): fco_ray/backends/cluster.py
        self._connection = cluster.connect(address)
        self.started_ray = self._connection.initialized
        self.num_clients = problem.num_clients
        n = min(actors, self.num_clients)
        self.own_pg = None
        self.actors = []
        self._algorithm = self._algorithm_arg = None
        self._seen: dict[int, tuple[int, bool]] = {}  # actor -> (pid, held state) at its last call
        self.run = uuid.uuid4().hex  # token of the current run's client state on the actors
        self._reuse_key, self._broken, self.reused = None, False, False
        if cluster.reusing() and not self.started_ray and get_current_placement_group() is None:
            # inside `fco_ray.backends.cluster.reuse()`: the actors of an earlier backend on the same
            # data and settings serve this one (no shards shipped, no actors started)
            self._reuse_key = (fingerprint(problem), n, float(cpus_per_actor), placement,
                               chunk_size, max_restarts)
            parked = _take_parked(self._reuse_key)
            if parked is not None:
                self.actors, self.own_pg = parked.actors, parked.placement_group
                self._shards, self.starts, self.reused = parked.shards, parked.starts, True
                return
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
            self._broken = True
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
        if algorithm is not self._algorithm:  # a new algorithm object: pickled once, a new token
            pickled = cloudpickle.dumps(algorithm)  # by value: a user's class in __main__ too
            # a large one goes to the object store once (the actors fetch it by ref)
            self._algorithm_arg = ((uuid.uuid4().hex, pickled, None) if len(pickled) <= INLINE_BYTES
                                   else (uuid.uuid4().hex, None, [ray.put(algorithm)]))
            self._algorithm = algorithm
        token, pickled, large_algorithm = self._algorithm_arg
        owner = np.searchsorted(self.starts, ids, side="right") - 1
        per_actor = [ids[owner == a] for a in range(len(self.actors))]
        called = [a for a in range(len(self.actors)) if len(per_actor[a])]
        # a small payload travels inside each call; a large one goes to the object store
        # once and every actor reads it from there
        inline, shared = (payload, None) if _nbytes(payload) <= INLINE_BYTES else (None, ray.put(payload))
        by_ref = () if shared is None and large_algorithm is None else (shared, large_algorithm)
        calls = [self.actors[a].map_clients.remote(
                     pickle.dumps((token, pickled, inline, per_actor[a], key.seed, key.round, self.run),
                                  protocol=5), *by_ref)  # one argument unless something is large
                 for a in called]
        results = [pickle.loads(r) for r in self._get(calls)]
        self._check_restarts(called, results)
        sums, weight = add_sums([(s, w) for s, w, _, _ in results])
        return sums, weight  # unpickled here: own (writable) arrays

    def _check_restarts(self, called: list[int], results: list) -> None:
        """A restarted actor (new pid) redid its call from the shard data alone; that is
        exact unless the old process held client state of this run (then it is lost)."""
        for a, (_, _, pid, state) in zip(called, results):
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

    def _get(self, refs):
        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError as e:
            self._broken = True  # never parked for reuse
            raise RuntimeError(f"a Ray client actor of the ray backend died: {e}") from e

    def close(self):
        if (self._reuse_key is not None and self.actors and not self._broken
                and cluster.reusing() and ray.is_initialized()):
            # park the actors for the next backend on the same data (their client state of
            # this run is dropped; the next run gets a new token anyway)
            for actor in self.actors:
                actor.end_run.remote(self.run)
            _PARKED.append(_Parked(self._reuse_key, self.actors, self.own_pg, self._shards,
                                   self.starts, _job()))
        else:
            _end(self.actors, self.own_pg)
        self.actors, self._shards, self.own_pg = [], [], None
        if self.started_ray:
            cluster.disconnect(self._connection)
        self.started_ray = False


def make_ray(config, problem) -> RayBackend:
    """The `ray` backend's factory (fco_ray.backends.registry), from its validated config."""
    return RayBackend(problem, actors=config.actors, cpus_per_actor=config.cpus_per_actor,
                      placement=config.placement, chunk_size=config.chunk_size,
                      address=config.address)
