"""Peer comparison: one FedAvg task in fco_ray (local and ray backends) and in Flower.

    .venv/bin/python benchmarks/peer_flower.py [--repeats 3] [--rounds 200]
        [--tasks e1,e1_1000] [--flwr 1.42.0] [--out benchmarks/results/peer_flower.md] [--quick]

The task (E1 data with lam = 0, i.e. plain least squares, FedAvg): `lasso` problem of
fco_ray with lam = 0 built by fco_ray itself (so the comparison follows the problem's
definition), K = 10 local SGD steps, batch 10 drawn with replacement, uniform client
sampling without replacement, server learning rate 1, model started at zero:
  e1        64 clients x 128 samples, 10 clients per round
  e1_1000   1,000 clients x 32 samples, 100 clients per round
Flower runs it in its simulation engine (`flwr.simulation.run_simulation`, Message API:
ServerApp + `flwr.serverapp.strategy.FedAvg`, ClientApp train handler; see
benchmarks/flower_task.py) inside its own virtual environment, benchmarks/.venv-flower,
which this script makes and fills with `pip install flwr[simulation]==VERSION` on first use
(flwr is never a dependency of fco_ray). fco_ray runs the same task as a user's script would,
through its public entry points only: the problem built once from `fco_ray.PROBLEMS["lasso"]`,
then `fco_ray.run(config, problem=problem, return_model=True, checkpoint_every=1,
on_checkpoint=...)` on the local backend and on the ray backend (2 actors, a private local
cluster per run), in this process. The checkpoint callback, called at the end of every round,
is the clock; the config evaluates only at round 0 and at the last round, as Flower (which
evaluates nothing).

Measured, per system and run: seconds per steady round (the time between the starts of
consecutive rounds for Flower, between the ends of consecutive rounds for fco_ray, from round
10 on: the first rounds pay start-up), the start-up before the first round, and the final training loss (fco_ray's `problem.loss` of the final model,
for all three). The three systems run one after another within each repeat, on fresh
seeds per repeat (the data are fixed: data_seed 0), so the ratios of a repeat are measured
side by side. Nothing here is a test: the targets (fco_ray local >= 100x Flower, ray >= 30x)
are compared and reported.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import fco_ray  # noqa: E402  (public entry points only: run, PROBLEMS)
from fco_ray.runtime.files import replacing, write_file

from benchmarks.machine import cpu_model

VENV = ROOT / "benchmarks" / ".venv-flower"
TASKS = {
    "e1": {"clients": 64, "samples_per_client": 128, "clients_per_round": 10},
    "e1_1000": {"clients": 1000, "samples_per_client": 32, "clients_per_round": 100},
}
LOCAL_STEPS, BATCH, CLIENT_LR, SKIP = 10, 10, 1e-3, 10
TARGETS = {"local": 100.0, "ray": 30.0}  # fco_ray at least this many times Flower per round


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------
# Flower's environment
# ---------------------------------------------------------------------------------------
def flower_python(version: str) -> Path:
    """The Flower venv's interpreter, with flwr==version installed (made on first use)."""
    python = VENV / "bin" / "python"
    if python.exists() and flower_versions(python).get("flwr") == version:
        return python
    print(f"making {VENV} with flwr[simulation]=={version} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"flwr[simulation]=={version}",
                    "numpy"], check=True)
    return python


def flower_versions(python: Path) -> dict:
    code = ("import json, flwr, ray, numpy, platform; print(json.dumps({'flwr': "
            "flwr.__version__, 'ray': ray.__version__, 'numpy': numpy.__version__, "
            "'python': platform.python_version()}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


# ---------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------
def problem_section(task: str) -> dict:
    t = TASKS[task]
    return {"name": "lasso", "lam": 0.0, "data_seed": 0, "clients": t["clients"],
            "samples_per_client": t["samples_per_client"]}


def build_problem(task: str):
    """The task's problem, built once through the public registry (as a user's script would)."""
    spec = fco_ray.PROBLEMS["lasso"]
    return spec.build(spec.params(**problem_section(task)), 0)


def task_config(task: str, seed: int, backend: dict, rounds: int) -> dict:
    t = TASKS[task]
    return {"problem": problem_section(task),
            "algorithm": {"name": "fedavg", "client_lr": CLIENT_LR, "server_lr": 1.0,
                          "local_steps": LOCAL_STEPS, "batch_size": BATCH,
                          "clients_per_round": t["clients_per_round"]},
            "rounds": rounds, "eval_every": rounds, "seed": seed, "backend": backend}


def loss_scale(problem) -> float:
    """c in problem.loss = c * (1/M) sum_m mean_i (x.w + b - y)^2 (the problem's own
    convention, 1/2 or 1), read off the problem at a random point."""
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal(problem.shapes["w"]) * 0.1, "b": np.asarray(0.3)}
    resid = problem.predict(params, problem.train) - problem.train.arrays["y"]
    plain = float(np.sum(problem.train.full_weights() * resid**2) / problem.num_clients)
    return problem.loss(params) / plain


