"""Tables of results/e1.md, e2.md and e5_full_scale.md from a sweep's MLflow runs.

    python results/e1_e2_e5_tables.py SWEEP --tracking-uri URI [--csv FILE] [--paper C,S:ALG ...] [--grid]

SWEEP is the sweep's name (or parent run id) as `fco-ray report` takes it, or NAME@URI for a
sweep in another store; the trials of several sweeps are pooled. Prints markdown:
per algorithm its best rate pair (the sweep's tuning metric, mean final value over the
seeds; a pair with a seed that did not finish ranks last, as `fco-ray runs --best`), the
mean +- std over seeds of the final metrics at that pair and at the paper's pair, and how
many pairs finished on every seed. For saddle sweeps the best pair by the ergodic gap is
listed too. `--csv` writes every trial's final values.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd
from fco_ray.runtime.files import replacing, write_file


CL, SL = "algorithm.client_lr", "algorithm.server_lr"
COLUMNS = {  # metrics shown per problem, in order
    "lasso": ["f1", "density", "val_mse", "train_loss"],
    "lowrank": ["train_loss", "rank", "recovery_error", "val_mse"],
    "bilinear_l1": ["duality_gap", "density", "duality_gap_ergodic", "density_ergodic"],
    "bilinear_nuclear": ["duality_gap", "rank", "rank_y", "duality_gap_ergodic", "rank_ergodic"],
}
FIRST = {"lasso": ("f1", lambda v: v >= 0.99, "first round F1 >= 0.99"),
         "lowrank": ("rank", lambda v: v == 16, "first round rank 16")}


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    a = abs(x)
    return f"{x:.3g}" if a < 0.01 and a > 0 else f"{x:.3f}" if a < 100 else f"{x:.1f}"


def pm(values: pd.Series) -> str:
    v = values.dropna().astype(float)
    if v.empty:
        return "–"
    if (v == v.round()).all():  # counts (rank): whole numbers
        return f"{v.mean():.3g}" if len(v) == 1 or v.nunique() == 1 else f"{v.mean():.3g} ± {v.std(ddof=1):.2g}"
    if len(v) == 1:
        return fmt(v.mean())
    m, sd = v.mean(), v.std(ddof=1)
    same = f"{sd:.3f}" if 0.01 <= abs(m) < 100 else f"{sd:.1f}" if abs(m) >= 100 else f"{sd:.2g}"
    return f"{fmt(m)} ± {same}"


def cols_for(problem, metric, t) -> list[str]:
    return [c for c in COLUMNS.get(problem, [metric]) if c in t]


def at_round(data, t: pd.DataFrame, cols: list[str], rnd: int) -> pd.DataFrame:
    """The trials' values at evaluated round `rnd` (from their series) instead of their final
    ones: a trial still running (its sweep stopped by hand) that got there counts as finished
    there, one that ended diverged before it keeps its status."""
    t = t.copy()
    for i, r in t.iterrows():
        if r["status"] == "diverged":
            continue
        reached = True
        for m in cols:
            h = data.history(r["run_id"], m)
            h = h[h.index <= rnd]
            reached &= len(h) > 0 and h.index[-1] == rnd
            t.at[i, m] = h.iloc[-1] if len(h) else np.nan
        t.at[i, "status"] = "finished" if reached else "running"
        t.at[i, "final_round"] = rnd if reached else np.nan
    return t


class Pooled:
    """Several sweeps' trials read as one (each run's history from its own store)."""

    def __init__(self, sweeps):
        self.sweeps, self.name, self.problem = sweeps, sweeps[0].name, sweeps[0].problem
        self.owner = {r: d for d in sweeps for r in d.trials["run_id"]}

    def ranking(self, *fallback):
        return self.sweeps[0].ranking(*fallback)

    def history(self, run_id: str, metric: str) -> pd.Series:
        return self.owner[run_id].history(run_id, metric)


def pair_scores(rows: pd.DataFrame, metric: str, mode: str) -> pd.Series:
    worst = math.inf if mode == "min" else -math.inf
    ok = (rows["status"] == "finished") & rows[metric].notna()
    score = rows[metric].where(ok, worst).astype(float)
    return score.groupby([rows[CL], rows[SL]]).mean()


def first_rounds(data, rows: pd.DataFrame, problem: str) -> str:
    if problem not in FIRST:
        return ""
    metric, hit, _ = FIRST[problem]
    out = []
    for run_id in rows.sort_values("seed")["run_id"]:
        h = data.history(run_id, metric)
        reached = h[[hit(v) for v in h.values]]
        out.append(str(int(reached.index[0])) if len(reached) else "never")
    return "/".join(out)


def first_mean(data, rows: pd.DataFrame, pair, problem: str) -> float:
    sel = rows[(rows[CL] == pair[0]) & (rows[SL] == pair[1])]
    hits = first_rounds(data, sel, problem).split("/")
    return float(np.mean([math.inf if h == "never" else int(h) for h in hits]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", nargs="+", help="sweeps whose trials are pooled (e.g. seed 0, seeds 1-2)")
    ap.add_argument("--tracking-uri", help="the store of every SWEEP not written NAME@URI")
    ap.add_argument("--csv")
    ap.add_argument("--at-round", type=int, help="values at this evaluated round instead of the last")
    ap.add_argument("--all-seeds-only", action="store_true", help="only the pairs that ran on every seed")
    ap.add_argument("--drop-interrupted", action="store_true",
                    help="leave out trials still `running` (their sweep was stopped)")
    ap.add_argument("--select-seed", type=int, help="rank the pairs on this seed alone (the seed that ran the whole grid)")
    ap.add_argument("--curves", help="PNG: the first two metrics by round at the listed pairs, mean over seeds")
    ap.add_argument("--paper", nargs="*", default=[], help="CLIENT,SERVER:ALGORITHM[,ALGORITHM]")
    ap.add_argument("--grid", action="store_true",
                    help="also every rate pair's mean final value of the tuning metric (and the "
                         "ergodic gap in brackets, saddle sweeps): one row per algorithm and client rate")
    args = ap.parse_args()
    from fco_ray.report.data import load_sweep  # MLflow: only to read a sweep (not for a CSV's tables)

    sweeps = [load_sweep(*key.split("@", 1)) if "@" in key else load_sweep(key, args.tracking_uri)
              for key in args.sweep]
    data = Pooled(sweeps)
    t = pd.concat([d.trials for d in sweeps], ignore_index=True)
    metric, mode = data.ranking(None, None)
    if args.all_seeds_only:  # the pairs every seed ran
        n = t.groupby(["algorithm", CL, SL])["seed"].transform("nunique")
        t = t[n == t["seed"].nunique()].reset_index(drop=True)
    if args.at_round is not None:
        t = at_round(data, t, cols_for(data.problem, metric, t), args.at_round)
    if args.drop_interrupted:  # trials of a sweep stopped by hand: not run, not failed
        t = t[t["status"] != "running"].reset_index(drop=True)
    problem = data.problem
    cols = cols_for(problem, metric, t)
    paper = {}
    for spec in args.paper:
        rates, algs = spec.split(":")
        for a in algs.split(","):
            paper[a] = tuple(float(r) for r in rates.split(","))
    if args.csv:
        keep = ["algorithm", CL, SL, "seed", "status", "final_round", *cols]
        write_file(args.csv, t[keep].sort_values(["algorithm", CL, SL, "seed"],
                                                 ascending=[True, False, False, True])
                   .to_csv(index=False, float_format="%.6g"))
    seeds = sorted(t["seed"].unique())
    ranked_on = f"seed {args.select_seed}" if args.select_seed is not None else "the mean over seeds"
    ties = f"; ties broken by the earliest mean {FIRST[problem][2]}" if problem in FIRST else ""
    print(f"sweeps {', '.join(d.name for d in sweeps)}: {len(t)} trials, seeds "
          f"{[int(x) for x in seeds]}; pairs ranked by the {'final' if args.at_round is None else f'round-{args.at_round}'} {metric} ({mode}) on {ranked_on}{ties}\n")
    first = (lambda sel: first_rounds(data, sel, problem)) if problem in FIRST else None
    tie = (lambda rows, pair: first_mean(data, rows, pair, problem)) if problem in FIRST else None
    text, shown = best_table(t, cols, metric, mode, paper, args.select_seed, first, tie,
                             FIRST.get(problem, (None, None, None))[2])
    print(text)
    if args.grid:
        print("\n" + grid_table(t, metric))
    if args.curves:
        plot_curves(data, shown, cols[:2], args.curves)


def best_table(t: pd.DataFrame, cols: list[str], metric: str, mode: str, paper: dict,
               select_seed: int | None = None, first=None, tie=None, first_head: str | None = None):
    """The markdown table (and the `N of M pairs finished on every seed` lines below it) of
    each algorithm's best rate pair by the mean final `metric` over seeds (by `select_seed`
    alone if given; a pair with a seed that did not finish ranks last), and its paper pair;
    saddle trials also by the ergodic gap. `first(rows)`: the first-round column's cell (a
    column only when given: it needs the runs' histories); `tie(rows, pair)`: the tie-break
    among pairs with equal scores (smaller first). Returns (text, the pairs shown)."""
    head = ["algorithm", "rate pair (client, server)", *cols] + ([first_head] if first else []) + ["seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary, shown = [], []
    rankings = [(metric, mode)]
    if "duality_gap_ergodic" in t:
        rankings.append(("duality_gap_ergodic", "min"))
    for alg, rows in t.groupby("algorithm"):
        for rank_metric, rank_mode in rankings:
            if rank_metric not in rows or rows[rank_metric].isna().all():
                continue
            ranked = rows if select_seed is None else rows[rows["seed"] == select_seed]
            scores = pair_scores(ranked, rank_metric, rank_mode)
            finite = scores[np.isfinite(scores)]
            label = "best" if rank_metric == metric else f"best by {rank_metric}"
            picks = []
            if len(finite):
                best = finite.idxmin() if rank_mode == "min" else finite.idxmax()
                tied = finite[finite == finite[best]].index
                if len(tied) > 1 and tie is not None:  # ties (F1 = 1): the fastest pair
                    best = min(tied, key=lambda pair: tie(rows, pair))
                picks.append((label, best))
            if rank_metric == metric and alg in paper:
                picks.append(("paper's", paper[alg]))
            if len(picks) == 2 and picks[0][1] == picks[1][1]:
                picks = [(f"{label} = paper's", picks[0][1])]
            for what, (c, s) in picks:
                sel = rows[(rows[CL] == c) & (rows[SL] == s)]
                done = sel[sel["status"] == "finished"]
                status = "" if len(done) == len(sel) else f" ({len(sel) - len(done)} not finished)"
                cells = [alg, f"{what}: {c:g}, {s:g}{status}", *[pm(done[m]) for m in cols]]
                if first:
                    cells.append(first(sel))
                cells.append(str(len(sel)))
                shown.append((alg, what.split(":")[0], c, s, done))
                lines.append("| " + " | ".join(cells) + " |")
        per_seed = rows.groupby([CL, SL])["status"].apply(lambda s: (s == "finished").all())
        summary.append(f"{alg}: {int(per_seed.sum())} of {len(per_seed)} pairs finished on every seed")
    return "\n".join(lines) + "\n\n" + "\n".join(summary), shown


def grid_table(t: pd.DataFrame, metric: str) -> str:
    """Markdown: per algorithm and client rate, the mean final `metric` over seeds at each
    server rate (with the ergodic gap in brackets where there is one); a pair with a seed that
    did not finish shows `-`."""
    servers = sorted(t[SL].unique(), reverse=True)
    lines = ["| algorithm | client_lr | " + " | ".join(f"`eta_s = {s:g}`" for s in servers) + " |",
             "|---|---|" + "---|" * len(servers)]
    for (alg, c), rows in sorted(t.groupby(["algorithm", CL]), key=lambda kv: (kv[0][0], -kv[0][1])):
        cells = []
        for s in servers:
            sel = rows[rows[SL] == s]
            if sel.empty or (sel["status"] != "finished").any():
                cells.append("-")
                continue
            cell = f"{sel[metric].mean():.3g}"
            if "duality_gap_ergodic" in sel and sel["duality_gap_ergodic"].notna().all():
                cell += f" ({sel['duality_gap_ergodic'].mean():.3g})"
            cells.append(cell)
        lines.append(f"| {alg} | {c:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(data, shown, metrics, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.8))
    colors = dict(zip(sorted({a for a, *_ in shown}), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for ax, metric in zip(np.atleast_1d(axes), metrics):
        for alg, what, c, s, done in shown:
            if done.empty:
                continue
            curves = pd.concat([data.history(r, metric) for r in done["run_id"]], axis=1)
            ax.plot(curves.index, curves.mean(axis=1), color=colors[alg],
                    ls="-" if what.startswith("best") else "--",
                    label=f"{alg} {c:g} / {s:g} ({what}, n={len(done)})")
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        if metric in ("train_loss", "duality_gap", "duality_gap_ergodic", "val_mse"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    with replacing(path) as temp:
        fig.savefig(temp, dpi=110, metadata={"Software": None})


if __name__ == "__main__":
    main()
