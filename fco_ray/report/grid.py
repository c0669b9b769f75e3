"""The searched grid seen from the report: every configuration of an algorithm (its trials,
one per seed), and the best configurations that sit on the edge of a searched axis."""
from __future__ import annotations

import numbers

import pandas as pd

from .data import SweepData, combined_status

MAX_GRID_VALUES = 15  # more distinct values on an axis: a random search, not a grid


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def configurations(data: SweepData, algorithm: str) -> list[dict]:
    """The configurations one algorithm ran: each a dict with `params` (the searched values
    that vary within this algorithm, by dotted key), `run_ids` (one per seed), `seeds` and
    `status` (`finished` when every seed finished, else why not), in the order of the
    sorted parameter values."""
    trials = data.trials[data.trials["algorithm"] == algorithm]
    keys = [p for p in data.params() if p != "algorithm.name" and p in trials
            and trials[p].map(str).nunique() > 1]
    if not keys:
        groups = [((), trials)]
    else:
        groups = list(trials.groupby(trials[keys].map(str).agg("|".join, axis=1), sort=False))
    out = []
    for _, g in groups:
        out.append({"params": {k: g[k].iloc[0] for k in keys}, "run_ids": g["run_id"].tolist(),
                    "seeds": g["seed"].tolist() if "seed" in g else [],
                    "status": combined_status(g["status"])})

    def order(config):
        return tuple((0, v, "") if _number(v) else (1, 0, str(v)) for v in config["params"].values())
    return sorted(out, key=order)


def searched_axes(data: SweepData) -> dict[str, list]:
    """Grid axes with at least two numeric values, by dotted key: the sweep file's
    `search.grid` when it was logged, else every varying hyperparameter with a few numeric
    values (a random search axis has no edge worth warning about)."""
    grid = (data.sweep.get("search") or {}).get("grid") if isinstance(data.sweep.get("search"), dict) else None
    if isinstance(grid, dict):
        axes = {k: v for k, v in grid.items() if isinstance(v, list)}
    else:
        axes = {}
        for p in data.params():
            column = data.trials[p].dropna().tolist()
            if p != "algorithm.name" and all(_number(v) for v in column) \
                    and len(set(column)) <= MAX_GRID_VALUES:
                axes[p] = column
    return {k: sorted(set(v)) for k, v in axes.items()
            if len(set(v)) >= 2 and all(_number(x) for x in v)}


def edge_warnings(data: SweepData, best: dict[str, pd.DataFrame]) -> list[str]:
    """One sentence per algorithm and axis where the best configuration takes the smallest or
    largest value the algorithm ran on a searched axis: the optimum may lie beyond it. No
    warning where the sweep saw that direction fail (`diverges_outward`): e.g. the best
    client_lr is the largest, and that rate diverged with another server_lr where the next
    smaller rate did not, so "extend the grid that way" would point at divergence."""
    warnings = []
    for axis, values in searched_axes(data).items():
        short = axis.split(".")[-1]
        for alg, group in sorted(best.items()):
            if axis not in group or group[axis].isna().all():
                continue  # e.g. a baseline without server_lr
            ran = data.trials.loc[data.trials["algorithm"] == alg, axis].dropna()
            ran = sorted(v for v in set(ran.tolist()) if _number(v))
            if len(ran) < 2:
                continue
            chosen = group[axis].iloc[0]
            side = "smallest" if chosen == ran[0] else "largest" if chosen == ran[-1] else None
            if side is not None and diverges_outward(data.trials[data.trials["algorithm"] == alg], axis,
                                                     ran, chosen, list(searched_axes(data))):
                continue  # the sweep saw divergence going that way: never advise it
            if side is not None:
                warnings.append(f"{alg}: the best {short} = {chosen:g} is the {side} value searched "
                                f"({ran[0]:g} .. {ran[-1]:g}); the optimum may lie "
                                f"{'below' if side == 'smallest' else 'above'} it: extend "
                                f"search.grid.{axis} and sweep again")
    return warnings


def diverges_outward(trials: pd.DataFrame, axis: str, ran: list, edge, axes: list[str]) -> bool:
    """Whether one algorithm's trials show divergence caused by moving along `axis` to its
    `edge` value: a trial at the edge diverged while the trial with the same other searched
    values (and seed) one step inside on `axis` did not. Divergence at the edge that the
    inner value shares (e.g. a client rate that diverges at every server rate) says nothing
    about this axis."""
    inner = ran[1] if edge == ran[0] else ran[-2]
    others = [a for a in axes if a != axis and a in trials] + (["seed"] if "seed" in trials else [])
    for _, bad in trials[(trials[axis] == edge) & (trials["status"] == "diverged")].iterrows():
        same = trials[trials[axis] == inner]
        for key in others:
            same = same[same[key].map(str) == str(bad[key])]
        if (same["status"] != "diverged").any():
            return True
    return False
