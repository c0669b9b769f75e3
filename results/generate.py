"""Write every figure on the results and docs pages that comes from a run, from its record.

    python results/generate.py           # rewrite the generated regions of the pages
    python results/generate.py --check   # exit 1 and name the regions that differ

A page marks a region that this script writes:

    <!-- generated: NAME -->
    ...text written by the block NAME...
    <!-- /generated -->

Each block is a function below that reads the record under results/ (the per-run CSVs and
outputs the experiment scripts wrote) and returns the region's text. Text outside the
regions is prose and carries no number from a run. `tests/e2e/test_generated_pages.py` runs
`--check`'s comparison, so a page that disagrees with its record fails the tests.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(RESULTS.glob("*.md"))]
REGION = re.compile(r"(<!-- generated: ([\w.-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)
CL, SL = "algorithm.client_lr", "algorithm.server_lr"
NAMES = {"feddualavg": "FedDualAvg", "feddualavg_osp": "FedDualAvg-OSP", "fedmid": "FedMiD",
         "fedmid_osp": "FedMiD-OSP"}
ORDER = ["feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp"]
PAPER_PAIR = {"feddualavg": (0.01, 1.0)}  # the FCO paper's best rates; the others (0.001, 0.3)

BLOCKS: dict[str, Callable[[], str]] = {}


def block(name: str):
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        BLOCKS[name] = fn
        return fn
    return register


# --- numbers as the pages print them -------------------------------------------------------

def para(text: str, indent: str = "") -> str:
    """Prose wrapped as the pages wrap it (under 100 characters a line), with a newline."""
    return textwrap.fill(text.strip(), 96, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) + "\n"


def f3(x: float) -> str:
    return f"{x:.3f}"


def pm(values: pd.Series) -> str:
    """`0.946 ± 0.002`: mean ± sample std over seeds (3 decimals; 1 above 100)."""
    v = values.astype(float)
    m, sd = v.mean(), v.std(ddof=1)
    return f"{m:.1f} ± {sd:.1f}" if abs(m) >= 100 else f"{m:.3f} ± {sd:.3f}"


def rates(pair) -> str:
    return f"{pair[0]:g} / {pair[1]:g}"


def where(a, b) -> str:
    """`0.003 / 0.03 (both)` or `0.003 / 0.03 and 0.001 / 0.3`."""
    return f"{rates(a)} (both)" if a == b else f"{rates(a)} and {rates(b)}"


def short(x: float) -> str:
    """9e-5, 0.01, 3."""
    if 0 < abs(x) < 1e-3:
        mantissa, exponent = f"{x:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return f"{x:.3g}"


def paper_pair(alg: str) -> tuple[float, float]:
    return PAPER_PAIR.get(alg, (0.001, 0.3))


# --- E1: results/e1_trials.csv (the whole grid, seeds 0-2, final values) --------------------

class Grid:
    """One E1 setting's trials (one row per configuration: final values, status), per
    algorithm and rate pair: which pairs finished on every seed, and their values."""

    def __init__(self, trials: pd.DataFrame, first: pd.DataFrame | None = None):
        self.trials = trials
        self.first = first  # first round with F1 >= 0.99, per configuration, where recorded

    def rows(self, alg: str, pair=None) -> pd.DataFrame:
        t = self.trials[self.trials["algorithm"] == alg]
        if pair is not None:
            t = t[(t[CL] == pair[0]) & (t[SL] == pair[1])]
        return t.sort_values("seed")

    def pairs(self, alg: str) -> pd.DataFrame:
        """Per rate pair: stable (finished on every seed), mean f1 and density, every seed at
        F1 exactly 1, every seed at F1 >= 0.99."""
        g = self.rows(alg).groupby([CL, SL])
        return pd.DataFrame({
            "stable": g["status"].apply(lambda s: bool((s == "finished").all())),
            "f1": g["f1"].mean(), "density": g["density"].mean(),
            "val_mse": g["val_mse"].mean() if "val_mse" in self.trials else math.nan,
            "exact": g["f1"].apply(lambda s: bool((s == 1.0).all())),
            "near": g["f1"].apply(lambda s: bool((s >= 0.99).all()))})

    def first_rounds(self, alg: str, pair) -> list[float]:
        if self.first is None:
            return []
        if "variant" in self.first:  # the variants' CSV holds its own column
            rows = self.rows(alg, pair)
            return rows["first_f1_99"].tolist()
        f = self.first
        f = f[(f["algorithm"] == alg) & (f[CL] == pair[0]) & (f[SL] == pair[1])].sort_values("seed")
        return f["first_f1_99"].tolist()

    def best(self, alg: str) -> tuple[float, float]:
        """The highest mean F1 among stable pairs; ties to the earliest mean first round with
        F1 >= 0.99 (where recorded), then the smaller rates."""
        p = self.pairs(alg)
        p = p[p["stable"]]
        tied = p.index[p["f1"] == p["f1"].max()]

        def speed(pair):
            hits = self.first_rounds(alg, pair)
            return sum(math.inf if pd.isna(h) else h for h in hits) / len(hits) if hits else math.inf
        return min(tied, key=lambda pair: (speed(pair), pair))

    def rounds_text(self, alg: str, pair) -> str:
        hits = self.first_rounds(alg, pair)
        return "/".join("never" if pd.isna(h) else str(int(h)) for h in hits) if hits else "-"


def e1_grid() -> Grid:
    return Grid(pd.read_csv(RESULTS / "e1_trials.csv"),
                pd.read_csv(RESULTS / "e1_first_rounds.csv", comment="#"))


def levels() -> pd.DataFrame:
    """results/fedmid_levels_output.txt: the centralized optima at lam and 2 lam per setting
    and seed (setting, seed, optimum, train_loss, val_mse)."""
    rows = []
    for line in (RESULTS / "fedmid_levels_output.txt").read_text().splitlines():
        m = re.match(r"\s*(E\d(?: support \d+| 256 x 32)?)\s+(\d)\s+([12]) lam\s+([-0-9.e]+)\s+([-0-9.e]+)", line)
        if m:
            rows.append({"setting": m[1], "seed": int(m[2]), "optimum": int(m[3]),
                         "train_loss": float(m[4]), "val_mse": float(m[5])})
    return pd.DataFrame(rows)


def level(setting: str, optimum: int, metric: str) -> float:
    lv = levels()
    return float(lv[(lv["setting"] == setting) & (lv["optimum"] == optimum)][metric].mean())


@block("e1.results")
def e1_results() -> str:
    grid = e1_grid()
    lines = ["| algorithm | rate pair (client, server) | f1 | density | val_mse | train_loss "
             "| first round F1 >= 0.99 | seeds |", "|---|---|---|---|---|---|---|---|"]
    for alg in ORDER:
        for label, pair in (("best", grid.best(alg)), ("paper's", paper_pair(alg))):
            r = grid.rows(alg, pair)
            cells = " | ".join(pm(r[m]) for m in ("f1", "density", "val_mse", "train_loss"))
            lines.append(f"| {alg} | {label}: {pair[0]:g}, {pair[1]:g} | {cells} "
                         f"| {grid.rounds_text(alg, pair)} | {len(r)} |")
    return "\n".join(lines) + "\n"


@block("e1.pairs")
def e1_pairs() -> str:
    grid = e1_grid()
    out = []
    for alg in ORDER:
        p = grid.pairs(alg)
        out.append(f"{alg}: {int(p['stable'].sum())} of {len(p)} pairs finished on every seed")
    bad = {a: frozenset(grid.pairs(a).index[~grid.pairs(a)["stable"]]) for a in ORDER}
    if len(set(bad.values())) == 1:
        pairs = sorted(next(iter(bad.values())), reverse=True)
        by_client = {}
        for c, srv in pairs:
            by_client.setdefault(c, []).append(srv)
        servers = sorted(grid.trials[SL].unique())
        parts = [f"client rate {c:g} at every server rate" if sorted(v) == servers
                 else f"client rate {c:g} with server rate {', '.join(f'{x:g}' for x in sorted(v))}"
                 for c, v in sorted(by_client.items(), reverse=True)]
        out.append(f"(the same {len(pairs)} pairs diverge for every algorithm: {'; '.join(parts)})")
    exact = ", ".join(f"{NAMES[a]} {int(grid.pairs(a)['exact'].sum())}" for a in ORDER)
    near = ", ".join(f"{NAMES[a]} {int(grid.pairs(a)['near'].sum())}" for a in ORDER)
    tops = " and ".join(f3(grid.pairs(a)[grid.pairs(a)["stable"]]["f1"].max()) for a in ("fedmid", "fedmid_osp"))
    return ("\n".join(out) + "\n\nPairs with F1 exactly 1 on every seed: " + exact + ". Pairs with F1 >= 0.99 "
            "on every seed: " + near + f" (FedMiD's and FedMiD-OSP's largest mean F1: {tops}).\n")


def e1_facts() -> dict:
    g = e1_grid()
    f = {"grid": g}
    for alg in ORDER:
        p = g.pairs(alg)
        f[alg] = {"pairs": p, "stable": int(p["stable"].sum()), "exact": int(p["exact"].sum()),
                  "near": int(p["near"].sum()), "best": g.best(alg), "paper": paper_pair(alg)}
    return f


@block("e1.claims")
def e1_claims() -> str:
    f = e1_facts()
    g = f["grid"]
    da, osp, mid, mosp = f["feddualavg"], f["feddualavg_osp"], f["fedmid"], f["fedmid_osp"]
    at = lambda alg, pair, m: pm(g.rows(alg, pair)[m])  # noqa: E731
    rd = lambda alg, pair: g.rounds_text(alg, pair).split("/")  # noqa: E731
    da_first = sorted(set(rd("feddualavg", da["best"])))
    exact_density = da["pairs"][da["pairs"]["exact"]]["density"]
    span = (f3(exact_density.min()) if f3(exact_density.min()) == f3(exact_density.max())
            else f"{f3(exact_density.min())}-{f3(exact_density.max())}")
    never = all((p["near"] == False).all() for p in (mid["pairs"], mosp["pairs"]))  # noqa: E712
    product = mid["best"][0] * mid["best"][1]
    osp_exact = osp["pairs"][osp["pairs"]["exact"]]
    osp_rounds = sorted(int(x) for x in rd("feddualavg_osp", osp["best"]))
    mse = lambda alg, pair: g.rows(alg, pair)["val_mse"]  # noqa: E731
    da_mse = sorted(mse("feddualavg", p).mean() for p in (da["best"], da["paper"]))
    rows = [
        ("FedDualAvg attains the best F1 and is the fastest",
         f"**holds**: F1 exactly 1 on every seed, with density {span} "
         f"(the true support is 0.500), at {da['exact']} of its {da['stable']} stable rate pairs "
         f"(F1 >= 0.99 at {da['near']}); first at round {'/'.join(da_first)} on every seed at "
         f"{rates(da['best'])} and at round {'/'.join(sorted(set(rd('feddualavg', da['paper']))))} at the "
         f"paper's {rates(da['paper'])}. "
         + ("No primal-averaging method reaches F1 0.99 at any pair on every seed in 2000 rounds"
            if never else "A primal-averaging method reaches F1 0.99 at some pair")),
        ("best rates: FedDualAvg `eta_c = 0.01, eta_s = 1`, the others `0.001, 0.3`",
         f"**FedDualAvg: yes** (the paper's point is stable on every seed: F1 {at('feddualavg', da['paper'], 'f1')}). "
         f"**FedDualAvg-OSP: yes** on F1 ({at('feddualavg_osp', osp['paper'], 'f1')} at the paper's point). "
         f"**FedMiD / FedMiD-OSP: no**: their F1 is highest at {where(mid['best'], mosp['best'])} "
         f"(`eta_s eta_c` = {short(product)} for FedMiD: F1 {at('fedmid', mid['best'], 'f1')} / "
         f"{at('fedmid_osp', mosp['best'], 'f1')}; at the paper's {rates(mid['paper'])}: "
         f"{at('fedmid', mid['paper'], 'f1')} / {at('fedmid_osp', mosp['paper'], 'f1')})"
         + (", on the grid's smallest server rate, so a smaller one may do better still"
            if mid["best"][1] == g.trials[SL].min() else "")),
        ("FedMiD gives the densest solution (curse of primal averaging)",
         f"**holds for the density**: FedMiD's density is above the truth (0.5) at "
         f"{int((mid['pairs'][mid['pairs']['stable']]['density'] > 0.5).sum())} of its {mid['stable']} stable pairs "
         f"({at('fedmid', mid['best'], 'density')} at its best, {at('fedmid', mid['paper'], 'density')} at the "
         f"paper's point), FedMiD-OSP's {at('fedmid_osp', mosp['best'], 'density')} / "
         f"{at('fedmid_osp', mosp['paper'], 'density')}. **Its accuracy gap is its end point**: FedMiD converges "
         f"to the LASSO optimum at `2 lam` = 0.2 (below), whose validation MSE is "
         f"{level('E1', 2, 'val_mse'):.2f} (seeds 0-2) against FedMiD's {mse('fedmid', mid['paper']).mean():.2f} "
         f"at the paper's point and the `lam` optimum's {level('E1', 1, 'val_mse'):.2f}"),
        ("FedDualAvg-OSP is competitive on F1",
         f"**holds on F1** (exactly 1 at {len(osp_exact)} pairs on every seed, from round "
         f"{osp_rounds[0]}-{osp_rounds[-1]} at {rates(osp['best'])}) but its model is not: validation MSE "
         f"{pm(mse('feddualavg_osp', osp['best']))} against {da_mse[0]:.1f}-{da_mse[1]:.1f} (FedDualAvg) and "
         f"{level('E1', 1, 'val_mse'):.1f} (the `lam` optimum). Its server threshold `eta_s eta_c K r lam` grows "
         "every round, so the support is found while the values are shrunk towards 0; at larger rate "
         "products it shrinks the model to 0 (F1 0 in the grid)"),
    ]
    return ("| paper (Fig. 3) | here (the full grid, seeds 0-2) |\n|---|---|\n"
            + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n")


@block("e1.levels")
def e1_levels() -> str:
    g = e1_grid()
    mid, mosp = g.rows("fedmid", (0.001, 0.3)), g.rows("fedmid_osp", (0.001, 0.3))
    row = lambda name, m: (f"| {name} | {level('E1', 1, m):.3f} | **{level('E1', 2, m):.3f}** "  # noqa: E731
                           f"| {pm(mid[m])} | {pm(mosp[m])} |")
    return ("| | `lam` optimum | `2 lam` optimum, scored at `lam` | FedMiD, paper's 0.001 / 0.3 "
            "| FedMiD-OSP, paper's 0.001 / 0.3 |\n|---|---|---|---|---|\n"
            + row("training objective", "train_loss") + "\n" + row("validation MSE", "val_mse") + "\n"
            + f"| F1 / density | 1 / 0.5 | 1 / 0.5 | {f3(mid['f1'].mean())} / {f3(mid['density'].mean())} "
              f"| {f3(mosp['f1'].mean())} / {f3(mosp['density'].mean())} |\n")


def distances() -> dict:
    """results/fedmid_distances_output.txt: (setting, algorithm, client, server) -> relative
    distances of the seed-0 rerun's final model to the lam and 2 lam optima, and its metrics."""
    out = {}
    for line in (RESULTS / "fedmid_distances_output.txt").read_text().splitlines():
        m = re.match(r"(E\d) (\w+) ([0-9.e-]+) ([0-9.e-]+) \{'to 1 lam': np.float64\(([0-9.e-]+)\), "
                     r"'to 2 lam': np.float64\(([0-9.e-]+)\)\} (\{.*\})", line)
        if m:
            metrics = json.loads(m[7].replace("'", '"'))
            out[(m[1], m[2], float(m[3]), float(m[4]))] = {"lam": float(m[5]), "2lam": float(m[6]), **metrics}
    return out


