"""Small problems and plain per-client reference loops for the tests."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np

from fco_ray.ops.random import Key
from fco_ray.problems.linear import make_lasso, make_lowrank


def small_lasso(lam=0.05, clients=8, samples=16, dim=20, support=5, seed=0):
    return make_lasso(seed=seed, lam=lam, clients=clients, samples_per_client=samples, dim=dim,
                      support=support, val_clients=2, bias="zero", correlation=0.5, noise=1.0,
                      shift=1.0)


def small_lowrank(lam=0.1, clients=6, samples=20, dim=5, rank=2, seed=0):
    return make_lowrank(seed=seed, lam=lam, clients=clients, samples_per_client=samples, dim=dim,
                        rank=rank, val_clients=2, noise=0.5, shift=1.0)


def one_client_grad(problem, params, cid, seed, rnd, step, batch_size):
    """The gradient of a single client, drawn with that client's own key."""
    stacked = {k: v[None] for k, v in params.items()}
    key = Key(seed, rnd, np.array([cid])).with_step(step)
    g = problem.grad(stacked, np.array([cid]), key, batch_size)
    return {k: v[0] for k, v in g.items()}


def assert_same_run(result, reference, rtol=1e-12):
    """Two RunResults agree: status, evaluated rounds, metric names and values (to rtol)."""
    assert result.status == reference.status
    assert [r["round"] for r in result.records] == [r["round"] for r in reference.records]
    for a, b in zip(result.records, reference.records):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=0, err_msg=k)


def fused_on_ray_equals_local(problem, members, **kwargs):
    """Run a fused group on the local backend and on 2 Ray actors; assert the same statuses
    and rows (to 1e-10); return the local results."""
    from fco_ray.backends import LocalBackend
    from fco_ray.backends.ray_backend import RayBackend
    local = run_fused(problem, members, LocalBackend(problem), **kwargs)
    backend = RayBackend(problem, actors=2)
    try:
        on_ray = run_fused(problem, members, backend, **kwargs)
    finally:
        backend.close()
    assert [r.status for r in on_ray] == [r.status for r in local]
    for a, b in zip(on_ray, local):
        assert [r["round"] for r in a.records] == [r["round"] for r in b.records]
        for ra, rb in zip(a.records, b.records):
            for k in ra:
                np.testing.assert_allclose(ra[k], rb[k], rtol=1e-10, err_msg=k)
    return local


def run_one(problem, algorithm, backend, **kwargs):
    """One configuration through the engine's round loop (a group of one): its RunResult."""
    from fco_ray.core.engine import run_rounds
    from fco_ray.core.group import make_group

    (result,) = run_rounds(problem, make_group([algorithm]), backend, **kwargs)
    return result


def run_fused(problem, members, backend, lams=None, **kwargs):
    """Configurations of one algorithm as one group (`make_group`: a rule's RuleGroup, an SVRG
    family's Stacked): a RunResult per member."""
    from fco_ray.core.engine import run_rounds
    from fco_ray.core.group import make_group

    if lams is None and len(members) == 1 and not members[0].rule_only:
        from fco_ray.core.group import Stacked

        return run_rounds(problem, Stacked(members), backend, **kwargs)
    return run_rounds(problem, make_group(members, lams), backend, **kwargs)


def run_group(configs, on_round=None, **checkpoints):
    """Configurations prepared as one group (`fco_ray.core.plan.prepare`) and run: per
    configuration its RunResult and final model (None if it diverged)."""
    from fco_ray.core.plan import prepare

    prepared = prepare(configs)
    results = prepared.run(on_round, **checkpoints)
    return [(r, prepared.model(j, r)) for j, r in enumerate(results)]


class InfeasibleError(AssertionError):
    """A model lies outside its constraint set."""


def check_feasible(psi, params: dict, where: str = "") -> None:
    """Raise InfeasibleError unless every constrained block of `params` (batched or not)
    satisfies its constraint, i.e. psi(params) < inf (up to `fco_ray.ops.regularizers.FEASIBILITY_TOL`)."""
    for name, reg in psi.regs.items():
        if reg.is_constraint:
            value = np.asarray(reg.value(params[name], len(psi.shapes[name])))
            if not np.all(np.isfinite(value)):
                raise InfeasibleError(f"{where}: block {name!r} violates {reg!r} "
                                      f"(for {int(np.sum(~np.isfinite(value)))} of {value.size} models)")


def recorded_files(*folders: Path) -> dict[str, int]:
    """The files under `folders` and their modification times, bytecode caches left out.

    Tests that promise "the script wrote no record here" compare two of these. Python's
    `__pycache__` is not a record: any process importing `results.*` may rewrite it, and the
    tests write bytecode (tests/conftest.py).
    """
    return {str(p): p.stat().st_mtime_ns for d in folders for p in d.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def snapshot_saver(folder):
    """(on_checkpoint, saved): an `on_checkpoint` that saves each snapshot under
    folder/round<k>, and the dict round -> that folder it fills."""
    from fco_ray.core.checkpoint import save_snapshot

    saved: dict = {}

    def keep(snapshot):
        where = folder / f"round{snapshot.round}"
        where.mkdir()
        saved[snapshot.round] = save_snapshot(where, snapshot).parent

    return keep, saved


def end_process_group(proc: subprocess.Popen, grace: float = 20) -> None:
    """Stop a server started in a process group of its own (`start_new_session=True`) and
    every worker it started: SIGTERM to the group, SIGKILL if it outlives `grace` seconds."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def daily(cases, key=lambda case: case[-1]):
    """`cases` (tuples of parameters, or `pytest.param`s) as pytest params for the daily loop:
    the first case of each `key` (of the case's values) runs in the README's fast subset
    (`-m "not slow and not ray"`); the others are marked slow and run in the whole suite. One
    case of each kind after every change, every case before a merge."""
    import pytest

    seen, params = set(), []
    for case in cases:
        values, id_, marks = ((case.values, case.id, list(case.marks)) if hasattr(case, "values")
                              else (tuple(case), None, []))
        if key(values) in seen:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(*values, id=id_, marks=marks))
        seen.add(key(values))
    return params
