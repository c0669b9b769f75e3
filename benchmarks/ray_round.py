"""What one round costs on the ray backend beside the local one, and where it goes.

    .venv/bin/python benchmarks/ray_round.py [--blocks 4] [--rounds 60] [--tasks e1,e1_1000]
        [--out benchmarks/results/ray_round.md] [--quick]

The FedAvg task of benchmarks/peer_flower.py (E1 with lam = 0: 64 clients x 128, 10 per
round; and 1,000 clients x 32, 100 per round; K = 10, batch 10), one process, one private
local Ray cluster (`fco_ray.backends.cluster.connect`, 2 CPUs). Modes, run in blocks of `--rounds`
rounds, interleaved (local, ray, noop, noop_ref, local, ray, ...), so that the blocks of one
cycle see the same background load; the first 5 rounds of a block are not counted:
  local     the local backend
  ray       the ray backend, 2 actors (0.5 CPU each), one actor call per actor and round
  noop      two calls of an empty actor method with the round's payload and ids (the floor
            of an actor round trip in Ray, without any client work)
  noop_ref  the same with an object ref in the arguments (as the algorithm travelled before
            it went as its pickle: Ray then runs its borrower protocol for every call)
  noop_bytes  the same calls with the payload and ids as one pickle (bytes each way, as the
            ray backend calls its actors: Ray's serializer of arrays is skipped)
Reported: seconds per round (map_clients + server update), min and median over all counted
rounds of a mode; ratios of medians per cycle (blocks of one cycle are side by side).
The ray backend is made at the start of its block and closed at its end.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from benchmarks.peer_flower import task_config  # noqa: E402

from fco_ray.api import resolve  # noqa: E402
from fco_ray.backends import cluster, make_backend  # noqa: E402
from fco_ray.core.plan import prepare  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

MODES = ("local", "ray", "noop", "noop_ref", "noop_bytes")
SKIP = 5


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def block(mode: str, problem, algorithm, rounds: int, noop_actors) -> list[float]:
    """Seconds per round of `rounds` rounds on `mode` (the first SKIP not counted)."""
    if mode == "local":
        backend = make_backend({"name": "local"}, problem)
    elif mode == "ray":
        backend = make_backend({"name": "ray", "actors": 2, "cpus_per_actor": 0.5}, problem)
        backend.stats()  # the actors are up
    state = algorithm.server_init(problem, problem.init_params(np.random.default_rng(0)))
    times = []
    try:
        for rnd in range(rounds):
            ids = algorithm.select_clients(0, rnd, problem.num_clients)
            payload = algorithm.broadcast(state)
            t = time.perf_counter()
            if mode == "noop_bytes":
                import pickle

                import ray

                blob = pickle.dumps((payload, ids), protocol=5)
                [pickle.loads(b) for b in ray.get([a.packed.remote(blob) for a in noop_actors[:2]])]
            elif mode.startswith("noop"):
                import ray

                extra = [noop_actors[-1]] if mode == "noop_ref" else None
                ray.get([a.call.remote(payload, ids, extra) for a in noop_actors[:2]])
            else:
                total, weight = backend.map_clients(algorithm, payload, ids, Key(0, rnd, ids))
                state = algorithm.server_update(
                    problem, state, {k: v / weight for k, v in total.items()}, rnd)
            times.append(time.perf_counter() - t)
    finally:
        if mode == "ray":
            backend.close()
    return times[SKIP:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=4, help="cycles of one block per mode")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--tasks", default="e1,e1_1000")
    p.add_argument("--out", default=None, help="default benchmarks/results/ray_round.md")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: task e1, one block of a few rounds, the results in a "
                        "temporary directory unless --out names one")
    args = p.parse_args()
    if args.quick:
        args.blocks, args.rounds, args.tasks = 1, SKIP + 3, "e1"
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "ray_round.md")
    import ray

    res = {"date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": "python benchmarks/ray_round.py " + " ".join(sys.argv[1:]),
           "load_start": load(), "nproc": os.cpu_count(), "ray": ray.__version__, "rows": []}
    connection = cluster.connect(num_cpus=2)
    try:
        @ray.remote(num_cpus=0.25)
        class Noop:
            def call(self, payload, ids, extra):
                return None

            def packed(self, blob):
                import pickle

                pickle.loads(blob)
                return pickle.dumps(None)

        noop_actors = [Noop.remote(), Noop.remote()]
        ray.get([a.call.remote(None, None, None) for a in noop_actors])
        noop_actors.append(ray.put(b"x" * 355))  # a ref of the size of FedAvg's pickle
        for task in args.tasks.split(","):
            prepared = prepare([resolve(task_config(task, 0, {"name": "local"}, args.rounds))])
            problem, algorithm = prepared.problem, prepared.group()
            for cycle in range(args.blocks):
                row = {"task": task, "cycle": cycle, "load": load()}
                for mode in MODES:
                    row[mode] = block(mode, problem, algorithm, args.rounds, noop_actors)
                res["rows"].append(row)
                print(json.dumps({k: (v if not isinstance(v, list) else
                                      round(median(v) * 1e3, 3)) for k, v in row.items()}),
                      flush=True)
    finally:
        cluster.disconnect(connection)
    res["load_end"] = load()
    out = Path(args.out)
    write_file(out.with_suffix(".json"), json.dumps(res, indent=1))
    write_file(out, markdown(res))
    print(f"wrote {out}")


def markdown(res: dict) -> str:
    L = [f"# One round on the ray backend beside the local one, {res['date']}", "",
         f"Command: `{res['command']}`", "",
         f"{res['nproc']} CPUs, Ray {res['ray']}; load average (1, 5, 15 min) "
         f"{res['load_start']} at the start, {res['load_end']} at the end (other sessions "
         "share the machine). Milliseconds per round (client work + server update): min / "
         "median over all counted rounds; ratios: median over cycles of the per-cycle "
         "ratio of medians (min in brackets), and ray / no-op by the minimum over all rounds "
         "(issue 42's measure: a Ray round against the floor of two actor calls).", "",
         "| task | local ms | ray ms | 2 no-op actor calls ms | the same with a ref argument ms | "
         "the same as bytes ms | ray / local | no-op / local | ref / no-op | ray / no-op, min | "
         "ray / no-op as bytes, min | loads per cycle |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in res["rows"]):
        rows = [r for r in res["rows"] if r["task"] == task]

        def cell(mode):
            v = [t for r in rows for t in r[mode]]
            return f"{min(v) * 1e3:.2f} / {median(v) * 1e3:.2f}"

        def ratio(a, b):
            x = [median(r[a]) / median(r[b]) for r in rows]
            return f"{median(x):.2f} ({min(x):.2f})"

        def by_min(a, b):
            if not all(r.get(a) and r.get(b) for r in rows):
                return "-"
            return f"{min(t for r in rows for t in r[a]) / min(t for r in rows for t in r[b]):.2f}"

        L.append(f"| {task} | {cell('local')} | {cell('ray')} | {cell('noop')} | "
                 f"{cell('noop_ref')} | {cell('noop_bytes')} | {ratio('ray', 'local')} | "
                 f"{ratio('noop', 'local')} | {ratio('noop_ref', 'noop')} | {by_min('ray', 'noop')} | "
                 f"{by_min('ray', 'noop_bytes')} | "
                 + ", ".join(r["load"].split()[0] for r in rows) + " |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