@block("e1.centralized")
def e1_centralized() -> str:
    lv = levels()
    seed0 = lv[(lv["setting"] == "E1") & (lv["seed"] == 0) & (lv["optimum"] == 1)].iloc[0]
    return para(f"Centralized optimum (FISTA, seed 0): F1 1.0, density 0.5, validation MSE "
                f"{seed0['val_mse']:.2f} (`results/fedmid_levels_output.txt`).")


@block("e1.distances")
def e1_distances() -> str:
    d = distances()
    mid, osp, slow = d[("E1", "fedmid", 0.001, 0.3)], d[("E1", "fedmid_osp", 0.001, 0.3)], d[("E1", "fedmid", 0.003, 0.03)]
    g = e1_grid()
    best = g.best("fedmid")
    mse = lambda alg, pair: g.rows(alg, pair)["val_mse"].mean()  # noqa: E731
    return (f"Rerun on seed 0 (`results/fedmid_distances_output.txt`; the final metrics equal "
            f"`results/e1_trials.csv`), FedMiD's final model at the paper's pair is {mid['2lam']:.2g} (relative "
            f"distance) from the `2 lam` optimum and {mid['lam']:.2g} from the `lam` optimum; FedMiD-OSP's is "
            f"{osp['lam']:.2g} from the `lam` optimum and {osp['2lam']:.2g} from the `2 lam` one. At FedMiD's "
            f"best-F1 pair ({rates(best)}, validation MSE {mse('fedmid', best):.1f}) the run has not converged "
            f"in 2000 rounds (`eta_s eta_c K` = {short(best[0] * best[1] * 10)} per round; {slow['lam']:.2g} and "
            f"{slow['2lam']:.2g} from the two optima). So:\n\n"
            f"- FedMiD's validation MSE ({mse('fedmid', (0.001, 0.3)):.1f} at the paper's pair, against "
            f"{level('E1', 1, 'val_mse'):.1f}-{mse('fedmid_osp', (0.001, 0.3)):.1f} for the `lam` optimum and "
            "FedMiD-OSP) is the price of solving the problem at twice the penalty, a bias of the method as "
            "written, not slowness and not primal averaging.\n"
            f"- Its excess density ({g.rows('fedmid', (0.001, 0.3))['density'].mean():.2f} at the paper's pair) "
            "is not the end point's (the `2 lam` optimum has the true support, F1 1): it is the noise of "
            "stochastic primal iterates (minibatches, 10 of 64 clients per round), which keeps coordinates off "
            "zero - the \"curse of primal averaging\" of the paper. FedMiD-OSP has it too "
            f"({g.rows('fedmid_osp', (0.001, 0.3))['density'].mean():.2f}) without the bias.\n")


