"""The closing lines of `fco-ray sweep`: the result in words, computed from the sweep's data.

What a newcomer needs after the best-configuration table: which algorithm won and by how
much, what the metric values mean against the known truth of a synthetic problem (density
0.5 on E1 is exactly the true support), which configurations diverged (so the grid is seen
to bracket the rates), how the outcome compares with a paper's figure, and what to run next.
Only statements the data supports are made: a truth sentence needs the truth's parameters
in the trials' configs; a paper figure is named as reproduced only when every trial ran at
the figure's setting (declared with the figure in `fco_ray.experiments`) and its claims are
then checked one by one on this sweep's best configurations, agreeing or not. The order of
the best configurations is the one ranking of fco-ray (`tracking.queries.rank_configurations`,
the `place` column), which also orders the MLflow link's run list and the report's tables;
when other configurations reach the winner's score, the first line says how many and what
broke the tie (`tie_clause`).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..experiments import TRUTHS, nearest

RATES = {"algorithm.client_lr": "client_lr", "algorithm.server_lr": "server_lr"}


def _num(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) and abs(v) < 1000 else f"{v:.4g}"


def _where(row, keys: list[str]) -> str:
    """`client_lr=0.01, server_lr=3` of a best row, over the searched keys."""
    parts = [f"{RATES.get(k, k)}={row[k]:g}" if isinstance(row[k], (int, float)) else f"{RATES.get(k, k)}={row[k]}"
             for k in keys if k in row and row[k] is not None and not (isinstance(row[k], float) and math.isnan(row[k]))]
    return ", ".join(parts)


def truth_sentence(row, trials: pd.DataFrame) -> str | None:
    """What the best configuration's metrics mean against the synthetic problem's truth: the
    sentence its problem declares (`fco_ray.experiments.TRUTHS`), None for a problem that
    declares none or a row without the truth's parameters."""
    describe = TRUTHS.get(row.get("problem.name"))
    return describe(row) if describe else None


def diverged_sentence(trials: pd.DataFrame, searched: list[str]) -> str | None:
    """Which configurations diverged, compactly: an axis value at which every configuration
    of an algorithm diverged is named once (`client_lr=0.03 (every server_lr)`)."""
    if "status" not in trials or trials.empty:
        return None
    bad = trials[trials["status"] == "diverged"]
    if bad.empty:
        return None
    parts = []
    for alg, rows in bad.groupby("algorithm"):
        mine = trials[trials["algorithm"] == alg]
        left, named = rows, []
        for key in [k for k in searched if k in mine]:
            for value in sorted(set(rows[key].dropna())):
                if (mine[key] == value).sum() == (rows[key] == value).sum() and (left[key] == value).any():
                    others = [RATES.get(k, k) for k in searched if k != key and k in mine]
                    every = f" (every {', '.join(others)})" if others else ""
                    named.append(f"{RATES.get(key, key)}={value:g}{every}")
                    left = left[left[key] != value]
        named += dict.fromkeys(_where(r, [k for k in searched if k in r]) for _, r in left.iterrows())  # seeds: once
        parts.append((alg, "; ".join(named)))
    by_text: dict[str, list[str]] = {}  # algorithms that diverged at the same places: one clause
    for alg, text in parts:
        by_text.setdefault(text, []).append(alg)
    clauses = [f"{' and '.join(algs)} at {text}" for text, algs in by_text.items()]
    return (f"diverged (shown as diverged above): {len(bad)} of {len(trials)} runs, {'; '.join(clauses)}: "
            "the grid reaches rates too large to be stable")


def inside_grid(best: pd.DataFrame, trials: pd.DataFrame, searched: list[str]) -> bool:
    """Whether every best configuration is bracketed on every numeric searched axis: its value
    is neither the smallest nor the largest the algorithm ran, or the sweep saw moving to
    that edge diverge (then beyond it is no better place to look): the rule of the report's
    edge warnings (`report.grid.diverges_outward`), so the two never disagree."""
    from .grid import diverges_outward

    for _, row in best.iterrows():
        mine = trials[trials["algorithm"] == row["algorithm"]]
        for key in searched:
            if key not in mine or key not in row:
                continue
            ran = sorted({v for v in mine[key].dropna() if isinstance(v, (int, float)) and not isinstance(v, bool)})
            if len(ran) < 2 or row[key] not in (ran[0], ran[-1]):
                continue
            if not diverges_outward(mine, key, ran, row[key], [k for k in searched if k in mine]):
                return False
    return True


