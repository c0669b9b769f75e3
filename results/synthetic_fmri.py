"""E3 and E4 on the synthetic_fmri stand-in: run the shipped sweep files, record, judge.

    python results/synthetic_fmri.py e3            # run, write the records and results/e3_synthetic.md
    python results/synthetic_fmri.py e4            # the same for E4: results/e4_synthetic.md
    python results/synthetic_fmri.py e3 --page     # only rewrite the page from the records

Every configuration of the sweep files runs as `fco-ray sweep` would run it (the same
trial configs, fused into the same groups, on the local backend) but without Tune and
MLflow. Records: `results/<exp>_synthetic_rounds.csv` (every evaluated row kept, E4: every
10th round and the last), `results/<exp>_synthetic_trials.csv` (one row per configuration:
final metrics, evaluated rounds, rounds with a finite objective) and
`results/<exp>_synthetic_run.json` (the command, wall time, load). The page is written
from these records alone, so `--page` reproduces it exactly (tests/e2e/test_synthetic_pages.py).

Judging: per method the rate pair with the best mean final `val_accuracy` over the seeds
(the sweeps' tuning metric, as `fco-ray runs --best`). Each seed draws its own data, so the
methods are compared seed by seed: a claim that method A beats B on a metric holds when the
mean over the seeds of the difference A - B exceeds the seed spread (the standard deviation
over the seeds of that difference), is reversed when it exceeds it the other way, and is
"within the seed spread" otherwise (then it does not hold either).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from fco_ray.display import display_name
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]

HERE = ROOT / "results"
L2 = ["problem.constraint=l2_ball", "problem.radius=2"]
#: experiment -> [(variant label, sweep file, overrides)], the rounds kept in the rounds CSV
EXPERIMENTS = {
    "e3": {"runs": [("sparse logreg", "sweeps/e3_synthetic.yaml", []),
                    ("sparse logreg", "sweeps/e3_synthetic_baselines.yaml", [])], "keep_every": 10},
    "e4": {"runs": [("logreg, l1 ball", "sweeps/e4_synthetic.yaml", []),
                    ("logreg, l2 ball", "sweeps/e4_synthetic.yaml", L2),
                    ("MLP, l1 balls", "sweeps/e4_synthetic_mlp.yaml", [])], "keep_every": 10},
}
FEDERATED = ["feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp", "fedavg_subgrad"]
NAMES = {**{a: display_name(a) for a in FEDERATED}, "centralized": "centralized",
         "local": "local (client 0 alone)"}  # the baselines described, not only named
CL, SL = "client_lr", "server_lr"
METRICS = ["val_accuracy", "train_accuracy", "density", "f1", "precision", "recall", "train_loss"]


# ---- running ----------------------------------------------------------------------------

def run_experiment(exp: str, out: Path = HERE, extra: list[str] = ()) -> None:
    from fco_ray.core.plan import prepare_groups
    from fco_ray.sweep.checks import load_sweep

    rows, trials = [], []
    keep = EXPERIMENTS[exp]["keep_every"]
    start = time.time()
    load_start = os.getloadavg()[0]
    for variant, path, overrides in EXPERIMENTS[exp]["runs"]:
        sweep = load_sweep(ROOT / path, [*overrides, *extra])
        points = list(sweep.grid_points())
        configs = [sweep.run_config(p) for p in points]
        point_of = {id(c): p for c, p in zip(configs, points)}
        for prepared in prepare_groups(configs):
            info = prepared.problem.info
            for cfg, result in zip(prepared.configs, prepared.run()):
                p = point_of[id(cfg)]
                key = {"variant": variant, "algorithm": p["algorithm.name"], "seed": p["seed"],
                       CL: p.get("algorithm.client_lr", math.nan), SL: p.get("algorithm.server_lr", math.nan)}
                losses = [r["train_loss"] for r in result.records]
                last = result.records[-1]
                trials.append({**key, "status": result.status, "final_round": last["round"],
                               "evaluated_rounds": len(losses),
                               "finite_objective_rounds": int(np.sum(np.isfinite(losses))),
                               "bayes_accuracy": info["bayes_accuracy"],
                               "truth_density": float(np.mean(np.asarray(info["w_true"]) != 0)),
                               **{m: last.get(m, math.nan) for m in METRICS}})
                for r in result.records:
                    if r["round"] % keep == 0 or r is last:
                        rows.append({**key, "round": r["round"], **{m: r.get(m, math.nan) for m in METRICS}})
    wall = time.time() - start
    drop = lambda df: df.dropna(axis=1, how="all")  # noqa: E731  metrics the problems lack
    write_file(out / f"{exp}_synthetic_trials.csv",
               drop(pd.DataFrame(trials)).to_csv(index=False, float_format="%.6g"))
    write_file(out / f"{exp}_synthetic_rounds.csv",
               drop(pd.DataFrame(rows)).to_csv(index=False, float_format="%.6g"))
    sets = "".join(f" --set {o}" for o in extra)
    meta = {"command": f"OPENBLAS_NUM_THREADS=1 nice -n 10 python results/synthetic_fmri.py {exp}{sets}",
            "wall_seconds": round(wall, 1), "date": time.strftime("%Y-%m-%d"),
            "load_average_start": round(load_start, 1), "load_average_end": round(os.getloadavg()[0], 1),
            "configurations": len(trials)}
    write_file(out / f"{exp}_synthetic_run.json", json.dumps(meta, indent=1) + "\n")


# ---- judging ----------------------------------------------------------------------------

def fmt(x: float, digits: int = 3) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def pm(v: pd.Series) -> str:
    v = v.dropna().astype(float)
    return "–" if v.empty else f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if len(v) > 1 else fmt(v.mean())


def best_pairs(trials: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """(variant, algorithm) -> the trials (one per seed) of its best rate pair by mean final
    val_accuracy; a pair with a seed that did not finish ranks last."""
    out = {}
    for (variant, alg), t in trials.groupby(["variant", "algorithm"], sort=False):
        scores = []
        for pair, g in t.groupby([CL, SL], dropna=False):
            ok = (g["status"] == "finished").all()
            scores.append((ok, g["val_accuracy"].mean(), pair))
        ok, _, pair = max(scores, key=lambda s: (s[0], s[1]))
        sel = t[(t[CL].fillna(-1) == (-1 if pd.isna(pair[0]) else pair[0]))
                & (t[SL].fillna(-1) == (-1 if pd.isna(pair[1]) else pair[1]))]
        out[variant, alg] = sel.sort_values("seed")
    return out


def rates_text(t: pd.DataFrame) -> str:
    r = t.iloc[0]
    parts = [f"{k} {r[k]:g}" for k in (CL, SL) if math.isfinite(r[k])]
    return ", ".join(parts) if parts else "no rates"


def differences(a: pd.Series, b: pd.Series) -> np.ndarray:
    """The per-seed differences a - b (both in seed order)."""
    return np.asarray(a, dtype=float) - np.asarray(b, dtype=float)


def spread_of(d: np.ndarray) -> float:
    return float(d.std(ddof=1)) if len(d) > 1 else 0.0  # one seed: no spread


def compare(a: pd.Series, b: pd.Series, sign: int) -> tuple[str, np.ndarray]:
    """Verdict that sign * (a - b) > 0 beyond the seed spread, and the per-seed differences."""
    d = differences(a, b)
    diff, spread = float(d.mean()), spread_of(d)
    if sign * diff > spread:
        return "holds", d
    if sign * diff < -spread:
        return "does not hold (reversed)", d
    return "does not hold (within the seed spread)", d


def not_below(a: pd.Series, b: pd.Series, tol: float) -> tuple[str, np.ndarray]:
    """Verdict that a is on average at most `tol` below b."""
    d = differences(a, b)
    return ("holds" if d.mean() >= -tol else "does not hold"), d


def claim_row(text: str, verdict: tuple[str, np.ndarray]) -> str:
    v, d = verdict
    return f"| {text} | **{v}** | {d.mean():+.3f} | {spread_of(d):.3f} | {' / '.join(f'{x:+.3f}' for x in d)} |"


def robustness(trials: pd.DataFrame, methods: list[str], rel: float = 0.01) -> pd.DataFrame:
    """Per seed and method: the share of its rate pairs whose final val_accuracy is within
    `rel` (relative) of the best final val_accuracy of any of `methods` on that seed."""
    t = trials[trials["algorithm"].isin(methods)]
    out = []
    for seed, s in t.groupby("seed"):
        best = s["val_accuracy"].max()
        for alg, g in s.groupby("algorithm"):
            ok = (g["status"] == "finished") & (g["val_accuracy"] >= (1 - rel) * best)
            out.append({"seed": seed, "algorithm": alg, "share": float(ok.mean())})
    return pd.DataFrame(out)


def seeds_text(trials: pd.DataFrame) -> str:
    seeds = sorted(trials["seed"].unique())
    return f"seeds {', '.join(str(s) for s in seeds)}"


def marks(rounds: pd.DataFrame, wanted=(10, 30, 100, 300)) -> list[int]:
    """The rounds shown by round: those of `wanted` that were evaluated, and the last."""
    have = set(rounds["round"])
    last = int(rounds["round"].max())
    return sorted({r for r in wanted if r in have and r < last} | {last})


def header(exp: str, meta: dict, files: list[str]) -> list[str]:
    return [f"Recorded {meta['date']} on the shared 2-core machine by `results/synthetic_fmri.py` "
            f"from the shipped sweep files ({', '.join(f'`{f}`' for f in files)}): "
            f"{meta['configurations']} configurations, {meta['wall_seconds'] / 60:.1f} min wall "
            f"(load average {meta['load_average_start']} at the start, {meta['load_average_end']} "
            "at the end; other jobs shared the machine).", "",
            "```bash", meta["command"], f"python results/synthetic_fmri.py {exp} --page   # the page again, from the records",
            "```", ""]


def by_round_table(rounds: pd.DataFrame, best: dict, variant: str, algs: list[str],
                   metrics: list[str], marks: list[int]) -> list[str]:
    head = "| method | " + " | ".join(f"{m} @ {r}" for m in metrics for r in marks) + " |"
    lines = [head, "|---|" + "---|" * (len(metrics) * len(marks))]
    for alg in algs:
        if (variant, alg) not in best:
            continue
        t = best[variant, alg]
        r = rounds[(rounds["variant"] == variant) & (rounds["algorithm"] == alg)
                   & (rounds[CL].fillna(-1) == t[CL].fillna(-1).iloc[0])
                   & (rounds[SL].fillna(-1) == t[SL].fillna(-1).iloc[0])]
        cells = []
        for m in metrics:
            for mark in marks:
                v = r[r["round"] == mark][m]
                cells.append(pm(v) if len(v) else "–")
        lines.append(f"| {NAMES[alg]} | " + " | ".join(cells) + " |")
    return lines


def final_table(best: dict, variant: str, algs: list[str], metrics: list[str], extra=None) -> list[str]:
    lines = ["| method | best rates | " + " | ".join(metrics) + (" | " + extra[0] if extra else "") + " |",
             "|---|---|" + "---|" * (len(metrics) + (1 if extra else 0))]
    for alg in algs:
        if (variant, alg) not in best:
            continue
        t = best[variant, alg]
        cells = [pm(t[m]) if m in t else "–" for m in metrics]
        if extra:
            cells.append(extra[1](variant, alg))
        lines.append(f"| {NAMES[alg]} | {rates_text(t)} | " + " | ".join(cells) + " |")
    return lines


def setting(exp: str, index: int = 0) -> tuple[object, object]:
    """(the validated problem parameters with their defaults, the sweep file) of run `index`
    of `exp`: the page describes what the sweep files say."""
    from fco_ray.core.config import parse_problem
    from fco_ray.sweep.schema import read_sweep_file

    _, path, overrides = EXPERIMENTS[exp]["runs"][index]
    spec = read_sweep_file(ROOT / path, overrides)
    return parse_problem(spec.problem), spec


def values(xs) -> str:
    return "{" + ", ".join(f"{x:g}" for x in xs) + "}"


def data_text(p) -> str:
    """The stand-in's data in words, from its parameters."""
    n_train = p.clients * p.subjects_per_client * p.scans_per_subject
    n_val = p.val_clients * p.subjects_per_client * p.scans_per_subject
    maps = "a smooth sparse weight map" if getattr(p, "conditions", 2) == 2 else \
        f"{p.conditions - 1} smooth sparse weight maps (condition 0 the reference)"
    return (f"`dataset: synthetic_fmri` (`fco_ray/data/synthetic_fmri.py`): {maps} on a {p.grid} x {p.grid} "
            f"x {p.grid} voxel grid ({p.support} nonzero voxels per map, from {p.blobs} signed Gaussian bumps of "
            f"width {p.smoothness:g}), voxel noise smoothed over space (width {p.noise_smoothness:g}), "
            f"{p.subjects_per_client} subjects of {p.scans_per_subject} scans per client with a per-subject "
            f"offset (scale {p.subject_shift:g}), {p.clients} training clients ({n_train:,} scans), "
            f"{p.val_clients} validation clients of held-out subjects ({n_val:,} scans), labels from the "
            f"logistic model (logit standard deviation {p.signal:g}). Each seed draws its own data and truth.")