@block("results.e1")
def results_e1() -> str:
    f = e1_facts()
    g = f["grid"]
    da, osp, mid, mosp = f["feddualavg"], f["feddualavg_osp"], f["fedmid"], f["fedmid_osp"]
    at = lambda alg, pair, m: pm(g.rows(alg, pair)[m])  # noqa: E731
    first = sorted(set(g.rounds_text("feddualavg", da["best"]).split("/")))
    paper_first = sorted(set(g.rounds_text("feddualavg", da["paper"]).split("/")))
    return (
        "| claim (paper) | ours |\n|---|---|\n"
        f"| E1: FedDualAvg has the best F1 and is fastest (Fig. 3) | yes: F1 exactly 1 on every seed at density "
        f"0.500 (the true support) at {da['exact']} of its {da['stable']} stable rate pairs (F1 >= 0.99 at "
        f"{da['near']}), first at round {'/'.join(first)} (round {'/'.join(paper_first)} at the paper's "
        f"{rates(da['paper'])}); FedMiD {at('fedmid', mid['best'], 'f1')} and FedMiD-OSP "
        f"{at('fedmid_osp', mosp['best'], 'f1')} at best, never >= 0.99 on every seed at any pair in 2000 "
        "rounds (`results/e1.md`) |\n"
        f"| E1: best rates 0.01 / 1 (FedDualAvg), 0.001 / 0.3 (others) | FedDualAvg and FedDualAvg-OSP: yes "
        f"(F1 {at('feddualavg', da['paper'], 'f1')} and {at('feddualavg_osp', osp['paper'], 'f1')} there). "
        f"FedMiD / FedMiD-OSP: no, their F1 is highest at {where(mid['best'], mosp['best'])}; "
        f"{at('fedmid', mid['paper'], 'f1')} / {at('fedmid_osp', mosp['paper'], 'f1')} at 0.001 / 0.3 |\n"
        f"| E1: FedMiD densest (curse of primal averaging) | yes: above the truth's 0.5 at every stable pair "
        f"({at('fedmid', mid['best'], 'density')} at its best, {at('fedmid', mid['paper'], 'density')} at the "
        f"paper's); FedDualAvg-OSP matches F1 but its values are shrunk (validation MSE "
        f"{g.rows('feddualavg_osp', osp['best'])['val_mse'].mean():.0f} vs "
        f"{g.rows('feddualavg', da['paper'])['val_mse'].mean():.1f}) |\n")