def write_task_data(problem, path: Path) -> float:
    scale = loss_scale(problem)
    with replacing(path) as temp:
        np.savez(temp, x=problem.train.arrays["x"], y=problem.train.arrays["y"],
                 sizes=problem.train.sizes, loss_scale=np.asarray(scale))
    return scale


def steady(starts: list[float]) -> dict:
    gaps = np.diff(np.asarray(starts))[SKIP:]
    return {"median_s": float(np.median(gaps)), "min_s": float(np.min(gaps)),
            "rounds_timed": int(len(gaps))}


BACKENDS = {"local": {"name": "local"}, "ray": {"name": "ray", "actors": 2}}


def run_ours(problem, task: str, seed: int, backend_name: str, rounds: int) -> dict:
    """`fco_ray.run` of the task on the built problem; the end of every round is noted by the
    public checkpoint callback (called after each round, before any evaluation)."""
    ends: list[float] = []
    cfg = task_config(task, seed, BACKENDS[backend_name], rounds)
    t0 = time.perf_counter()
    df, model = fco_ray.run(cfg, problem=problem, return_model=True, checkpoint_every=1,
                            on_checkpoint=lambda snapshot: ends.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    assert df.attrs["status"] == "finished", df.attrs["status"]
    timed = steady(ends)
    return {**timed, "first_round_start_s": ends[0] - t0 - timed["median_s"],
            "after_last_round_s": t0 + wall - ends[-1], "final_loss": problem.loss(model)}


def run_flower(python: Path, problem, data: Path, task: str, seed: int, rounds: int,
               work: Path) -> dict:
    out = work / f"flower_{task}_{seed}.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # Flower's own Ray cluster: private temp dir (it must neither join another cluster
    # advertised on this machine nor be found by one)
    ray_tmp = tempfile.mkdtemp(prefix="fl", dir="/tmp")  # short: Ray's socket paths
    env.update(PYTHONPATH=str(ROOT / "benchmarks"), RAY_TMPDIR=ray_tmp)
    cmd = [str(python), "-c", "import flower_task; flower_task.cli()", str(data), str(out),
           "--rounds", str(rounds), "--per-round", str(TASKS[task]["clients_per_round"]),
           "--local-steps", str(LOCAL_STEPS), "--batch-size", str(BATCH),
           "--client-lr", str(CLIENT_LR), "--seed", str(seed), "--actors", "2"]
    t0 = time.perf_counter()
    try:
        with replacing(work / f"flower_{task}_{seed}.log") as temp, open(temp, "w") as log:
            done = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"Flower run failed (exit {done.returncode}); log: "
                           f"{work / f'flower_{task}_{seed}.log'}")
    res = json.loads(out.read_text())
    params = {"w": np.asarray(res["w"]), "b": np.asarray(res["b"])}
    # round starts are perf_counter values of the Flower process: only differences count
    return {**steady(res["round_starts"]), "wall_s": wall, "final_loss": problem.loss(params)}


# ---------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--tasks", default="e1,e1_1000")
    p.add_argument("--flwr", default="1.42.0", help="flwr version for the Flower venv")
    p.add_argument("--out", default=None, help="default benchmarks/results/peer_flower.md")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of fco_ray's side only (no Flower venv): task e1, one repeat "
                        "of a few rounds on both backends, the JSON record in a temporary "
                        "directory unless --out names one")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.rounds, args.tasks = 1, SKIP + 5, "e1"
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "peer_flower.md")
    tasks = args.tasks.split(",")
    python = None if args.quick else flower_python(args.flwr)
    import ray

    versions = {"fco_ray": {"fco_ray": fco_ray.__version__, "ray": ray.__version__,
                            "numpy": np.__version__, "python": platform.python_version()},
                "flower": flower_versions(python) if python else {}}
    res = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "versions": versions,
           "command": "python benchmarks/peer_flower.py " + shlex.join(sys.argv[1:]),
           "load_start": load(), "nproc": os.cpu_count(), "cpu": cpu_model(),
           "rounds": args.rounds, "repeats": args.repeats, "runs": []}
    print(json.dumps(versions), flush=True)
    with tempfile.TemporaryDirectory(prefix="peer") as tmp:
        work = Path(tmp)
        problems = {}
        for task in tasks:
            problems[task] = build_problem(task)
            res.setdefault("loss_scale", {})[task] = write_task_data(problems[task],
                                                                     work / f"{task}.npz")
        for rep in range(args.repeats):
            for task in tasks:
                problem = problems[task]
                row = {"task": task, "seed": rep, "load": load()}
                if python:
                    row["flower"] = run_flower(python, problem, work / f"{task}.npz", task, rep,
                                               args.rounds, work)
                row["local"] = run_ours(problem, task, rep, "local", args.rounds)
                row["ray"] = run_ours(problem, task, rep, "ray", args.rounds)
                row["load_after"] = load()
                res["runs"].append(row)
                print(json.dumps(row), flush=True)
    res["load_end"] = load()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file(out.with_suffix(".json"), json.dumps(res, indent=1))
    if python:  # the page compares with Flower: not without it (--quick)
        write_file(out, markdown(res))
    print(f"wrote {out if python else out.with_suffix('.json')}", flush=True)


