"""Whole rounds compiled on the device backend keep the engine's promises: checkpoints taken
between compiled chunks restore to the same numbers, and a member that diverges inside a
chunk stops at its own last acceptable round while the others go on, as on the CPU engine."""
import numpy as np
import pytest

pytest.importorskip("jax", reason="the device backend needs JAX")

from fco_ray.core.checkpoint import load_snapshot  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from tests.helpers import run_group, snapshot_saver  # noqa: E402

LASSO = {"name": "lasso", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11], "dim": 10,
         "support": 3, "val_clients": 2}
BILINEAR = {"name": "bilinear_l1", "n": 8, "m": 12, "clients": 5, "data_seed": 0}


def configs(problem: dict, algorithm: str, rates, device: str, rounds: int, every: int, seeds=(0,)):
    alg = {"name": algorithm, "local_steps": 3, "clients_per_round": 4, "batch_size": 4}
    return [parse_run({"problem": problem, "algorithm": {**alg, "client_lr": lr}, "rounds": rounds,
                       "eval_every": every, "seed": s, "backend": {"name": "local", "device": device}})
            for s in seeds for lr in rates]


def test_a_member_diverging_inside_a_chunk_stops_at_its_round_as_on_the_cpu():
    rates = [0.02, 3.0, 0.005]  # 3.0 diverges within the first rounds of a 4-round chunk
    device = run_group(configs(LASSO, "feddualavg", rates, "jax-cpu", 12, 4))
    cpu = run_group(configs(LASSO, "feddualavg", rates, "cpu", 12, 4))
    assert [r.status for r, _ in device] == [r.status for r, _ in cpu] == ["finished", "diverged", "finished"]
    for (a, ma), (b, mb) in zip(device, cpu):
        assert [row["round"] for row in a.records] == [row["round"] for row in b.records]
        for ra, rb in zip(a.records, b.records):
            for k in rb:
                np.testing.assert_allclose(ra[k], rb[k], rtol=1e-9, err_msg=k)


@pytest.mark.parametrize("problem, algorithm, seeds", [
    pytest.param(LASSO, "fedmid", (0,), marks=pytest.mark.slow), (BILINEAR, "feddualex", (0, 1))])
def test_checkpoints_between_compiled_chunks_restore_the_same_numbers(problem, algorithm, seeds, tmp_path):
    group = configs(problem, algorithm, [0.01, 0.03], "jax-cpu", 8, 4, seeds)
    rows: dict = {}
    straight = run_group(group, lambda rnd, r, ended: rows.setdefault(rnd, r))
    keep, saved = snapshot_saver(tmp_path)
    run_group(group, checkpoint_every=2, on_checkpoint=keep)
    assert sorted(saved) == [2, 4, 6, 8]
    again: dict = {}
    resumed = run_group(group, lambda rnd, r, ended: again.setdefault(rnd, r), start=load_snapshot(saved[6]))
    assert sorted(again) == [8]
    for j, row in again[8].items():
        for k, v in row.items():
            np.testing.assert_allclose(v, rows[8][j][k], rtol=1e-12, err_msg=k)
    for (r0, m0), (r1, m1) in zip(straight, resumed):
        assert r0.status == r1.status
        for k in m0 or {}:
            np.testing.assert_allclose(m0[k], m1[k], rtol=1e-12)
