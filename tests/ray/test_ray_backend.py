"""Ray backend: same metrics as the local backend, data stays on the actors, placement."""
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

ray = pytest.importorskip("ray")
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.api import resolve  # noqa: E402
from fco_ray.backends import LocalBackend, make_backend  # noqa: E402
from fco_ray.backends.ray_backend import RayBackend  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from fco_ray.core.group import make_group  # noqa: E402
from fco_ray.core.plan import build as make_problem  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.sweep.trainable import trial_bundles  # noqa: E402

from tests.cluster_process import ClusterProcess  # noqa: E402
from tests.helpers import run_one  # noqa: E402

pytestmark = pytest.mark.ray

E1 = {"name": "lasso", "clients": 16, "dim": 64, "samples_per_client": 32, "support": 8,
      "val_clients": 4}
# unequal client sizes + sample weighting: the actor must weight by its *local* rows' sizes
E2 = {"name": "lowrank", "clients": 16, "dim": 8, "rank": 3, "val_clients": 4,
      "samples_per_client": [20 + 3 * i for i in range(16)]}


def config(problem, algorithm, backend, **algo):
    hyper = {"name": algorithm, "client_lr": 0.01, "local_steps": 5, "batch_size": 8,
             "clients_per_round": 6, **algo}
    return {"problem": problem, "algorithm": hyper, "rounds": 30, "eval_every": 10, "seed": 3,
            "backend": backend}


def assert_same(ray_df: pd.DataFrame, local_df: pd.DataFrame):
    assert list(ray_df.columns) == list(local_df.columns) and len(ray_df) == len(local_df) == 4
    np.testing.assert_allclose(ray_df.to_numpy(float), local_df.to_numpy(float), rtol=1e-9, atol=0)
    # the runs did something: the objective moved
    assert local_df["train_loss"].iloc[-1] < 0.9 * local_df["train_loss"].iloc[0]


@pytest.fixture(scope="module")
def cluster(local_ray):
    """Two raylets on this machine: a head with 1 CPU and a worker node with 2 CPUs."""
    local_ray.down()
    c = ClusterProcess(head_cpus=1)
    c.add_node(num_cpus=2)
    yield c
    c.shutdown()


def run_both(problem, algorithm_name, hyper, backend, rounds=30, eval_every=10, seed=3):
    """Records of `run_rounds` on the ray backend and on the local one."""
    algorithm = ALGORITHMS[algorithm_name](hyper)
    run = dict(rounds=rounds, eval_every=eval_every, seed=seed)
    local = run_one(problem, algorithm, LocalBackend(problem), **run)
    remote = run_one(problem, algorithm, backend, **run)
    assert remote.status == local.status == "finished"
    return pd.DataFrame(remote.records), pd.DataFrame(local.records)


@pytest.mark.parametrize("problem", [E1, E2], ids=["E1", "E2"])
@pytest.mark.parametrize("actors", [1, 3, "per_client"])
def test_matches_local(cluster, problem, actors):
    per_round = 3
    if actors == "per_client":  # one client per actor: a smaller federation, 2 of 3 per round
        actors, per_round = 3, 2
        problem = {**problem, "clients": 3}
        if isinstance(problem.get("samples_per_client"), list):
            problem["samples_per_client"] = problem["samples_per_client"][:3]
    weighting = "samples" if problem["name"] == "lowrank" else "uniform"
    cfg = resolve(config(problem, "feddualavg", {"name": "local"}, weighting=weighting,
                         clients_per_round=per_round))
    problem = make_problem(cfg)
    backend = make_backend({"name": "ray", "actors": actors, "cpus_per_actor": 0.25,
                            "placement": "spread", "chunk_size": 2}, problem)
    try:
        assert len(backend.actors) == actors
        # one backend, two algorithm objects: the second one must reach the actors too
        for name in ("feddualavg", "fedmid"):
            hyper = ALGORITHMS[name].Hyper(**{**cfg.algorithm.model_dump(), "name": name})
            assert_same(*run_both(problem, name, hyper, backend))
    finally:
        backend.close()


