"""Run the E1 variants (sweeps/e1_variants.yaml, every configuration of the sweep file) through
`fco_ray.run_grid` (fused groups), one call per (variant, algorithm, seed) so that each finished
group is appended to the CSV at once (a run stopped early keeps what finished), and print the
tables of results/e1_variants.md from that CSV.

    OPENBLAS_NUM_THREADS=1 nice -n 10 taskset -c 1 python results/e1_variants.py run \
        --csv runs/e1_variants_curves.csv
    python results/e1_variants.py table --csv runs/e1_variants_curves.csv \
        --finals results/e1_variants_trials.csv

`--csv` holds every evaluated round of every configuration (about 17 MB: not committed);
`--finals` writes one row per configuration (final values, first round with F1 >= 0.99), from
which `table` also works (`table --csv results/e1_variants_trials.csv`).
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import pandas as pd

from fco_ray import run_grid
from fco_ray.sweep.schema import read_sweep_file
from fco_ray.runtime.files import append_file, write_file

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "sweeps/e1_variants.yaml"]
VARIANTS = {"support 64": {"support": 64}, "support 8": {"support": 8},
            "256 x 32": {"clients": 256, "samples_per_client": 32}}
PAPER = {"feddualavg": (0.01, 1.0)}  # the paper's best rates; the others: (0.001, 0.3)
ORDER = ["feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp"]
METRICS = ["f1", "density", "val_mse", "train_loss"]


def run(csv: Path, variants: list[str]):
    done = set()
    if csv.exists():
        old = pd.read_csv(csv)
        done = set(zip(old.variant, old.algorithm, old.seed))
    for variant, path in itertools.product(variants, FILES):
        spec = read_sweep_file(path)
        for name, seed in itertools.product(spec.algorithms, spec.seeds):
            if (variant, name, seed) in done:
                continue
            config = {"problem": {**spec.problem, **VARIANTS[variant]},
                      "algorithm": {"name": name, **spec.algorithm}, "seed": seed,
                      "rounds": spec.rounds, "eval_every": spec.eval_every}
            start = time.time()
            frame = run_grid(config, dict(spec.search.grid))
            frame.insert(0, "seed", seed)
            frame.insert(0, "algorithm", name)
            frame.insert(0, "variant", variant)
            append_file(csv, frame.to_csv(header=not csv.exists(), index=False))
            print(f"{variant} {name} seed {seed}: {time.time() - start:.0f} s", flush=True)


def finals(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: the last evaluated round's metrics, and the first round
    with F1 >= 0.99 (NaN: never)."""
    keys = ["variant", "algorithm", "seed", "algorithm.client_lr", "algorithm.server_lr"]
    last = curves.sort_values("round").groupby(keys).tail(1).set_index(keys)
    hit = curves[curves.f1 >= 0.99].groupby(keys)["round"].min().rename("first_f1_99")
    return last.join(hit).reset_index()


def table(csv: Path, out: Path | None = None):
    """Per variant: each algorithm's best pair (highest mean F1 over the pairs finished on every
    seed; ties broken by the earliest mean first round with F1 >= 0.99) and the paper's pair,
    then the whole grid (mean F1 and density over seeds; "div." where a seed diverged)."""
    rows = pd.read_csv(csv)
    if "first_f1_99" not in rows:  # the curves: reduce to one row per configuration
        rows = finals(rows)
    rows = rows.sort_values(["algorithm.client_lr", "algorithm.server_lr", "seed"], kind="stable")
    rows = rows.sort_values("variant", key=lambda v: v.map(list(VARIANTS).index), kind="stable")
    if out is not None:
        write_file(out, rows.drop(columns=["floats_up", "floats_down"], errors="ignore").to_csv(
            index=False, float_format="%.6g"))
    rate = ["algorithm.client_lr", "algorithm.server_lr"]
    for variant, block in rows.groupby("variant", sort=False):
        block = block.sort_values("algorithm", key=lambda a: a.map(ORDER.index), kind="stable")
        print(f"\n### {variant}\n")
        print("| algorithm | rate pair (client, server) | F1 | density | val_mse | train_loss "
              "| first round F1 >= 0.99 | seeds finished |")
        print("|---|---|---|---|---|---|---|---|")
        for name, alg in block.groupby("algorithm", sort=False):
            stats = alg.groupby(rate).agg(
                **{f"{m}_{s}": (m, s) for m in METRICS for s in ("mean", "std")},
                ok=("status", lambda s: int((s == "finished").sum())),
                speed=("first_f1_99", lambda r: r.fillna(float("inf")).mean()),
                first=("first_f1_99", lambda r: "/".join("never" if pd.isna(v) else str(int(v))
                                                          for v in r)))
            stable = stats[stats.ok == alg.seed.nunique()]
            best = stable.sort_values(["f1_mean", "speed"], ascending=[False, True]).index[0]
            paper = PAPER.get(name, (0.001, 0.3))
            for label, pair in (("best", best), ("paper's", paper)):
                s = stats.loc[pair]
                cells = " | ".join(f"{s[m + '_mean']:.3f} ± {s[m + '_std']:.3f}" for m in METRICS)
                print(f"| {name} | {label}: {pair[0]:g}, {pair[1]:g} | {cells} | {s['first']} "
                      f"| {s['ok']}/{alg.seed.nunique()} |")
        servers = sorted(block[rate[1]].unique(), reverse=True)
        print(f"\nF1 (density) at round {int(block['round'].max())}, mean over seeds, by client rate "
              "(rows) and server rate (columns):\n")
        print("| algorithm | client_lr | " + " | ".join(f"`eta_s = {v:g}`" for v in servers) + " |")
        print("|---|---|" + "---|" * len(servers))
        order = list(block.algorithm.unique())
        groups = sorted(block.groupby(["algorithm", rate[0]]),
                        key=lambda kv: (order.index(kv[0][0]), -kv[0][1]))
        for (name, client), g in groups:
            g = g.groupby(rate[1]).agg(f1=("f1", "mean"), density=("density", "mean"),
                                       div=("status", lambda s: bool((s != "finished").any())))
            cells = ["div." if g.loc[v, "div"] else f"{g.loc[v, 'f1']:.3f} ({g.loc[v, 'density']:.3f})"
                     for v in servers]
            print(f"| {name} | {client:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["run", "table"])
    p.add_argument("--csv", type=Path, default=ROOT / "runs/e1_variants_curves.csv")
    p.add_argument("--finals", type=Path, help="table: write one row per configuration here")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    a = p.parse_args()
    run(a.csv, a.variants) if a.what == "run" else table(a.csv, a.finals)