def tie_clause(top, trials: pd.DataFrame, metric: str, mode: str, keys: list[str]) -> str | None:
    """When other configurations reach the winner's score: how many, and what broke the tie,
    in the terms of the one ranking (`tracking.queries.rank_configurations`): the larger
    (max) or smaller (min) mean over seeds of `mean.<metric>`, the metric averaged over the
    evaluated rounds (the configuration that got there sooner), then the params as text.
    None when the winner's score is its own."""
    if trials.empty or metric not in trials or "status" not in trials:
        return None
    worst = math.inf if mode == "min" else -math.inf
    score = trials[metric].where((trials["status"] == "finished") & trials[metric].notna(), worst)
    by = ["algorithm", *[k for k in keys if k in trials]]
    other = [p for p in trials.attrs.get("params", []) if p != "seed" and p in trials and p not in by]
    frame = trials[by + other].map(str).assign(_score=score.astype(float))
    if f"mean.{metric}" in trials:
        frame["_speed"] = trials[f"mean.{metric}"].astype(float)
    configs = frame.groupby(by + other, sort=False).mean(numeric_only=True)
    tied = configs[np.isclose(configs["_score"], float(top["score"]), rtol=0, atol=1e-12)]
    if len(tied) < 2:
        return None
    algs = tied.index.get_level_values("algorithm")
    counts = pd.Series(algs).value_counts(sort=False)
    which = (f"all {counts.index[0]}" if len(counts) == 1
             else ", ".join(f"{n} {a}" for a, n in counts.items()))
    text = f"one of {len(tied)} configurations at {_num(float(top['score']))}, {which}"
    if "_speed" in tied and tied["_speed"].notna().sum() > 1:
        speeds = sorted(tied["_speed"].dropna(), reverse=(mode == "max"))  # best first
        sooner = "larger" if mode == "max" else "smaller"
        text += (f"; the ranking breaks the tie by the {sooner} mean {metric} over the evaluated "
                 f"rounds (the configuration that got there sooner): {_num(float(speeds[0]))} here, "
                 f"{_num(float(speeds[1]))} the next")
    else:
        text += "; the ranking breaks the tie by the configurations' parameters as text"
    return text


def verdict_lines(best: pd.DataFrame, trials: pd.DataFrame, metric: str, mode: str,
                  searched: list[str], sweep_file: str | None = None) -> list[str]:
    """The closing lines: winner and margin, truth, divergence, paper figure, next command."""
    if best.empty or "score" not in best:
        return ["verdict: no configuration finished; see the diverged runs above"]
    # best first: the ranking's place (tie-break included); `score` alone for a table without it
    order = (best.sort_values("place", kind="stable") if "place" in best
             else best.sort_values("score", ascending=(mode == "min"), kind="stable")).reset_index(drop=True)
    keys = [k for k in searched if k in order]
    lines = []
    top = order.iloc[0]
    tie = tie_clause(top, trials, metric, mode, keys)
    head = (f"verdict: {top['algorithm']} wins on final {metric}: {_num(top['score'])} at {_where(top, keys)}"
            + (f" ({tie})" if tie else ""))
    if len(order) > 1:
        second = order.iloc[1]
        margin = abs(top["score"] - second["score"])
        head += (f", against {second['algorithm']}'s best {_num(second['score'])} at "
                 f"{_where(second, keys)} (margin {_num(margin)})")
    lines.append(head)
    for _, row in order.iterrows():
        truth = truth_sentence(row, trials)
        if truth:
            lines.append(f"  {row['algorithm']}: {truth}")
    diverged = diverged_sentence(trials, keys)
    if diverged:
        inside = inside_grid(order, trials, keys)
        lines.append(f"  {diverged}" + (", and every best rate lies inside the grid" if inside else ""))
    lines += paper_lines(order, trials, sweep_file)
    return lines


def paper_lines(best: pd.DataFrame, trials: pd.DataFrame, sweep_file: str | None) -> list[str]:
    """The sweep beside the paper figure of its problem (`fco_ray.experiments`): its claims
    checked when every trial ran the figure's setting, else what differs and the sweep file
    that runs the figure's setting."""
    experiment, differs = nearest(trials.to_dict("records"))
    if experiment is None:
        return []
    if differs:
        what = "; ".join(f"{k} {', '.join(v)} here, {experiment.settings[k]} there"
                         for k, v in differs.items())
        lines = [f"  not the setting of {experiment.figure} ({what}): no paper claim is checked"]
        if sweep_file is None or not str(sweep_file).endswith(experiment.sweep_file):
            lines.append(f"  next: fco-ray sweep {experiment.sweep_file}   (that setting; "
                         "recorded results: docs/results.md)")
        return lines
    rows = {r["algorithm"]: r for r in best.to_dict("records")}
    checked, agree, out = 0, 0, []
    for claim in experiment.claims:
        missing = [a for a in claim.needs if a not in rows]
        if missing:
            out.append(f"    not checked: {claim.text} ({', '.join(missing)}: no finished configuration here)")
            continue
        result = claim.test(rows)
        if result is None:
            out.append(f"    not checked: {claim.text} (none of the methods it is compared with ran)")
            continue
        holds, shows = result
        checked, agree = checked + 1, agree + holds
        out.append(f"    {'agrees' if holds else 'disagrees'}: {claim.text}: {shows}")
    if not checked:
        head = (f"  {experiment.figure}, at its setting: none of its {len(experiment.claims)} claims "
                "can be checked on the methods this sweep ran")
    elif agree == checked == len(experiment.claims):
        head = f"  {experiment.figure}, at its setting: this sweep agrees with each of its claims"
    else:
        head = (f"  {experiment.figure}, at its setting: this sweep agrees with {agree} and disagrees "
                f"with {checked - agree} of its {len(experiment.claims)} claims"
                + (f" ({len(experiment.claims) - checked} not checked)" if checked < len(experiment.claims) else ""))
    return [head, *out]