def test_run_api_with_ray_backend(cluster):
    backend = {"name": "ray", "actors": 2, "cpus_per_actor": 0.5}
    local = fco_ray.run(config(E2, "fedmid", {"name": "local"}))
    remote = fco_ray.run(config(E2, "fedmid", backend))
    assert remote.attrs["config"]["backend"]["name"] == "ray"
    assert remote.attrs["status"] == local.attrs["status"] == "finished"
    assert_same(remote, local)
    assert ray.is_initialized()  # the backend closed only what it started


def node_of_actors(backend):
    return [s["node_id"] for s in backend.stats()]


@pytest.mark.parametrize("placement", ["spread", "pack"])
def test_two_node_placement(cluster, placement):
    cfg = resolve(config(E1, "feddualavg", {"name": "local"}))
    problem = make_problem(cfg)
    backend = make_backend({"name": "ray", "actors": 2, "cpus_per_actor": 0.5,
                            "placement": placement, "chunk_size": 1024}, problem)
    try:
        nodes = node_of_actors(backend)
        remote, local = run_both(problem, "feddualavg", cfg.algorithm, backend)
    finally:
        backend.close()
    all_nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert set(nodes) <= all_nodes and len(all_nodes) == 2
    assert len(set(nodes)) == (2 if placement == "spread" else 1)
    assert_same(remote, local)


def test_data_stays_on_actors_and_dead_actors_raise(cluster):
    cfg = resolve(config(E1, "fedmid", {"name": "local"}))
    problem = make_problem(cfg)
    backend = RayBackend(problem, actors=3, cpus_per_actor=0.25)
    try:
        assert not hasattr(backend, "problem")  # the driver side keeps no training data
        stats = backend.stats()
        assert [s["clients"] for s in stats] == [6, 5, 5]  # contiguous shards of 16 clients
        data_bytes = sum(a.nbytes for a in problem.train.arrays.values()) + problem.train.sizes.nbytes
        assert sum(s["data_bytes"] for s in stats) == data_bytes
        algorithm = ALGORITHMS["fedmid"](cfg.algorithm)
        group = make_group([algorithm])
        payload = group.broadcast(group.start(problem, 0))
        ids = np.array([1, 2, 7, 15])
        sums, weight = backend.map_clients(make_group([algorithm]), payload, ids, Key(3, 0, ids))
        expected, expected_weight = LocalBackend(problem).map_clients(make_group([algorithm]), payload, ids,
                                                                      Key(3, 0, ids))
        assert weight == expected_weight == 4.0
        for k in expected:
            np.testing.assert_allclose(sums[k], expected[k], rtol=1e-9)
        sums["w"] += 1.0  # the driver owns writable arrays
        # a round's message to an actor is the payload and its clients' ids, nothing else
        received = [s["received_bytes"] for s in backend.stats()]
        payload_bytes = 65 * 8
        assert received == [payload_bytes + 2 * 8, payload_bytes + 8, payload_bytes + 8]
        assert max(received) < data_bytes / 100

        ray.kill(backend.actors[1])  # a dead actor is an error, not a hang
        wait_until_dead(backend.actors[1])
        with pytest.raises(RuntimeError, match="actor of the ray backend died"):
            backend.map_clients(make_group([algorithm]), payload, ids, Key(3, 1, ids))
        with pytest.raises(ValueError, match=r"client ids must be in \[0, 16\), got 0..16"):
            backend.map_clients(make_group([algorithm]), payload, np.arange(17), Key(3, 1, np.arange(17)))
    finally:
        backend.close()


def test_a_large_payload_and_algorithm_go_by_object_ref_with_the_same_sums(cluster, monkeypatch):
    """Above INLINE_BYTES the payload and the algorithm travel through the object store
    (their places in the call's pickle are None); the sums are those of the inline path."""
    from fco_ray.backends import ray_backend

    cfg = resolve(config(E1, "feddualavg", {"name": "local"}))
    problem = make_problem(cfg)
    group = make_group([ALGORITHMS["feddualavg"](cfg.algorithm)])
    payload = group.broadcast(group.start(problem, 0))
    ids = np.array([0, 3, 9, 14])
    expected, expected_weight = LocalBackend(problem).map_clients(group, payload, ids, Key(3, 0, ids))
    backend = RayBackend(problem, actors=2, cpus_per_actor=0.25)
    try:
        monkeypatch.setattr(ray_backend, "INLINE_BYTES", 0)
        puts = []
        real_put = ray_backend.ray.put
        monkeypatch.setattr(ray_backend.ray, "put", lambda v, **kw: puts.append(type(v).__name__) or real_put(v, **kw))
        for rnd in range(2):  # the second call: the actors keep the algorithm they fetched
            sums, weight = backend.map_clients(group, payload, ids, Key(3, 0, ids))
            assert weight == expected_weight
            for k in expected:
                np.testing.assert_allclose(sums[k], expected[k], rtol=1e-12)
        assert puts == [type(group).__name__, "dict", "dict"]  # the algorithm once, a payload per round
        assert [s["received_bytes"] for s in backend.stats()] == [ray_backend._nbytes(payload) + 2 * 8] * 2
    finally:
        backend.close()


