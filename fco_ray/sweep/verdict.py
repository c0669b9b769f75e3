"""The closing lines of `fco-ray sweep`: the result in words, computed from the sweep's data.

What a newcomer needs after the best-configuration table: which algorithm won and by how
much, what the metric values mean against the known truth of a synthetic problem (density
0.5 on E1 is exactly the true support), which configurations diverged (so the grid is seen
to bracket the rates), which paper figure the sweep reproduces, and what to run next.
Only statements the data supports are made: a truth sentence needs the truth's parameters
in the trials' configs, the paper sentence only names the figure and its claim.
"""
from __future__ import annotations

import math

import pandas as pd

# problem -> (the paper figure it reproduces, that figure's claim, the paper-scale sweep file)
PAPERS = {
    "lasso": ("Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021), federated LASSO",
              "FedDualAvg recovers the sparse support, FedMiD's server model stays denser "
              "(the paper's \"curse of primal averaging\")", "sweeps/e1_lasso.yaml"),
    "lowrank": ("Fig. 4 of Yuan, Zaheer, Reddi (ICML 2021), low-rank matrix estimation",
                "FedDualAvg reaches the true rank, FedMiD stays above it", "sweeps/e2_lowrank.yaml"),
    "sparse_logreg": ("Figs. 1 and 5 of Yuan, Zaheer, Reddi (ICML 2021), sparse logistic regression",
                      "FedDualAvg is sparse and about as accurate as centralized training",
                      "sweeps/e3_haxby.yaml"),
    "constrained_logreg": ("Appendix B.5 of Yuan, Zaheer, Reddi (ICML 2021), constrained learning",
                           "every iterate is feasible", "sweeps/e4_constrained.yaml"),
    "mlp": ("Appendix B.5 of Yuan, Zaheer, Reddi (ICML 2021), constrained MLP",
            "every iterate is feasible", "sweeps/e4_mlp.yaml"),
    "bilinear_l1": ("Figs. 4 and 5 of Bai, Bullins (ICLR 2024), composite bilinear saddle points",
                    "the extra-step methods reach a far smaller duality gap", "sweeps/e5_l1_k10.yaml"),
    "bilinear_nuclear": ("Figs. 4 and 5 of Bai, Bullins (ICLR 2024), nuclear-norm saddle points",
                         "FeDualEx finds a low-rank solution", "sweeps/e5_nuclear_k10.yaml"),
    "adversarial": ("Figs. 6 and 7 of Bai, Bullins (ICLR 2024), universal adversarial training",
                    "FeDualEx's attack is sparser than PGDA's at equal accuracy",
                    "sweeps/e6_adversarial.yaml"),
    "sparse_text_logreg": ("Fig. 2 of Konecny, McMahan, Ramage, Richtarik (2016), federated SVRG",
                           "FSVRG nears the optimum in tens of rounds, GD far slower",
                           "sweeps/e7_fsvrg.yaml"),
}
RATES = {"algorithm.client_lr": "client_lr", "algorithm.server_lr": "server_lr"}


def _num(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) and abs(v) < 1000 else f"{v:.4g}"


def _where(row, keys: list[str]) -> str:
    """`client_lr=0.01, server_lr=3` of a best row, over the searched keys."""
    parts = [f"{RATES.get(k, k)}={row[k]:g}" if isinstance(row[k], (int, float)) else f"{RATES.get(k, k)}={row[k]}"
             for k in keys if k in row and row[k] is not None and not (isinstance(row[k], float) and math.isnan(row[k]))]
    return ", ".join(parts)


def truth_sentence(row, trials: pd.DataFrame) -> str | None:
    """What the best configuration's metrics mean against the synthetic problem's truth."""
    problem = row.get("problem.name")
    if problem == "lasso" and "density" in row and row.get("problem.support") and row.get("problem.dim"):
        support, dim = int(row["problem.support"]), int(row["problem.dim"])
        kept = round(float(row["density"]) * dim)
        truth = support / dim
        precision = row.get("precision")
        if kept == support and precision is not None and precision >= 0.9995:
            return (f"density {row['density']:.3f} = exactly the true support ({support} of {dim} "
                    f"features), precision {precision:.3f}: every true feature kept, no false one")
        text = (f"density {row['density']:.3f} = {kept} features kept for {support} true ones "
                f"(truth {truth:.3f})")
        recall = row.get("recall")
        if precision is not None and not math.isnan(precision):
            text += f", precision {precision:.3f}"
        if recall is not None and not math.isnan(recall):
            false = kept - round(recall * support)  # kept = true positives + false ones
            text += f", recall {recall:.3f}"
            if false > 0:
                text += f": {false} false features, denser than the truth"
        return text
    if problem == "lowrank" and "rank" in row and row.get("problem.rank"):
        rank, true = float(row["rank"]), int(row["problem.rank"])
        if round(rank) == true:
            return f"rank {rank:g} = exactly the true rank {true}"
        return f"rank {rank:g} against the true rank {true} ({'above' if rank > true else 'below'} it)"
    return None


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
        named += [_where(r, [k for k in searched if k in r]) for _, r in left.iterrows()]
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
    from ..report.grid import diverges_outward

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


def verdict_lines(best: pd.DataFrame, trials: pd.DataFrame, metric: str, mode: str,
                  searched: list[str], sweep_file: str | None = None) -> list[str]:
    """The closing lines: winner and margin, truth, divergence, paper figure, next command."""
    if best.empty or "score" not in best:
        return ["verdict: no configuration finished; see the diverged runs above"]
    order = best.sort_values("score", ascending=(mode == "min")).reset_index(drop=True)
    keys = [k for k in searched if k in order]
    lines = []
    top = order.iloc[0]
    head = f"verdict: {top['algorithm']} wins on final {metric}: {_num(top['score'])} at {_where(top, keys)}"
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
    problem = top.get("problem.name")
    if problem in PAPERS:
        figure, claim, full = PAPERS[problem]
        seeds = len(top["seeds"]) if isinstance(top.get("seeds"), list) else None
        rounds = top.get("rounds")
        scale = f" ({seeds} seed{'s' if seeds != 1 else ''}, {int(rounds)} rounds here)" if seeds and rounds else ""
        lines.append(f"  this reproduces {figure}{scale}: {claim}")
        if sweep_file is not None and not str(sweep_file).endswith(full):
            lines.append(f"  next: fco-ray sweep {full}   (the paper's grid, seeds and rounds; "
                         "recorded results: docs/results.md)")
    return lines