def markdown(res: dict) -> str:
    v = res["versions"]
    L = [f"# Peer comparison: fco_ray vs Flower, {res['date']}", "",
         f"Command: `{res['command']}`", "",
         f"Machine: {res['cpu']}, {res['nproc']} CPUs; load average (1, 5, 15 min) "
         f"{res['load_start']} at the start, {res['load_end']} at the end.", "",
         f"Versions: fco_ray {v['fco_ray']['fco_ray']} (Ray {v['fco_ray']['ray']}, NumPy "
         f"{v['fco_ray']['numpy']}, Python {v['fco_ray']['python']}); Flower: flwr "
         f"{v['flower'].get('flwr')} (Ray {v['flower'].get('ray')}, NumPy "
         f"{v['flower'].get('numpy')}, Python {v['flower'].get('python')}), in its own venv.", "",
         f"Task: FedAvg on fco_ray's `lasso` problem with lam = 0 (d = 1024; loss scale "
         f"{res.get('loss_scale')}: the problem's own convention), K = {LOCAL_STEPS}, "
         f"batch {BATCH}, client_lr {CLIENT_LR}, {res['rounds']} rounds; Flower with 2 Ray "
         f"actors (1 CPU each), fco_ray ray backend with 2 actors; fco_ray through "
         f"`fco_ray.run` (public API). Seconds per steady round = the median gap between "
         f"consecutive round starts (Flower) or ends (fco_ray's checkpoint callback) from "
         f"round {SKIP} on (per run); "
         f"{res['repeats']} repeats, each running Flower, local, ray one after another "
         "(ratios of a repeat are side by side).", ""]
    for task in dict.fromkeys(r["task"] for r in res["runs"]):
        runs = [r for r in res["runs"] if r["task"] == task]
        t = TASKS[task]
        L += [f"## {task}: {t['clients']} clients x {t['samples_per_client']}, "
              f"{t['clients_per_round']} per round", "",
              "| system | s per steady round (min / median over runs) | Flower / this (min / median over runs) | target | final train loss per run | start-up before round 1 (s, median) |",
              "|---|---|---|---|---|---|"]
        for system in ("flower", "local", "ray"):
            per = [r[system]["median_s"] for r in runs]
            losses = ", ".join(f"{r[system]['final_loss']:.4f}" for r in runs)
            if system == "flower":
                ratio, target = "1", ""
                startup = median(r["flower"]["wall_s"] - r["flower"]["median_s"] * res["rounds"]
                                 for r in runs)
            else:
                ratios = [r["flower"]["median_s"] / r[system]["median_s"] for r in runs]
                ratio = f"{min(ratios):.0f}x / {median(ratios):.0f}x"
                met = "met" if min(ratios) >= TARGETS[system] else (
                    "met at the median" if median(ratios) >= TARGETS[system] else "missed")
                target = f">= {TARGETS[system]:.0f}x: {met}"
                startup = median(r[system]["first_round_start_s"] for r in runs)
            L.append(f"| {'fco_ray ' + system if system != 'flower' else 'Flower'} | "
                     f"{min(per):.4f} / {median(per):.4f} | {ratio} | {target} | {losses} | "
                     f"{startup:.1f} |")
        spread = [r[s]["final_loss"] for r in runs for s in ("flower", "local", "ray")]
        ours = [r[s]["final_loss"] for r in runs for s in ("local", "ray")]
        flower = [r["flower"]["final_loss"] for r in runs]
        gap = abs(median(flower) - median(ours)) / median(ours)
        noise = max((max(ours) - min(ours)) / median(ours), (max(flower) - min(flower)) / median(flower))
        same = "the same loss" if gap <= max(noise, 0.01) else "DIFFERENT losses"
        L += ["", f"Final training loss: Flower {min(flower):.4f}..{max(flower):.4f}, fco_ray "
              f"{min(ours):.4f}..{max(ours):.4f}: medians {gap:.2%} apart, seed-to-seed spread "
              f"up to {noise:.2%} (the minibatch and client draws differ between the systems "
              f"and between seeds): {same} (criterion: gap <= max(spread, 1%)). All runs' "
              f"relative spread {(max(spread) - min(spread)) / median(spread):.1%}. 1-minute load "
              "average before / after each repeat: " + ", ".join(
                  f"{r['load'].split()[0]} / {r.get('load_after', '?').split()[0]}" for r in runs) + ".", ""]
    L += ["Flower's start-up = its process wall time minus rounds x its steady round time "
          "(Python + Flower + Ray start, data load in its actors). fco_ray's = from the call "
          "of `fco_ray.run` to the start of the first round (the round-0 evaluation included; "
          "for ray: starting a private local Ray cluster and 2 actors).", ""]
    return "\n".join(L)


if __name__ == "__main__":
    main()