def wait_until_dead(actor, timeout: float = 60.0) -> None:
    """`ray.kill` is asynchronous: a call sent at once may still run (seen under load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.stats.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the actor was not dead {timeout:.0f} s after ray.kill")


def test_cluster_too_small_is_a_clear_error(cluster):
    problem = make_problem(resolve(config(E1, "fedmid", {"name": "local"})))
    before = ray.util.placement_group_table()
    with pytest.raises(RuntimeError, match=r"2 actors x 4 CPU = 8 CPUs .*the cluster has 3 CPUs"):
        RayBackend(problem, actors=2, cpus_per_actor=4, placement_timeout_s=1)
    # the pending placement group was released
    pending = [p for p in ray.util.placement_group_table().values()
               if p["state"] != "REMOVED" and p["placement_group_id"] not in before]
    assert pending == []


_STANDALONE = """
import os, ray
from fco_ray.api import resolve
from fco_ray.core.plan import build as make_problem
from fco_ray.backends.ray_backend import RayBackend
problem = make_problem(resolve({"problem": {"name": "lowrank", "clients": 3, "dim": 4, "rank": 1},
                                "algorithm": {"name": "fedmid"}}))
backend = RayBackend(problem, actors=1, cpus_per_actor=0.25)
assert backend.started_ray
joined = ray.get_runtime_context().gcs_address == os.environ["RAY_ADDRESS"]
print(joined, [s["clients"] for s in backend.stats()], end=" ")
backend.close()
print(ray.is_initialized())
"""


def test_joins_the_cluster_at_ray_address(cluster):
    """Without ray.init, the backend connects to $RAY_ADDRESS and disconnects in close()."""
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    out = subprocess.run([sys.executable, "-c", _STANDALONE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "[3]", "False"]
    assert ray.is_initialized() and len(ray.nodes()) == 2  # the cluster itself is untouched


def _backend(section: dict):
    return parse_run({"problem": {"name": "lasso"}, "algorithm": {"name": "fedavg"},
                      "backend": section}).backend


def test_trial_bundles():
    assert trial_bundles(_backend({"name": "local", "chunk_size": 8})) == [{"CPU": 1}]
    assert trial_bundles(_backend({"name": "ray", "actors": 3, "cpus_per_actor": 0.5})) == [
        {"CPU": 1}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert trial_bundles(_backend({"name": "ray"})) == [{"CPU": 1}, {"CPU": 1.0}, {"CPU": 1.0}]


@ray.remote
def _trial(cfg):
    """Stands in for a Tune trial: runs a config from inside its placement group's bundle 0."""
    run_cfg = resolve(cfg)
    problem = make_problem(run_cfg)
    algorithm = ALGORITHMS[run_cfg.algorithm.name](run_cfg.algorithm)
    backend = make_backend(cfg["backend"], problem)
    try:
        records = run_one(problem, algorithm, backend, rounds=run_cfg.rounds,
                             eval_every=run_cfg.eval_every, seed=run_cfg.seed).records
        return records, backend.stats(), backend.own_pg
    finally:
        backend.close()


def test_actors_use_the_trial_placement_group(cluster):
    backend = {"name": "ray", "actors": 2, "cpus_per_actor": 0.5, "placement": "spread",
               "chunk_size": 1024}
    cfg = config(E1, "feddualavg", backend)
    pg = placement_group(trial_bundles(_backend(backend)), strategy="SPREAD")
    assert pg.wait(timeout_seconds=30)
    try:
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0,
                                                    placement_group_capture_child_tasks=True)
        records, stats, own_pg = ray.get(
            _trial.options(num_cpus=1, scheduling_strategy=strategy).remote(cfg))
        bundle_nodes = ray.util.placement_group_table(pg)["bundles_to_node_id"]
    finally:
        remove_placement_group(pg)
    assert own_pg is None  # no second reservation inside the trial's
    assert [s["placement_group_id"] for s in stats] == [pg.id.hex()] * 2
    assert [s["node_id"] for s in stats] == [bundle_nodes[1], bundle_nodes[2]]
    assert_same(pd.DataFrame(records), fco_ray.run({**cfg, "backend": {"name": "local"}}))