# --- E1 variants: results/e1_variants_trials.csv ----------------------------------------------

def variants() -> pd.DataFrame:
    """results/e1_variants_trials.csv: one row per configuration of the three E1 variants."""
    return pd.read_csv(RESULTS / "e1_variants_trials.csv")


@block("e1_variants.tables")
def e1_variants_tables() -> str:
    sys.path.insert(0, str(RESULTS))
    import e1_variants  # noqa: PLC0415 - the script that prints these tables

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        e1_variants.table(RESULTS / "e1_variants_trials.csv")
    return out.getvalue().lstrip("\n")


SETTINGS = {"support 64": 64, "support 8": 8, "256 x 32": 512}  # variant -> true support of 1024


def variant_grid(name: str) -> Grid:
    v = variants()
    rows = v[v["variant"] == name]
    return Grid(rows.drop(columns="variant"), rows)


@block("e1_variants.claims")
def e1_variants_claims() -> str:
    cells = {k: [] for k in range(4)}
    holds = {k: [] for k in range(4)}
    for name, support in SETTINGS.items():
        g = variant_grid(name)
        p = {a: g.pairs(a) for a in ORDER}
        best = {a: g.best(a) for a in ORDER}
        at = lambda alg, pair, m: g.rows(alg, pair)[m].mean()  # noqa: E731
        top = {a: p[a][p[a]["stable"]]["f1"].max() for a in ORDER}
        da_rounds = sorted(int(x) for x in g.rows("feddualavg", (0.01, 1.0))["first_f1_99"])
        near = lambda a: [int(x) for x in g.first_rounds(a, best[a]) if not pd.isna(x)]  # noqa: E731
        mid_rounds = near("fedmid")
        cells[0].append(
            f"F1 {at('feddualavg', (0.01, 1.0), 'f1'):.3f} at the paper's pair (from round {da_rounds[0]}-"
            f"{da_rounds[-1]}); F1 exactly 1 on every seed at {int(p['feddualavg']['exact'].sum())} of "
            f"{int(p['feddualavg']['stable'].sum())} stable pairs (F1 >= 0.99 at {int(p['feddualavg']['near'].sum())}); "
            f"FedMiD's best mean F1 {top['fedmid']:.3f} ({rates(best['fedmid'])}"
            + (f", from round {min(mid_rounds)}-{max(mid_rounds)}" if len(mid_rounds) == 3 else ", never 0.99 on every seed")
            + f"), FedMiD-OSP {top['fedmid_osp']:.3f}")
        holds[0].append(top["feddualavg"] >= max(top.values()))
        da_paper, da_best = at("feddualavg", (0.01, 1.0), "f1"), top["feddualavg"]
        mse_note = ""
        if best["feddualavg"] != (0.01, 1.0):
            mse_note = (f"; validation MSE {at('feddualavg', (0.01, 1.0), 'val_mse'):.2f} there against "
                        f"{at('feddualavg', best['feddualavg'], 'val_mse'):.2f} at {rates(best['feddualavg'])}")
        cells[1].append(
            f"FedDualAvg: F1 {da_paper:.3f} at 0.01 / 1 ({'its best' if da_paper >= da_best else 'below its best'}"
            f"{mse_note}). FedMiD / FedMiD-OSP: F1 {at('fedmid', (0.001, 0.3), 'f1'):.3f} / "
            f"{at('fedmid_osp', (0.001, 0.3), 'f1'):.3f} at 0.001 / 0.3; their best pairs "
            f"{where(best['fedmid'], best['fedmid_osp'])}")
        holds[1].append((da_paper >= da_best, best["fedmid"] == (0.001, 0.3) and best["fedmid_osp"] == (0.001, 0.3)))
        stable_all = p["feddualavg"]["stable"] & p["feddualavg_osp"]["stable"] & p["fedmid"]["stable"] & p["fedmid_osp"]["stable"]
        dens = pd.DataFrame({a: p[a]["density"] for a in ORDER})[stable_all]
        densest = dens.idxmax(axis=1).value_counts()
        n_mid, n_osp = int(densest.get("fedmid", 0)), int(densest.get("fedmid_osp", 0))
        cells[2].append(
            f"FedMiD densest at {n_mid} and FedMiD-OSP at {n_osp} of the {len(dens)} pairs stable for all four; "
            f"at the paper's pair FedMiD {at('fedmid', (0.001, 0.3), 'density'):.3f} vs FedMiD-OSP "
            f"{at('fedmid_osp', (0.001, 0.3), 'density'):.3f} (truth {support / 1024:.3g})")
        holds[2].append(n_mid > n_osp)
        osp = p["feddualavg_osp"]
        cells[3].append(
            f"F1 exactly 1 at {int(osp['exact'].sum())} pairs on every seed; validation MSE "
            f"{at('feddualavg_osp', best['feddualavg_osp'], 'val_mse'):.3g} at its best pair (FedDualAvg "
            f"{at('feddualavg', (0.01, 1.0), 'val_mse'):.3g} at the paper's)")
        holds[3].append(int(osp["exact"].sum()) > 0)
    names = list(SETTINGS)
    def verdict(flags, what):
        yes = [n for n, f in zip(names, flags) if f]
        if len(yes) == len(names):
            return f"**holds** at all three{what}"
        if not yes:
            return f"**does not hold** at any{what}"
        return f"**holds at {', '.join(yes)} only**{what}"
    rates_verdict = ("**holds for FedDualAvg's F1" if all(h[0] for h in holds[1]) else "**FedDualAvg: not at every setting")
    rates_verdict += ", does not hold for FedMiD(-OSP)**" if not any(h[1] for h in holds[1]) else "**"
    rows = [("FedDualAvg attains the best F1 and is the fastest", cells[0], verdict(holds[0], "")),
            ("best rates: FedDualAvg 0.01 / 1, the others 0.001 / 0.3", cells[1], rates_verdict),
            ("FedMiD gives the densest solution (curse of primal averaging)", cells[2],
             verdict(holds[2], "") + " (FedMiD densest at more stable pairs than FedMiD-OSP)"),
            ("FedDualAvg-OSP is competitive on F1", cells[3], verdict(holds[3], " on F1") +
             "; its model is shrunk towards 0 (its server threshold grows every round, `results/e1.md`)")]
    head = "| paper (Fig. 3, the E1 claims at each setting) | " + " | ".join(names) + " | verdict |"
    return (head + "\n|---|---|---|---|---|\n"
            + "\n".join(f"| {c} | {' | '.join(v)} | {w} |" for c, v, w in rows) + "\n")


