"""docs/results.md's E1 / E2 data conventions: results/conventions.json (results/conventions.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from results.pages.common import NAMES, RESULTS, block, para, span


def conventions(path: Path = RESULTS / "conventions.json") -> dict:
    return json.loads(path.read_text())


def listing(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def seeds_text(seeds: list[int]) -> str:
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"seeds {s[0]}-{s[-1]}"
    return f"seed{'s' if len(s) > 1 else ''} {listing([str(x) for x in s])}"


def lam_finding(exp: str, scan: dict) -> str:
    """`E1 `lam = 0.1` (support F1 = 1 for supports 512, 64 and 8; 0.03 gives ...)` from the
    centralized optima of the scan: the smallest scanned lam whose optimum has the true support
    (F1 exactly 1) or rank on every truth and seed, against the package default."""
    t = pd.DataFrame(scan["rows"])
    support = scan["key"] == "support"
    t["exact"] = t["f1"] == 1.0 if support else t["rank"] == t["truth"]
    recovers = t.groupby("lam")["exact"].all()
    found = [lam for lam in scan["lams"] if recovers[lam]]
    chosen, default = (min(found) if found else None), scan["problem"]["lam"]
    values = scan["values"]
    parts = []
    for lam in sorted(scan["lams"], key=lambda x: x != chosen):
        at = t[t["lam"] == lam].groupby("truth", sort=False)
        if lam == chosen:
            parts.append(f"support F1 = 1 for supports {listing([str(v) for v in values])}" if support
                         else f"rank {' / '.join(str(v) for v in values)} exactly")
        elif support:
            f1 = at["f1"].mean()
            parts.append(f"{lam:g} gives mean F1 {' / '.join(f'{f1[v]:.2f}' for v in values)}")
        else:
            parts.append(f"{lam:g} gives ranks {' / '.join(span(at.get_group(v)['rank']) for v in values)}")
    name = exp.upper()
    if chosen is None:
        return f"{name}: no scanned `lam` recovers the truth everywhere ({'; '.join(parts)}; default `lam = {default:g}`)"
    if chosen != default:
        return f"{name} `lam = {chosen:g}`, not the package default {default:g} ({'; '.join(parts)})"
    return f"{name} `lam = {chosen:g}` ({'; '.join(parts)})"


@block("results.conventions")
def results_conventions(record: dict | None = None) -> str:
    r = record or conventions()
    e1, e2 = r["lam_scan"]["e1"], r["lam_scan"]["e2"]
    p1, p2 = e1["problem"], e2["problem"]
    others = lambda scan: " | ".join(str(v) for v in scan["values"][1:])  # noqa: E731
    scanned = f"E1 {listing([f'{x:g}' for x in e1['lams']])}, E2 {listing([f'{x:g}' for x in e2['lams']])}"
    seeds = sorted({row["seed"] for row in e1["rows"]})
    return para(
        "**E1 / E2 data and conventions.** Learning rates and `lam` in the E1 / E2 sweep files are the FCO paper's "
        "numbers one to one: the loss is the paper's `(<x, w> + b - y)^2` (no 1/2), E1's default support is "
        f"{p1['support']} of {p1['dim']} (Fig. 3; `--set problem.support={others(e1)}`) and E2's rank {p2['rank']} "
        f"(`--set problem.rank={others(e2)}`). `lam` is the smallest value of a scan ({scanned}) at which the "
        "centralized optimum (FISTA, `fco_ray/algorithms/solvers.py`) recovers the truth on "
        f"{seeds_text(seeds)}: {lam_finding('e1', e1)}, {lam_finding('e2', e2)}. Measured by "
        f"`{r['command']}` ({r['date']}, commit {r['commit']}; record `results/conventions.json`).")


def diverged_detail(t: pd.DataFrame, algorithms: list[str], server_rates: list[float]) -> str:
    """`FedMiD and FedMiD-OSP at server rate 1 on 3 of 3 seeds; FedDualAvg at ...`: the
    diverged runs per algorithm and server rate, algorithms with the same count together."""
    phrases: dict[str, list[str]] = {}
    for alg in algorithms:
        each = []
        for sl in server_rates:
            g = t[(t["algorithm"] == alg) & (t["server_lr"] == sl)]
            k = int((g["status"] == "diverged").sum())
            if k:
                each.append(f"at server rate {sl:g} on {k} of {len(g)} seeds")
        if each:
            phrases.setdefault(" and ".join(each), []).append(NAMES.get(alg, alg))
    return "; ".join(f"{listing(algs)} {phrase}" for phrase, algs in phrases.items())


def detected(t: pd.DataFrame, every: int) -> str:
    """When the diverged runs of `t` ended: before the evaluation after their last recorded
    row (the engine also ends a run at any round whose model is not finite)."""
    rounds = t.loc[t["status"] == "diverged", "last_round"] + every
    lo, hi = int(rounds.min()), int(rounds.max())
    return f"by round {lo}" if lo == hi else f"by rounds {lo}-{hi}"


@block("results.shift")
def results_shift(record: dict | None = None) -> str:
    r = (record or conventions())["shift"]
    t = pd.DataFrame(r["rows"])
    cfg, problem, every = r["config"], r["problem"], r["config"]["eval_every"]
    alg = cfg["algorithm"]
    rates = list(dict.fromkeys(t["client_lr"]))
    main, rest = t[t["client_lr"] == rates[0]], t[t["client_lr"] != rates[0]]
    shifts = sorted(set(main["shift"]))
    ok = [s for s in shifts if (main.loc[main["shift"] == s, "status"] == "finished").all()]
    bad = [s for s in shifts if s not in ok]
    sh = lambda s: f"`shift = {s:g}`"  # noqa: E731
    per_shift = len(main) // len(shifts)
    found = []
    if ok:
        found.append(f"finishes all {per_shift} runs at {listing([sh(s) for s in ok])}")
    for s in bad:
        at = main[main["shift"] == s]
        found.append(f"diverges in {int((at['status'] == 'diverged').sum())} of {len(at)} at {sh(s)} "
                     f"(ended {detected(at, every)}): "
                     + diverged_detail(at, r["algorithms"], r["server_rates"]))
    text = ("**Client heterogeneity (`problem.shift`).** Client m's features are `mu_m + delta` with "
            "`mu_m ~ N(0, shift^2 I)`. The paper does not give the scale of `mu_m`. The shift adds an eigenvalue "
            f"of about `2 shift^2 d` to each client's Hessian (d = {problem['dim']}), which bounds the stable client "
            "rates. We measured the stability boundary at the paper's largest best rate: every E1 algorithm at "
            f"`client_lr = {rates[0]:g}` (K = {alg['local_steps']}, batch {alg['batch_size']}, "
            f"{alg['clients_per_round']} of {problem['clients']} clients per round, server rates "
            f"{listing([f'{x:g}' for x in r['server_rates']])}, {cfg['rounds']} rounds, {seeds_text(r['seeds'])}, "
            f"as `{r['sweep']}`) {'; it '.join(found)}. ")
    default = problem["shift"]
    below = [s for s in ok if not bad or s < min(bad)]
    norm = f"`||mu_m||^2 ~ shift^2 d ~ {default ** 2 * problem['dim']:.0f}`"
    if bad and below and default == max(below):
        text += (f"The default `shift = {default:g}` ({norm}) is the largest shift tried at which every run "
                 f"finished, a factor {min(bad) / default:g} below the smallest at which some diverged. ")
    elif bad and below and default in below:
        text += (f"The default `shift = {default:g}` is a factor {max(below) / default:g}-{min(bad) / default:g} "
                 f"below that boundary ({norm}). ")
    for rate in dict.fromkeys(rest["client_lr"]):
        at = rest[rest["client_lr"] == rate]
        tried = sorted(set(at["shift"]))
        if (at["status"] == "diverged").all():
            iid = 0.0 in tried
            text += (f"Client rate {rate:g} diverges in all {len(at)} runs, at every shift tried "
                     f"({listing([f'{s:g}' for s in tried])}; ended {detected(at, every)})"
                     + (f", IID clients included: the minibatch of {alg['batch_size']} samples in d = "
                        f"{problem['dim']} alone bounds the rate. " if iid else ". "))
        else:
            text += f"Client rate {rate:g}: " + "; ".join(
                f"{int((g['status'] == 'diverged').sum())} of {len(g)} runs diverge at {sh(s)}"
                for s, g in at.groupby("shift")) + ". "
    text += "`shift = 0` gives IID clients."
    return para(text)