def schedule_text(spec, p) -> str:
    a = spec.algorithm
    grid = spec.search.grid
    rates = " x ".join(f"{k.split('.')[-1].replace('_lr', '')} {values(v)}" for k, v in grid.items())
    return (f"{spec.rounds} rounds, K = {a['local_steps']} local steps of batch {a['batch_size']}, "
            f"{a['clients_per_round']} of {p.clients} clients per round; rates: {rates}")


CLAIM_HEAD = ["| claim | verdict | mean difference | seed spread of the difference | per seed |",
              "|---|---|---|---|---|"]


def e3_page(trials: pd.DataFrame, rounds: pd.DataFrame, meta: dict) -> str:
    best = best_pairs(trials)
    b = {alg: t for (_, alg), t in best.items()}
    fda = b["feddualavg"]
    acc, dens, f1 = "val_accuracy", "density", "f1"
    claims = [
        ("FedDualAvg is about as accurate as centralized (at most 0.01 below)",
         not_below(fda[acc], b["centralized"][acc], 0.01)),
        ("FedDualAvg is more accurate than local (one client)", compare(fda[acc], b["local"][acc], +1)),
        ("FedDualAvg is more accurate than FedAvg(subgradient)", compare(fda[acc], b["fedavg_subgrad"][acc], +1)),
        ("FedDualAvg is more accurate than FedMiD", compare(fda[acc], b["fedmid"][acc], +1)),
        ("FedDualAvg is more accurate than FedMiD-OSP", compare(fda[acc], b["fedmid_osp"][acc], +1)),
        ("FedDualAvg is more accurate than FedDualAvg-OSP", compare(fda[acc], b["feddualavg_osp"][acc], +1)),
        ("FedDualAvg is sparser than FedMiD", compare(fda[dens], b["fedmid"][dens], -1)),
        ("FedDualAvg is sparser than FedMiD-OSP", compare(fda[dens], b["fedmid_osp"][dens], -1)),
        ("FedDualAvg is sparser than FedAvg(subgradient)", compare(fda[dens], b["fedavg_subgrad"][dens], -1)),
        ("FedDualAvg-OSP is as sparse as FedDualAvg or sparser", compare(b["feddualavg_osp"][dens], fda[dens], -1)),
    ]
    truth = [("FedDualAvg's support F1 is higher than FedMiD's", compare(fda[f1], b["fedmid"][f1], +1)),
             ("FedDualAvg's support F1 is higher than FedMiD-OSP's", compare(fda[f1], b["fedmid_osp"][f1], +1)),
             ("FedDualAvg's support F1 is higher than FedAvg(subgradient)'s", compare(fda[f1], b["fedavg_subgrad"][f1], +1)),
             ("FedDualAvg's support F1 is at least centralized's", compare(fda[f1], b["centralized"][f1], +1))]
    share = robustness(trials, FEDERATED)
    per = {alg: g.sort_values("seed")["share"].reset_index(drop=True) for alg, g in share.groupby("algorithm")}
    robust = [(f"FedDualAvg has a larger share of its rate grid within 1% of the best than {NAMES[o]}",
               compare(per["feddualavg"], per[o], +1)) for o in FEDERATED if o != "feddualavg"]
    bayes = trials.groupby("seed")["bayes_accuracy"].first()
    tdens = trials.groupby("seed")["truth_density"].first()
    v, seeds, last, shown = "sparse logreg", seeds_text(trials), int(rounds["round"].max()), marks(rounds)
    lines = ["# E3 on a stand-in with a known sparse truth (FCO paper, Figs. 1 and 5)", ""]
    lines += header("e3", meta, ["sweeps/e3_synthetic.yaml", "sweeps/e3_synthetic_baselines.yaml"])
    p, spec = setting("e3")
    lines += ["## Setting", "",
              "Without a Haxby copy the E3 sweeps run on digits 3 vs 8, a task too easy to separate the "
              "methods. This stand-in has a known sparse truth and a ceiling below 1: " + data_text(p),
              f"l1-regularized logistic regression, lam = {p.lam:g}; {schedule_text(spec, p)} (local: the "
              "client rates only, server rate 1; centralized: FISTA on the pooled training data, one "
              "iteration per round, no rates).", "",
              f"Ceiling: the true model's validation accuracy (Bayes) {pm(bayes)}; true density "
              f"{pm(tdens)} ({seeds}).", "",
              f"## Final values (round {last}), mean ± std over {seeds}, at each method's best rates", ""]
    algs = ["centralized", "local", *FEDERATED]
    lines += final_table(best, v, algs, ["val_accuracy", "train_accuracy", "density", "f1", "precision", "recall"])
    lines += ["", "## Accuracy and density by round (best rates)", ""]
    lines += by_round_table(rounds, best, v, algs, ["val_accuracy"], shown)
    lines += [""]
    lines += by_round_table(rounds, best, v, algs, ["density"], shown)
    lines += ["", "## Robustness to the rates (Fig. 5)", "",
              f"Share of a method's {trials[trials['algorithm'] == 'feddualavg'].groupby([CL, SL]).ngroups} rate pairs whose final validation accuracy is within 1% (relative) "
              "of the best final validation accuracy of any federated method on that seed (a pair that "
              "diverged counts as outside):", "",
              "| method | share (mean ± std over seeds) | per seed |", "|---|---|---|"]
    for alg in FEDERATED:
        lines.append(f"| {NAMES[alg]} | {pm(per[alg])} | {' / '.join(f'{v:.2f}' for v in per[alg])} |")
    lines += ["", "## Verdicts", "",
              "The paper's claims (Fig. 1: FedDualAvg comparable to centralized, far better than local and "
              "FedAvg; the FCO experiments' FedMiD / OSP comparisons; Fig. 5: robustness to the rates), "
              "each judged on this stand-in as described at the top of `results/synthetic_fmri.py`:", ""]
    lines += CLAIM_HEAD + [claim_row(t, v) for t, v in claims + robust]
    lines += ["", "Support recovery against the known truth (not a claim of the paper, which has no truth):", ""]
    lines += CLAIM_HEAD + [claim_row(t, v) for t, v in truth]
    held = sum(v[0] == "holds" for _, v in claims + robust)
    lines += ["", f"{held} of {len(claims) + len(robust)} of the paper's claims hold on this stand-in "
              f"beyond the seed spread.", ""]
    return "\n".join(lines)


