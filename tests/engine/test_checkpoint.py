"""Checkpoints: a run restored from the state saved at round r (np.savez, no pickles)
continues with exactly the numbers of an uninterrupted run, for every algorithm whose state
lives on the server (README "Reliability")."""
import numpy as np
import pytest

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.core.checkpoint import FILE, Snapshot, load_snapshot, save_snapshot
from tests.helpers import daily, snapshot_saver
from tests.engine.test_battery import FITTING, config

#: one problem per algorithm (the first that fits, in the battery's order)
ONE_EACH = {a: p for a, p in reversed(FITTING)}
#: the algorithms in the order the fast subset picks one of each rule's: the papers' own first
ORDER = sorted(ONE_EACH, key=lambda a: (a not in ("fedmid", "feddualavg", "feddualex", "fedmip"), a))


def kind(algorithm: str) -> str:
    """What a checkpoint holds the state of: the algorithm's rule (its variants share the
    state), or the algorithm itself where it has no rule."""
    return getattr(ALGORITHMS[algorithm], "rule", None) or algorithm


@pytest.mark.parametrize("algorithm", daily([(a,) for a in ORDER], key=lambda case: kind(case[0])))  # fast: each rule once
def test_restored_run_continues_with_identical_numbers(algorithm, tmp_path):
    cfg = config(algorithm, ONE_EACH[algorithm], rounds=6, eval_every=1)
    straight = fco_ray.run(cfg)
    keep, saved = snapshot_saver(tmp_path)
    checkpointed = fco_ray.run(cfg, checkpoint_every=2, on_checkpoint=keep)
    assert sorted(saved) == [2, 4, 6]
    assert checkpointed.equals(straight)  # checkpointing changes nothing
    resumed = fco_ray.run(cfg, start=load_snapshot(saved[4]))
    assert list(resumed["round"]) == [5, 6]
    if ALGORITHMS[algorithm].client_state:  # declared: a sweep does not checkpoint it
        return
    expected = straight[straight["round"] > 4].reset_index(drop=True)
    assert resumed.equals(expected), (resumed, expected)


def test_snapshot_round_trip_keeps_types_and_refuses_objects(tmp_path):
    state = {"w": np.arange(3.0), "x": {"w0": np.ones((2, 2)), "b0": np.zeros(2)}, "phase": 1,
             "run": 12345.0, "flag": True}
    save_snapshot(tmp_path, Snapshot(7, state, {"floats_up": 3.0, "floats_down": 4.0}))
    back = load_snapshot(tmp_path)
    assert back.round == 7 and back.comm == {"floats_up": 3.0, "floats_down": 4.0}
    assert type(back.state["phase"]) is int and type(back.state["flag"]) is bool
    assert np.array_equal(back.state["x"]["w0"], state["x"]["w0"])
    with pytest.raises(ValueError, match="object arrays cannot be checkpointed"):
        save_snapshot(tmp_path, Snapshot(1, {"w": np.array([object()])}))
    np.savez(tmp_path / FILE, __kinds__=np.array('{"round": 1, "kinds": {"state/w": "array"}}'),
             **{"state/w": np.array([object()], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle=False"):
        load_snapshot(tmp_path)  # a planted pickle is refused, never loaded


def test_snapshot_rebuilds_only_fco_ray_dataclasses(tmp_path):
    import json

    from fco_ray.algorithms.solvers import FistaState

    state = {"fista": FistaState({"w": np.ones(2)}, {"w": np.zeros(2)}, 1.5, 0.25)}
    save_snapshot(tmp_path, Snapshot(3, state))
    back = load_snapshot(tmp_path).state["fista"]
    assert isinstance(back, FistaState) and back.t == 1.5 and np.array_equal(back.x["w"], np.ones(2))
    with np.load(tmp_path / FILE) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["__kinds__"]))
    meta["classes"]["state/fista"] = "subprocess:Popen"  # a class from elsewhere: refused
    arrays["__kinds__"] = np.array(json.dumps(meta))
    np.savez(tmp_path / FILE, **arrays)
    with pytest.raises(ValueError, match="outside fco_ray"):
        load_snapshot(tmp_path)


FUSABLE = [(a, ONE_EACH[a]) for a in ORDER if ALGORITHMS[a].fusable]


@pytest.mark.parametrize("algorithm, problem", daily(  # fast subset: each rule once, and E1's divergence
    [*FUSABLE, ("fedmid", "lasso")], key=lambda case: (kind(case[0]), case[1] == "lasso")))
def test_restored_fused_group_continues_with_identical_numbers(algorithm, problem, tmp_path):
    """A fused group of three client rates restored at round 4 (on E1 the rate 1.0 diverges
    at round 1: the snapshot holds the two members still running)."""
    from fco_ray.core.config import parse_run

    from tests.helpers import run_group

    base = config(algorithm, problem, rounds=6, eval_every=1)
    configs = [parse_run({**base, "algorithm": {**base["algorithm"], "client_lr": lr}})
               for lr in (0.001, 0.01, 1.0)]
    rows = {}
    straight = run_group(configs, lambda rnd, r, ended: rows.setdefault(rnd, (r, ended)))
    keep, saved = snapshot_saver(tmp_path)
    run_group(configs, checkpoint_every=2, on_checkpoint=keep)
    again = {}
    start = load_snapshot(saved[4])
    if problem == "lasso":
        assert start.active == [0, 1]
    resumed = run_group(configs, lambda rnd, r, ended: again.setdefault(rnd, (r, ended)), start=start)
    assert sorted(again) == [5, 6]
    for rnd in again:
        assert again[rnd][0] == rows[rnd][0]  # the rows of every configuration still running
    for (r0, m0), (r1, m1) in zip(straight, resumed):
        assert r0.status == r1.status
        if r0.status == "finished":
            assert r0.records[-1] == r1.records[-1]
        if m0 is not None:
            assert all(np.array_equal(m0[k], m1[k]) for k in m0)