@block("e1_variants.levels")
def e1_variants_levels() -> str:
    parts = []
    for name in SETTINGS:
        g = variant_grid(name)
        mse = lambda alg: g.rows(alg, (0.001, 0.3))["val_mse"].mean()  # noqa: E731
        parts.append(f"{name}: {level('E1 ' + name, 1, 'val_mse'):.3f} / {level('E1 ' + name, 2, 'val_mse'):.3f} "
                     f"vs **{mse('fedmid'):.3f}** / {mse('fedmid_osp'):.3f}")
    return para("Validation MSE of the centralized optima of each setting at `lam` / at `2 lam` (mean of seeds "
                "0-2, `results/fedmid_levels_output.txt`) against FedMiD / FedMiD-OSP at the paper's pair: "
                + "; ".join(parts) + ".")


# --- E5 on a GPU: results/e5_gpu_*_trials.csv (benchmarks/e5_protocol.py) ---------------------

E5_NAMES = {"feddualex": "FeDualEx", "fedmip": "FedMiP (server prox)", "feddualavg": "FedDualAvg",
            "fedmid": "FedMiD", "extragrad_local_sgd": "Extra-step local SGD"}


def e5_best(df: pd.DataFrame, method: str, col: str) -> dict | None:
    """The rate pair with the smallest mean over seeds of the final `col` (a pair with a
    diverged seed ranks last), as `benchmarks/e5_protocol.py`'s summary chooses it."""
    part = df[df["method"] == method].copy()
    if col not in part or part[col].isna().all():
        return None
    part.loc[part["status"] == "diverged", col] = math.inf
    pairs = part.groupby(["client_lr", "server_lr"])
    stats = pairs[col].agg(["mean", "std"])
    stats = stats[stats["mean"].apply(math.isfinite)]
    pair = stats["mean"].idxmin()
    dens = "density" if col == "gap" else "density_ergodic"
    return {"pair": pair, "mean": stats.loc[pair, "mean"], "std": stats.loc[pair, "std"],
            "density": pairs[dens].mean()[pair], "rank": pairs["rank"].mean()[pair] if "rank" in part else math.nan}


def g4(x: float) -> str:
    return f"{x:.4g}"


def e5_gpu() -> pd.DataFrame:
    return pd.read_csv(RESULTS / "e5_gpu_l1_k10_trials.csv")