def e4_page(trials: pd.DataFrame, rounds: pd.DataFrame, meta: dict) -> str:
    best = best_pairs(trials)
    algs = ["feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp"]
    lines = ["# E4 on a stand-in with a known sparse truth (FCO paper, App. B.5)", ""]
    lines += header("e4", meta, ["sweeps/e4_synthetic.yaml", "sweeps/e4_synthetic_mlp.yaml"])
    bayes = trials.groupby("seed")["bayes_accuracy"].first()
    p, spec = setting("e4")
    l2, _ = setting("e4", 1)
    mlp, _ = setting("e4", 2)
    lines += ["## Setting", "",
              "On digits the E4 methods end close together. This stand-in has a known sparse truth: "
              + data_text(p),
              f"Multinomial logistic regression with the weight matrix in an l1 ball of radius {p.radius:g} "
              f"or an l2 ball of radius {l2.radius:g} (`{' '.join('--set ' + o for o in L2)}`), and an MLP "
              f"with hidden layers {mlp.hidden}, ReLU, each weight matrix in an l1 ball of radius "
              f"{mlp.radius:g}; biases free. {schedule_text(spec, p)}. Every round is evaluated: a server model "
              "outside its ball has `train_loss = inf`, which ends its run as diverged.", "",
              f"Ceiling: the true model's validation accuracy (Bayes) {pm(bayes)} ({seeds_text(trials)}).", ""]
    variants = list(dict.fromkeys(trials["variant"]))
    feas_rows = ["| problem | configurations finished | their server models evaluated | with a finite objective (feasible) |",
                 "|---|---|---|---|"]
    finished = trials[trials["status"] == "finished"]
    all_feasible = bool((finished["finite_objective_rounds"] == finished["evaluated_rounds"]).all())
    for variant in variants:
        t = trials[trials["variant"] == variant]
        f = t[t["status"] == "finished"]
        feas_rows.append(f"| {variant} | {len(f)} of {len(t)} | {int(f['evaluated_rounds'].sum()):,} | "
                         f"{int(f['finite_objective_rounds'].sum()):,} |")
    diverged = trials[trials["status"] != "finished"]
    ended = []
    for (variant, alg, cl, sl), g in diverged.groupby(["variant", "algorithm", CL, SL], sort=False):
        ended.append(f"- {variant}, {NAMES[alg]}, client_lr {cl:g}, server_lr {sl:g}: seeds "
                     f"{', '.join(str(x) for x in g['seed'])}, records end at rounds "
                     f"{', '.join(str(int(x)) for x in g['final_round'])} (final objective "
                     f"{', '.join(fmt(x) for x in g['train_loss'])})")
    claims = {}
    for variant in variants:
        b = {alg: t for (v, alg), t in best.items() if v == variant}
        fda = b["feddualavg"]
        c = [(f"FedDualAvg is more accurate than {NAMES[o]}", compare(fda["val_accuracy"], b[o]["val_accuracy"], +1))
             for o in algs[1:]]
        if "l1" in variant:
            c += [(f"FedDualAvg is sparser than {NAMES[o]}", compare(fda["density"], b[o]["density"], -1))
                  for o in ("fedmid", "fedmid_osp")]
        claims[variant] = c
    lines += ["## Every iterate feasible", "",
              f"**{'holds' if all_feasible else 'does not hold'}** for every run that finished: each of its "
              f"server models (every round, 0-{int(rounds['round'].max())}) has a finite objective, so lies in "
              "its balls:", ""] + feas_rows
    if ended:
        lines += ["", f"{len(diverged)} runs diverged: the engine ends a run at its first server model whose "
                  "objective is not finite or above 1000 times its start, and the record keeps the rows up "
                  "to the last acceptable one. These records do not say whether that model was outside its "
                  "ball or blew up:", ""] + ended
    lines += ["", "Client iterates are prox (projection) outputs of FedMiD and FedDualAvg (the OSP variants "
              "project only on the server) and are checked one by one in "
              "`tests/engine/test_synthetic_fmri_runs.py`.", ""]
    for variant in variants:
        last = int(rounds["round"].max())
        lines += [f"## {variant}: final values (round {last}), mean ± std over {seeds_text(trials)}, best rates", ""]
        lines += final_table(best, variant, algs, ["val_accuracy", "train_accuracy", "density", "train_loss"])
        lines += ["", "By round (best rates):", ""]
        lines += by_round_table(rounds, best, variant, algs, ["val_accuracy", "density"], marks(rounds))
        lines += ["", "Verdicts (the paper's \"FedDualAvg outperforms the other baselines\", and its sparsity "
                  "under an l1 constraint; judged as at the top of `results/synthetic_fmri.py`):", ""]
        lines += CLAIM_HEAD + [claim_row(t, v) for t, v in claims[variant]] + [""]
    every = [v for c in claims.values() for _, v in c]
    lines += [f"{sum(v[0] == 'holds' for v in every)} of {len(every)} accuracy and sparsity comparisons hold "
              "beyond the seed spread.", ""]
    return "\n".join(lines)


def page_text(exp: str, where: Path = HERE) -> str:
    """The page of `exp` from the records in `where`."""
    trials = pd.read_csv(where / f"{exp}_synthetic_trials.csv")
    rounds = pd.read_csv(where / f"{exp}_synthetic_rounds.csv")
    meta = json.loads((where / f"{exp}_synthetic_run.json").read_text())
    return (e3_page if exp == "e3" else e4_page)(trials, rounds, meta)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--page", action="store_true", help="only rewrite the page from the records")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a value of every sweep file (a trial run: use with --out)")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the records and page (default results/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.page:
        run_experiment(args.experiment, args.out, args.sets)
    page = args.out / f"{args.experiment}_synthetic.md"
    write_file(page, page_text(args.experiment, args.out))
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