def test_reuse_hands_the_actors_to_the_next_backend_on_the_same_data(cluster):
    """Inside `fco_ray.backends.cluster.reuse()` a closed backend's actors serve the next backend on
    an equal problem (rebuilt from the same config): same processes, same numbers as the
    local backend, client state of the earlier run dropped; another problem gets new actors,
    and the block's end ends the parked ones."""
    from fco_ray.backends import cluster as fco_cluster
    from fco_ray.backends import ray_backend
    from fco_ray.data.text_generator import generate_text_nodes
    from fco_ray.problems.text import SparseTextLogReg

    cfg = resolve(config(E1, "fedmid", {"name": "local"}))
    options = {"actors": 2, "cpus_per_actor": 0.25, "chunk_size": 4}
    train, test = generate_text_nodes(seed=1, clients=6, min_samples=5, max_samples=40,
                                      dim=50, words_per_doc=6, topics=3)
    cocoa = ALGORITHMS["cocoa_plus"](ALGORITHMS["cocoa_plus"].Hyper(name="cocoa_plus"))
    with fco_cluster.reuse():
        first = RayBackend(make_problem(cfg), **options)
        pids = [s["pid"] for s in first.stats()]
        assert not first.reused
        assert_same(*run_both(make_problem(cfg), "fedmid", cfg.algorithm, first))
        first.close()
        assert len(ray_backend._PARKED) == 1
        second = RayBackend(make_problem(cfg), **options)  # an equal problem, built again
        assert second.reused and [s["pid"] for s in second.stats()] == pids
        assert_same(*run_both(make_problem(cfg), "fedmid", cfg.algorithm, second))
        second.close()
        # client state (CoCoA+ duals) lives on the actors: a reused actor starts a run afresh
        text = SparseTextLogReg.from_nodes(train, test)
        runs = []
        for _ in range(2):
            backend = RayBackend(text, **options)
            try:
                runs.append((backend.reused, pd.DataFrame(run_one(
                    text, cocoa, backend, rounds=4, eval_every=2, seed=0).records)))
            finally:
                backend.close()
        alone = pd.DataFrame(run_one(text, cocoa, LocalBackend(text), rounds=4,
                                        eval_every=2, seed=0).records)
        assert [reused for reused, _ in runs] == [False, True]  # the fedmid actors were ended
        for _, df in runs:
            np.testing.assert_allclose(df.to_numpy(float), alone.to_numpy(float), rtol=1e-9)
        other = resolve(config({**E1, "lam": 0.5}, "fedmid", {"name": "local"}))
        assert ray_backend.fingerprint(make_problem(other)) != ray_backend.fingerprint(
            make_problem(cfg))
        parked = ray_backend._PARKED[0].actors
    assert ray_backend._PARKED == [] and ray.is_initialized()  # the fixture's connection stays
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(parked[0].stats.remote(), timeout=60)


def test_run_grid_on_ray_reuses_the_actors_and_matches_local(cluster, monkeypatch):
    from fco_ray.backends import ray_backend

    reused = []
    close = ray_backend.RayBackend.close

    def noting_close(self):
        reused.append(self.reused)
        close(self)

    monkeypatch.setattr(ray_backend.RayBackend, "close", noting_close)
    base = config(E1, "fedmid", {"name": "ray", "actors": 2, "cpus_per_actor": 0.25})
    grid = {"algorithm.client_lr": [0.01, 0.02]}
    remote = fco_ray.run_grid(base, grid, fuse=False)  # two groups: two backends
    local = fco_ray.run_grid({**base, "backend": {"name": "local"}}, grid, fuse=False)
    assert reused == [False, True] and ray_backend._PARKED == []
    np.testing.assert_allclose(remote["train_loss"], local["train_loss"], rtol=1e-9)