@block("e5_gpu.l1")
def e5_gpu_l1() -> str:
    df = e5_gpu()
    lines = ["| method | pair (eta_c, eta_s) by server model | server gap | density | pair by ergodic output "
             "| ergodic gap | density (ergodic) |", "|---|---|---|---|---|---|---|"]
    for method in ("feddualex", "fedmip", "feddualavg", "fedmid", "extragrad_local_sgd"):
        server, ergodic = e5_best(df, method, "gap"), e5_best(df, method, "gap_ergodic")
        cells = [f"({server['pair'][0]:g}, {server['pair'][1]:g})", f"{g4(server['mean'])} +- {server['std']:.2g}",
                 f"{server['density']:.3f}"]
        cells += ([f"({ergodic['pair'][0]:g}, {ergodic['pair'][1]:g})", f"{g4(ergodic['mean'])} +- {ergodic['std']:.2g}",
                   f"{ergodic['density']:.3f}"] if ergodic else ["-", "-", "-"])
        lines.append(f"| {E5_NAMES[method]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@block("e5_gpu.claims")
def e5_gpu_claims() -> str:
    df = e5_gpu()
    b = {m: e5_best(df, m, "gap") for m in E5_NAMES}
    e = {m: e5_best(df, m, "gap_ergodic") for m in ("feddualex", "fedmip", "extragrad_local_sgd")}
    v = lambda x: f"{x:.3g}"  # noqa: E731
    cpu = pd.read_csv(RESULTS / "e5_l1_k10_seed0_grid_trials.csv")
    cpu_best = lambda alg, col: cpu[(cpu["algorithm"] == alg) & (cpu["status"] == "finished")][col].min()  # noqa: E731
    lowest_server = min(b, key=lambda m: b[m]["mean"])
    rows = [
        ("extra-step methods reach a gap around 1e-1",
         f"FeDualEx {v(b['feddualex']['mean'])} (server) / {v(e['feddualex']['mean'])} (ergodic); FedMiP with its "
         f"server prox {v(e['fedmip']['mean'])} (ergodic), {v(b['fedmip']['mean'])} (server)",
         "holds for FeDualEx under both rankings; **disagrees with the paper for FedMiP as the paper writes it**: "
         "its Appendix H, Algorithm 2, line 11 (`z_{r+1} = grad(l + eta_s eta_c K psi)^*(grad h(z_r) + eta_s "
         "Delta_r)`) applies the server prox, as `fedmip` here does, and that FedMiP stays above 1. Without the "
         "server prox (`fedmip_noprox`, not the paper's algorithm; not run on the GPU; on the CPU dense and far "
         "lower: `e5_full_scale.md`) it reaches the paper's numbers"),
        ("FedDualAvg and FedMiD stay above 1", f"FedMiD {v(b['fedmid']['mean'])}; FedDualAvg {v(b['feddualavg']['mean'])}",
         ("holds for FedMiD" if b["fedmid"]["mean"] > 1 else "does not hold for FedMiD") + "; "
         + ("holds for FedDualAvg" if b["feddualavg"]["mean"] > 1 else
            "does not hold for FedDualAvg at K = 10 (as on the CPU: `e5_full_scale.md`)")),
        ("FeDualEx is the best method",
         f"by what it returns (ergodic) {v(e['feddualex']['mean'])}"
         + (", the lowest of all" if e["feddualex"]["mean"] <= min(x["mean"] for x in b.values()) else "")
         + f"; by the server model {v(b['feddualex']['mean'])} against {E5_NAMES[lowest_server]}'s "
           f"{v(b[lowest_server]['mean'])}",
         ("holds by the ergodic output" if e["feddualex"]["mean"] <= min(x["mean"] for x in b.values()) else
          "does not hold by the ergodic output")
         + ("; holds by the server model" if lowest_server == "feddualex" else "; does not hold by the server model")),
        ("FeDualEx density about 0.7, FedMiP about 0.95",
         f"FeDualEx server model {b['feddualex']['density']:.2f}, its ergodic output {e['feddualex']['density']:.2f}; "
         f"FedMiP (server prox) {b['fedmip']['density']:.2f}",
         "holds for FeDualEx's server model only (the ergodic average of sparse iterates is dense)"),
        ("Extra-step local SGD neither converges nor gives sparsity",
         f"gap {v(b['extragrad_local_sgd']['mean'])}, density {b['extragrad_local_sgd']['density']:.3f}",
         "holds in part: no sparsity, but it converges"),
    ]
    table = ("| claim (paper) | ours | verdict |\n|---|---|---|\n"
             + "\n".join(f"| {a} | {c} | {d} |" for a, c, d in rows) + "\n")
    return table + "\n" + para(
        "These agree with the CPU engine's seed-0 runs of the same grid (`e5_full_scale.md`, "
        f"`e5_l1_k10_seed0_grid_trials.csv`): FeDualEx {v(cpu_best('feddualex', 'duality_gap'))} / "
        f"{v(cpu_best('feddualex', 'duality_gap_ergodic'))}, FedDualAvg {v(cpu_best('feddualavg', 'duality_gap'))}, "
        f"FedMiD {v(cpu_best('fedmid', 'duality_gap'))}.")


@block("e5_gpu.ran")
def e5_gpu_ran() -> str:
    l1 = e5_gpu()
    nuc = pd.read_csv(RESULTS / "e5_gpu_nuclear_k10_seed0_trials.csv")
    g1 = l1.groupby(["method", "seed"])["group_seconds"].first()
    gn = nuc.groupby(["method", "seed"])["group_seconds"].first()
    return ("| part of the protocol | configurations | device time | status |\n|---|---|---|---|\n"
            f"| l1, K = 10 (400 rounds), {l1['method'].nunique()} methods x {l1['seed'].nunique()} seeds x "
            f"{len(l1.groupby(['client_lr', 'server_lr']))} rate pairs | {len(l1):,} | {g1.sum():.0f} s of group wall "
            f"time ({len(g1)} groups, {g1.min():.1f}-{g1.max():.0f} s each, compilation included) | done |\n"
            "| l1, K = 1 (4,000 rounds) | 0 of 1,750 | - | not run: the session's 15 minutes of device time "
            "were spent |\n"
            f"| nuclear, K = 10 (20 rounds), {nuc['method'].nunique()} methods x seed 0 x "
            f"{len(nuc.groupby(['client_lr', 'server_lr']))} pairs | {len(nuc)} | {gn.sum():.0f} s | done for seed 0 "
            "(Extra-step local SGD and seeds 1-9 not run) |\n"
            "| nuclear, K = 1 (100 rounds) | 0 | - | not run |\n")


@block("e5_gpu.nuclear")
def e5_gpu_nuclear() -> str:
    df = pd.read_csv(RESULTS / "e5_gpu_nuclear_k10_seed0_trials.csv")
    lines = ["| method | best pair by server model | server gap | rank (X, server model) |", "|---|---|---|---|"]
    for method in ("feddualex", "feddualavg", "fedmip", "fedmid"):
        b = e5_best(df, method, "gap")
        gap = f"{b['mean']:.2e}".replace("e-0", "e-") if b["mean"] < 1e-3 else f"{b['mean']:.3f}"
        lines.append(f"| {E5_NAMES[method]} | ({b['pair'][0]:g}, {b['pair'][1]:g}) | {gap} | {b['rank']:.0f} |")
    return "\n".join(lines) + "\n"


# --- the quick start: results/quickstart_*.{csv,json,txt} (results/quickstart_record.py) ----

def quickstart() -> tuple[pd.DataFrame, dict]:
    return (pd.read_csv(RESULTS / "quickstart_trials.csv"),
            json.loads((RESULTS / "quickstart_run.json").read_text()))


@block("quickstart.output")
def quickstart_output() -> str:
    """How long the quick start took, and its recorded terminal output, abridged: the first
    line, the first and last configuration line, the verdict, the MLflow commands."""
    _, run = quickstart()
    took = para(f"It took {round(run['wall_seconds'])} s on {run['cpus']} busy cores "
                "(`results/quickstart_run.json`) and ended like this (abridged):")
    lines = (RESULTS / "quickstart_output.txt").read_text().splitlines()
    keep = [l for l in lines if l.startswith("sweep quickstart:")]
    runs = [l for l in lines if re.match(r"\[\d+/\d+\] ", l)]
    start = next(i for i, l in enumerate(lines) if l.startswith("verdict:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("MLflow parent run"))
    links = [l for l in lines[end:] if l.startswith(("next:", "  mlflow ui", "  open "))]
    shown = keep + runs[:1] + ["..."] + runs[-1:] + lines[start:end] + links
    return took + "\n```text\n" + "\n".join(abridge(line) for line in shown) + "\n```\n"


def abridge(line: str, width: int = 110) -> str:
    """A long line cut at a word before `width`, ending in ` ...` (a link is kept whole)."""
    if len(line) <= width:
        return line
    if "http" in line:  # a link: its first parameters, then `&...`
        return line[:line.rfind("&", 0, width - 4)] + "&..."
    cut = line.rfind(" ", 0, width - 4)
    return line[:cut].rstrip(",;:") + " ..."


def quickstart_best() -> dict:
    t, _ = quickstart()
    out = {}
    for alg, rows in t.groupby("algorithm"):
        ok = rows[rows["status"] == "finished"]
        top = ok[ok["f1"] == ok["f1"].max()]
        if "mean.f1" in top and len(top) > 1:
            top = top.sort_values("mean.f1", ascending=False)
        out[alg] = top.iloc[0]
    return out


@block("results.quickstart")
def results_quickstart() -> str:
    t, run = quickstart()
    best = quickstart_best()
    da, mid = best["feddualavg"], best["fedmid"]
    diverged = t[t["status"] == "diverged"]
    return para(f"The quick start (`sweeps/quickstart.yaml`, 100 rounds, seed 0, recorded {run['date']} by "
                f"`results/quickstart_record.py`): FedDualAvg F1 {f3(da['f1'])} at density {f3(da['density'])} "
                f"(best at ({da[CL]:g}, {da[SL]:g})), FedMiD's best F1 {f3(mid['f1'])} at density "
                f"{f3(mid['density'])} (at ({mid[CL]:g}, {mid[SL]:g})); {len(diverged)} of {len(t)} runs diverged. "
                "`tests/engine/test_quickstart.py` checks the same outcome on every test run.")


@block("readme.quickstart")
def readme_quickstart() -> str:
    best = quickstart_best()
    da, mid = best["feddualavg"], best["fedmid"]
    kept = round(mid["density"] * 1024)
    return para(f"The score is the support F1 of the final model (the F1 of its nonzero coordinates against the "
                f"true ones): FedDualAvg scores {f3(da['f1'])} with density {f3(da['density'])}, exactly the 512 true "
                f"features and no other, while FedMiD's best keeps {kept} features ({kept - 512} false ones) and "
                f"scores {f3(mid['f1'])}.")


# --- the mechanism ---------------------------------------------------------------------------

def render(text: str, page: Path) -> str:
    def fill(m: re.Match) -> str:
        name = m[2]
        if name not in BLOCKS:
            raise SystemExit(f"{page.relative_to(ROOT)}: unknown generated block {name!r} "
                             f"(known: {', '.join(sorted(BLOCKS))})")
        return m[1] + BLOCKS[name]() + m[4]
    return REGION.sub(fill, text)


def regions(text: str) -> list[str]:
    return [m[2] for m in REGION.finditer(text)]


def differences() -> list[str]:
    """`page: block` for every region whose text differs from what its block writes now."""
    out = []
    for page in PAGES:
        text = page.read_text()
        new = render(text, page)
        if new != text:
            old_regions = {m[2]: m[3] for m in REGION.finditer(text)}
            new_regions = {m[2]: m[3] for m in REGION.finditer(new)}
            out += [f"{page.relative_to(ROOT)}: {n}" for n in new_regions if new_regions[n] != old_regions.get(n)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region differs")
    args = ap.parse_args(argv)
    if args.check:
        stale = differences()
        for s in stale:
            print(f"stale: {s} (run: python results/generate.py)")
        return 1 if stale else 0
    for page in PAGES:
        text = page.read_text()
        new = render(text, page)
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}: {', '.join(regions(new))}")
    return 0



# --- benchmarks: the CPU figures of docs/benchmarks.md (records in benchmarks/results/) ---------

BENCH = ROOT / "benchmarks" / "results"
TASK_SIZES = {"e1": "64 clients x 128 samples (10 per round)",
              "e1_1000": "1,000 clients x 32 samples (100 per round)"}
FLOWER_TARGETS = {"local": 100.0, "ray": 30.0}  # benchmarks/peer_flower.py's TARGETS


def bench(name: str) -> dict:
    return json.loads((BENCH / name).read_text())


def one_min(loads: str) -> str:
    """The 1-minute figure of a `1.2 3.4 5.6` (or `1.2 / 3.4 / 5.6`) load-average text."""
    return loads.replace("/", " ").split()[0]


def spread(values: list[float], fmt: str) -> str:
    """`min / median` of the values, or the one value."""
    lo, mid = min(values), float(pd.Series(values).median())
    return format(lo, fmt) if len(values) == 1 else f"{format(lo, fmt)} / {format(mid, fmt)}"


@block("benchmarks.flower")
def benchmarks_flower() -> str:
    """Every Flower record (benchmarks/results/peer_flower*.json), one after another."""
    records = "\n".join(flower_record(p.name) for p in sorted(BENCH.glob("peer_flower*.json")))
    return records + "\n" + para("Times are min / median over the repeats; a ratio is Flower's steady "
                                 "round over fco_ray's within one repeat.")


def flower_record(name: str) -> str:
    """Flower vs fco_ray per steady round, per task: min / median over repeats of the seconds
    and of the per-repeat ratios, the targets, the losses, the load."""
    r = bench(name)
    v = r["versions"]
    parts = [f"Recorded {r['date'].replace('T', ' ')} by `{r['command']}` "
             f"(`benchmarks/results/{Path(name).with_suffix('.md')}`): flwr {v['flower']['flwr']} beside fco_ray "
             f"{v['fco_ray']['fco_ray']}, {r['repeats']} repeats of {r['rounds']} rounds per task, 1-minute "
             f"load average {one_min(r['load_start'])} at the start and {one_min(r['load_end'])} at the end."]
    for task in dict.fromkeys(x["task"] for x in r["runs"]):
        runs = [x for x in r["runs"] if x["task"] == task]
        flower = [x["flower"]["median_s"] for x in runs]
        text = [f"At {TASK_SIZES.get(task, task)}, Flower took {spread(flower, '.4f')} s per steady round"]
        for system, words in (("local", "fco_ray's local backend"), ("ray", "its ray backend (2 actors)")):
            ratios = [x["flower"]["median_s"] / x[system]["median_s"] for x in runs]
            target = FLOWER_TARGETS[system]
            met = ("met" if min(ratios) >= target else
                   "met at the median only" if pd.Series(ratios).median() >= target else "missed")
            text.append(f"{words} {spread([x[system]['median_s'] for x in runs], '.4f')} s, "
                        f"{spread(ratios, '.3g').replace(' /', 'x /')}x faster (target >= {target:.0f}x: {met})")
        losses = {s: [x[s]["final_loss"] for x in runs] for s in ("flower", "local", "ray")}
        ours = losses["local"] + losses["ray"]
        parts.append(f"{text[0]}; {text[1]}; {text[2]}. Final training loss: Flower "
                     f"{min(losses['flower']):.4f}-{max(losses['flower']):.4f}, fco_ray "
                     f"{min(ours):.4f}-{max(ours):.4f}.")
    return "".join(para(t) + "\n" for t in parts).rstrip("\n") + "\n"


@block("benchmarks.fused")
def benchmarks_fused() -> str:
    """Every fused-vs-separate record (benchmarks/results/fused*.json), one after another."""
    return "\n".join(fused_record(p.name) for p in sorted(BENCH.glob("fused*.json")))


def fused_record(name: str) -> str:
    """Fused groups vs single configurations per round, run_grid fused vs separate, and the
    sweep end to end, from one record of benchmarks/fused.py."""
    r = bench(name)
    out = [f"Recorded {r['date'].replace('T', ' ')} by `{r['command']}` "
           f"(`benchmarks/results/{Path(name).with_suffix('.md')}`), "
           f"1-minute load average {one_min(r['load_start'])} at the start and {one_min(r['load_end'])} at the end."]
    rows = [x for x in r["rounds"] if x["loop"] != "Python steps"]
    if rows:
        out.append("Per round, a fused group against one configuration of the same case (interleaved): "
                   "the group round's cost in single rounds (medians) and the configurations x rounds "
                   "per second gained by fusing (G x single round / group round, by the medians and "
                   "by the minima): " + "; ".join(
                       f"{x['case']}, G = {x['G']}: "
                       f"{x['fused_wall_median_s'] / x['single_wall_median_s']:.1f} single rounds, "
                       f"{x['G'] * x['single_wall_median_s'] / x['fused_wall_median_s']:.1f}x median / "
                       f"{x['G'] * x['single_wall_min_s'] / x['fused_wall_min_s']:.1f}x min"
                       for x in rows) + ".")
    g = r.get("grid")
    if g:
        ratios = (min(g["separate_s"]) / min(g["fused_s"]),
                  float(pd.Series(g["separate_s"]).median() / pd.Series(g["fused_s"]).median()))
        out.append(f"`fco_ray.run_grid` of {g['configurations']} E1 FedDualAvg configurations "
                   f"({g['finished']} finished) at {g['rounds']} rounds: {spread(g['fused_s'], '.2f')} s "
                   f"fused against {spread(g['separate_s'], '.2f')} s with `fuse=False`, "
                   f"{ratios[0]:.1f}x / {ratios[1]:.1f}x (min / median; target >= 4x: "
                   f"{'met' if ratios[0] >= 4 else 'met at the median only' if ratios[1] >= 4 else 'missed'}).")
    sw = r.get("sweep")
    if sw:
        fused, alone = sw["fuse=true"], sw["fuse=false"]
        ratio = alone["wall_s"] / fused["wall_s"]
        sets = "".join(f" --set {x}" for x in sw["sets"])
        out.append(f"`fco-ray sweep {sw['file']}{sets}` at {sw['rounds']} rounds "
                   f"({fused['configurations']} configurations): {fused['wall_s']:.0f} s fused "
                   f"({fused['tune_trials']} Tune trials) against {alone['wall_s']:.0f} s unfused "
                   f"({alone['tune_trials']}), {ratio:.1f}x (target >= 4x: {'met' if ratio >= 4 else 'missed'}).")
    return "".join(para(t) + "\n" for t in out).rstrip("\n") + "\n"


@block("benchmarks.compiled")
def benchmarks_compiled() -> str:
    """Per family, which engine is faster per configuration-round, from
    benchmarks/results/compiled_rounds.json."""
    r = bench("compiled_rounds.json")
    families: dict[str, list[str]] = {}
    for p in pairs_of(r["rows"]):
        cpu, jax = p["numba"], p["compiled"]
        med = jax["per_config_round_median_ms"] / cpu["per_config_round_median_ms"]
        low = jax["per_config_round_min_ms"] / cpu["per_config_round_min_ms"]
        faster = "compiled rounds" if med < 1 else "CPU engine"
        families.setdefault(cpu["case"], []).append(
            f"G = {cpu['G']}: {faster} faster, {ms(cpu['per_config_round_median_ms'])} ms (CPU engine) vs "
            f"{ms(jax['per_config_round_median_ms'])} ms (compiled), ratio {med:.2f}x median / {low:.2f}x min")
    loads = [x[k] for x in r["rows"] for k in ("load_before", "load") if k in x]
    commands = " and ".join(f"`{c}`" for c in dict.fromkeys(x.get("command", r["command"]) for x in r["rows"]))
    head = para(f"Recorded by {commands}, 1-minute load average {min(loads):.1f}-{max(loads):.1f}. "
                "The faster engine per family and group size, by the median per configuration-round "
                "(ms: medians; ratio: compiled / CPU engine, of the medians and of the minima):")
    return head + "\n" + "".join(para(f"- {case}: {'; '.join(items)}.", "  ") for case, items in families.items())


def ms(x: float) -> str:
    """Milliseconds to 3 significant figures (`1.87`, `48.9`, `5215`)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def pairs_of(rows: list[dict]) -> list[dict]:
    """The (numba, compiled) rows of each (case, G), in the record's order."""
    out: dict = {}
    for x in rows:
        out.setdefault((x["case"], x["G"]), {})[x["engine"].split()[0]] = x
    return [p for p in out.values() if len(p) == 2]


if __name__ == "__main__":
    sys.exit(main())
