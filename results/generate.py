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
from fco_ray.runtime.files import write_file

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
    and seed (setting, seed, optimum, train_loss, val_mse; E2 also rank, recovery_error)."""
    rows = []
    for line in (RESULTS / "fedmid_levels_output.txt").read_text().splitlines():
        m = re.match(r"\s*(E\d(?: support \d+| 256 x 32)?)\s+(\d)\s+([12]) lam\s+([-0-9.e]+)\s+([-0-9.e]+)"
                     r"(?:\s+([-0-9.eNa]+)\s+([-0-9.eNa]+))?", line)
        if m:
            rows.append({"setting": m[1], "seed": int(m[2]), "optimum": int(m[3]),
                         "train_loss": float(m[4]), "val_mse": float(m[5]),
                         "rank": float(m[6] or "nan"), "recovery_error": float(m[7] or "nan")})
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
        ("FedDualAvg \"identifies most of the sparsity pattern\" and is the fastest (Fig. 3)",
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
        f"| E1: FedDualAvg \"identifies most of the sparsity pattern\", fastest (Fig. 3) | yes: F1 exactly 1 on every seed at density "
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
    rows = [("FedDualAvg \"identifies most of the sparsity pattern\" and is the fastest (Fig. 3)", cells[0], verdict(holds[0], "")),
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


def e5_gpu_nuclear_trials() -> pd.DataFrame:
    return pd.read_csv(RESULTS / "e5_gpu_nuclear_k10_trials.csv")


def group_times(df: pd.DataFrame) -> pd.Series:
    """The wall time of each group run: its configurations' rows hold the group's time (a
    group fused over seeds: the same time on each seed's rows, counted once)."""
    return df.groupby(["method", "group_seconds"])["group_seconds"].first()


def seeds_per_method(df: pd.DataFrame) -> str:
    """'FeDualEx, FedMiP x 10 seeds; FedDualAvg, FedMiD x seed 0' from the rows."""
    by_count: dict[int, list[str]] = {}
    for method, n in df.groupby("method")["seed"].nunique().items():
        by_count.setdefault(n, []).append(E5_NAMES[method])
    return "; ".join(f"{', '.join(sorted(names))} x " + (f"{n} seeds" if n > 1 else f"seed {df['seed'].min()}")
                     for n, names in sorted(by_count.items(), reverse=True))


@block("e5_gpu.ran")
def e5_gpu_ran() -> str:
    l1 = e5_gpu()
    nuc = e5_gpu_nuclear_trials()
    g1 = l1.groupby(["method", "seed"])["group_seconds"].first()
    gn = group_times(nuc)
    missing = [E5_NAMES[m] for m in E5_NAMES if m not in set(nuc["method"])]
    partial = [E5_NAMES[m] for m, n in nuc.groupby("method")["seed"].nunique().items() if n < 10]
    return ("| part of the protocol | configurations | device time | status |\n|---|---|---|---|\n"
            f"| l1, K = 10 (400 rounds), {l1['method'].nunique()} methods x {l1['seed'].nunique()} seeds x "
            f"{len(l1.groupby(['client_lr', 'server_lr']))} rate pairs | {len(l1):,} | {g1.sum():.0f} s of group wall "
            f"time ({len(g1)} groups, {g1.min():.1f}-{g1.max():.0f} s each, compilation included) | done |\n"
            "| l1, K = 1 (4,000 rounds) | 0 of 1,750 | - | not run: the session's 15 minutes of device time "
            "were spent |\n"
            f"| nuclear, K = 10 (20 rounds), {seeds_per_method(nuc)}, "
            f"{len(nuc.groupby(['client_lr', 'server_lr']))} pairs | {len(nuc):,} | {gn.sum():.0f} s "
            f"({len(gn)} groups) | done for {', '.join(E5_NAMES[m] for m, n in nuc.groupby('method')['seed'].nunique().items() if n >= 10)}"
            f" (10 seeds); {', '.join(partial)}: seed 0 only; {', '.join(missing) or 'none'}: not run |\n"
            "| nuclear, K = 1 (100 rounds) | 0 | - | not run |\n")


@block("e5_gpu.nuclear")
def e5_gpu_nuclear() -> str:
    df = e5_gpu_nuclear_trials()
    lines = ["| method | seeds | best pair by server model | server gap (mean +- std) | rank (X, server model) |",
             "|---|---|---|---|---|"]
    for method in ("feddualex", "feddualavg", "fedmip", "fedmid"):
        b = e5_best(df, method, "gap")
        seeds = df[df["method"] == method]["seed"].nunique()
        gap = f"{b['mean']:.3g}" + (f" +- {b['std']:.2g}" if seeds > 1 else " (one seed)")
        lines.append(f"| {E5_NAMES[method]} | {seeds} | ({b['pair'][0]:g}, {b['pair'][1]:g}) | {gap} | {b['rank']:.0f} |")
    return "\n".join(lines) + "\n"


@block("e5_gpu.nuclear_claim")
def e5_gpu_nuclear_claim() -> str:
    """The paper's rank claim against the final ranks (round 20) of each method's best pair,
    on every seed it ran."""
    df = e5_gpu_nuclear_trials()
    ranks, seeds = {}, {}
    for method in ("feddualex", "feddualavg", "fedmip", "fedmid"):
        b = e5_best(df, method, "gap")
        at = df[(df["method"] == method) & (df["client_lr"] == b["pair"][0]) & (df["server_lr"] == b["pair"][1])]
        ranks[method], seeds[method] = sorted(set(at["rank"].astype(int))), len(at)
    verdict = "holds" if max(ranks["feddualex"]) <= 10 else "does not hold"
    parts = [f"{E5_NAMES[m]} {'/'.join(map(str, r))} ({seeds[m]} seed{'s' if seeds[m] > 1 else ''})"
             for m, r in ranks.items()]
    return para(f'Claim "on the nuclear problem FeDualEx quickly reaches rank 10": {verdict} at round 20. '
                "The final rank of each method's best pair, on every seed it ran: " + "; ".join(parts) + ".")


# --- E2: results/e2_*_trials.csv (results/e1_e2_e5_tables.py's tables, from the CSVs) -------

def tables():
    """results/e1_e2_e5_tables.py: the tables it prints from a sweep's runs, here from their
    per-trial CSVs (the first-round column needs the runs' histories: not in a CSV)."""
    sys.path.insert(0, str(RESULTS))
    import e1_e2_e5_tables  # noqa: PLC0415

    return e1_e2_e5_tables


E2_COLS = ["train_loss", "rank", "recovery_error", "val_mse"]
E2_PAPER = {"feddualavg": (0.01, 1.0), "fedmid": (0.001, 0.3), "fedmid_osp": (0.001, 0.3),
            "feddualavg_osp": (0.001, 0.3)}  # the FCO paper's E1 points (no separate E2 rates)


def e2(name: str, block_only: bool = False) -> pd.DataFrame:
    """A per-trial CSV of E2; `block_only`: the pairs that ran on every seed."""
    t = pd.read_csv(RESULTS / f"e2_{name}_trials.csv")
    if block_only:
        n = t.groupby(["algorithm", CL, SL])["seed"].transform("nunique")
        t = t[n == t["seed"].nunique()].reset_index(drop=True)
    return t


def e2_table(t: pd.DataFrame, **kw) -> str:
    """The table, then its `N of M pairs finished on every seed` lines as one sentence."""
    text, _ = tables().best_table(t, E2_COLS, "train_loss", "min", E2_PAPER, **kw)
    table, _, summary = text.partition("\n\n")
    counts = [re.sub(r"^(\w+): (\d+ of \d+) pairs finished on every seed$", r"\1 \2", line)
              for line in summary.splitlines()]
    return table + "\n\n" + para("Rate pairs finished on every seed: " + ", ".join(counts) + ".")


def e2_best(t: pd.DataFrame, alg: str, pair=None) -> pd.DataFrame:
    """The finished trials of `alg` at `pair` (default: its lowest mean final train_loss)."""
    T = tables()
    rows = t[t["algorithm"] == alg]
    if pair is None:
        scores = T.pair_scores(rows, "train_loss", "min")
        pair = scores.idxmin()
    sel = rows[(rows[CL] == pair[0]) & (rows[SL] == pair[1])]
    return sel[sel["status"] == "finished"].assign(pair=[pair] * len(sel[sel["status"] == "finished"]))


def e2_rank16(t: pd.DataFrame, alg: str) -> tuple[int, int]:
    """(pairs finished on every seed, of those the pairs at rank 16 on every seed)."""
    rows = t[t["algorithm"] == alg]
    g = rows.groupby([CL, SL])
    stable = g["status"].apply(lambda s: bool((s == "finished").all()))
    at16 = g.apply(lambda x: bool(((x["status"] == "finished") & (x["rank"] == 16)).all()))
    return int(stable.sum()), int((stable & at16).sum())


def e2_ranks(t: pd.DataFrame, alg: str) -> str:
    fin = t[(t["algorithm"] == alg) & (t["status"] == "finished")]["rank"]
    return f"{fin.min():.0f}-{fin.max():.0f}"


def e2_never16(alg: str) -> bool:
    """No finished trial of `alg` has rank 16 at any recorded round (80, 400, 1500)."""
    return all(not ((e2(n)["algorithm"] == alg) & (e2(n)["status"] == "finished") & (e2(n)["rank"] == 16)).any()
               for n in ("round80", "round400", "round1500"))


def span(values) -> str:
    """`22-25` (whole numbers: a rank), or `25` when they agree."""
    lo, hi = int(round(min(values))), int(round(max(values)))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


@block("e2.centralized")
def e2_centralized() -> str:
    lv = levels()
    s0 = lv[(lv["setting"] == "E2") & (lv["seed"] == 0) & (lv["optimum"] == 1)].iloc[0]
    return para(f"Centralized optimum (FISTA, seed 0; `results/fedmid_levels_output.txt`): objective "
                f"**{s0['train_loss']:.3f}**, rank {s0['rank']:.0f}, recovery error {s0['recovery_error']:.3f}, "
                f"validation MSE {s0['val_mse']:.3f}.")


@block("e2.final_text")
def e2_final_text() -> str:
    t = e2("round1500")
    da, dap = e2_best(t, "feddualavg"), e2_best(t, "feddualavg", E2_PAPER["feddualavg"])
    mosp, mid, osp = e2_best(t, "fedmid_osp"), e2_best(t, "fedmid"), e2_best(t, "feddualavg_osp")
    ospp = e2_best(t, "feddualavg_osp", E2_PAPER["feddualavg_osp"])
    lv = levels()
    s0 = lv[(lv["setting"] == "E2") & (lv["seed"] == 0) & (lv["optimum"] == 1)].iloc[0]
    return para(
        f"At round 1500 FedDualAvg has the lowest loss ({pm(da['train_loss'])} at {rates(da['pair'].iloc[0])}; "
        f"{dap['train_loss'].mean():.3f} at the paper's "
        f"{rates(E2_PAPER['feddualavg'])}; the centralized optimum {s0['train_loss']:.3f} on seed 0) with rank "
        f"{span(da['rank'])}; FedMiD-OSP is level in loss ({mosp['train_loss'].mean():.3f}) and recovery error "
        f"({mosp['recovery_error'].mean():.3f} vs {da['recovery_error'].mean():.3f}) but at rank "
        f"{span(mosp['rank'])}; FedMiD is behind in both ({mid['train_loss'].mean():.3f}, rank {span(mid['rank'])}, "
        f"recovery error {mid['recovery_error'].mean():.2f}) - not because it is slow but because it ends "
        "elsewhere: its end point is the optimum of the problem at `2 lam` (next paragraph); FedDualAvg-OSP "
        f"has rank {span(osp['rank'])} but a loss of {osp['train_loss'].mean():.2f} at its best pair and "
        f"{'collapses to `W = 0` (rank 0)' if (ospp['rank'] == 0).all() else 'a rank of ' + span(ospp['rank'])} "
        "at the paper's pair. Tables A and A2 below show the speed.")


@block("e2.levels")
def e2_levels() -> str:
    t = e2("round1500")
    mid, mosp = e2_best(t, "fedmid"), e2_best(t, "fedmid_osp")
    head = (f"| | `lam` optimum | `2 lam` optimum, scored at `lam` | FedMiD, best ({short(mid['pair'].iloc[0][0])} / "
            f"{short(mid['pair'].iloc[0][1])}) | FedMiD-OSP, best ({short(mosp['pair'].iloc[0][0])} / "
            f"{short(mosp['pair'].iloc[0][1])}) |\n|---|---|---|---|---|\n")
    T = tables()
    row = lambda name, m: (f"| {name} | {level('E2', 1, m):.3f} | **{level('E2', 2, m):.3f}** "  # noqa: E731
                           f"| {T.pm(mid[m])} | {T.pm(mosp[m])} |")
    return (head + "\n".join([row("training objective", "train_loss"), row("recovery error", "recovery_error"),
                              row("validation MSE", "val_mse")])
            + f"\n| rank | {level('E2', 1, 'rank'):.0f} | {level('E2', 2, 'rank'):.0f} | {T.pm(mid['rank'])} "
              f"| {T.pm(mosp['rank'])} |\n")


@block("e2.distances")
def e2_distances() -> str:
    d = distances()
    lv = levels()
    s0 = lv[(lv["setting"] == "E2") & (lv["seed"] == 0) & (lv["optimum"] == 2)].iloc[0]
    t = e2("round1500")
    mid, mosp = e2_best(t, "fedmid"), e2_best(t, "fedmid_osp")
    pm_, po = mid["pair"].iloc[0], mosp["pair"].iloc[0]
    a, b, c = d[("E2", "fedmid", *pm_)], d[("E2", "fedmid", 0.001, 0.3)], d[("E2", "fedmid_osp", *po)]
    return para(
        f"The `2 lam` optimum of seed 0 alone: {s0['train_loss']:.3f} / {s0['recovery_error']:.3f}. Rerun on seed 0 "
        f"(`results/fedmid_distances_output.txt`), FedMiD's final model at {short(pm_[0])} / {short(pm_[1])} is "
        f"{a['2lam']:.3f} (relative) from the `2 lam` optimum and {a['lam']:.3f} from the `lam` optimum (at the "
        f"paper's 0.001 / 0.3: {b['2lam']:.3f} and {b['lam']:.3f}); FedMiD-OSP's at {short(po[0])} / {short(po[1])} "
        f"is {c['lam']:.3f} from the `lam` optimum and {c['2lam']:.3f} from the `2 lam` one. The `2 lam` optimum "
        f"has rank {s0['rank']:.0f}; FedMiD's excess rank ({a['rank']:.0f} in the rerun) is the noise of its "
        "stochastic iterates.")


# the E2 table at each recorded round (results/e2_round80_trials.csv, ...; "final": round 1500)
for _name, _round in (("e2.final", "round1500"), ("e2.round80", "round80"), ("e2.round400", "round400")):
    block(_name)(lambda r=_round: e2_table(e2(r)))


@block("e2.round80_text")
def e2_round80_text() -> str:
    t80, t400, t1500 = e2("round80"), e2("round400"), e2("round1500")
    p = E2_PAPER["fedmid"]
    return para(f"At round 80 the methods are far from their final values (FedMiD at the paper's {rates(p)}: "
                f"{e2_best(t80, 'fedmid', p)['train_loss'].mean():.1f} here, "
                f"{e2_best(t400, 'fedmid', p)['train_loss'].mean():.2f} at round 400, "
                f"{e2_best(t1500, 'fedmid', p)['train_loss'].mean():.2f} at round 1500), so this table shows "
                "speed, not the end point.")


@block("e2.round400_text")
def e2_round400_text() -> str:
    t = e2("round400")
    da, dap = e2_best(t, "feddualavg"), e2_best(t, "feddualavg", E2_PAPER["feddualavg"])
    mosp, mid, osp = e2_best(t, "fedmid_osp"), e2_best(t, "fedmid"), e2_best(t, "feddualavg_osp")
    return para(
        f"At round 400 FedDualAvg has the lowest loss ({pm(da['train_loss'])} at {rates(da['pair'].iloc[0])}, "
        f"{dap['train_loss'].mean():.3f} at the paper's {rates(E2_PAPER['feddualavg'])}) and rank "
        f"{span(da['rank'])}; FedMiD-OSP is close in loss ({mosp['train_loss'].mean():.3f}) at rank "
        f"{span(mosp['rank'])}, FedMiD behind ({mid['train_loss'].mean():.3f}, rank {span(mid['rank'])}), "
        f"FedDualAvg-OSP has rank {span(osp['rank'])} but a loss of {osp['train_loss'].mean():.2f}.")


@block("e2.rank16")
def e2_rank16_text() -> str:
    runs = {n: e2(n) for n in ("round80", "round400", "round1500")}
    stable, at80 = e2_rank16(runs["round80"], "feddualavg")
    _, at400 = e2_rank16(runs["round400"], "feddualavg")
    _, at1500 = e2_rank16(runs["round1500"], "feddualavg")
    paper = {n: e2_best(t, "feddualavg", E2_PAPER["feddualavg"])["rank"] for n, t in runs.items()}
    mid = {a: e2_ranks(runs["round1500"], a) for a in ("fedmid", "fedmid_osp")}
    never = all(e2_never16(a) for a in ("fedmid", "fedmid_osp"))
    lines = [f"- **FedDualAvg at rank 16 on every seed**, of its {stable} pairs finished on every seed: "
             f"{at80} at round 80, {at400} at round 400, {at1500} at round 1500"
             + (f"; at the paper's {rates(E2_PAPER['feddualavg'])} at all three rounds" if all(
                 (v == 16).all() for v in paper.values()) else "") + "."]
    lines.append("- **FedMiD and FedMiD-OSP never have rank 16** at the three recorded rounds, at any pair and "
                 f"seed; at round 1500 their ranks are {mid['fedmid']} (FedMiD) and {mid['fedmid_osp']} "
                 "(FedMiD-OSP)." if never else "- FedMiD or FedMiD-OSP has rank 16 at some recorded round.")
    return "".join(para(line, "  ") for line in lines)


@block("e2.seed0")
def e2_seed0() -> str:
    return e2_table(pd.read_csv(RESULTS / "e2_trials.csv"), select_seed=0)


@block("e2.block")
def e2_block() -> str:
    t = pd.read_csv(RESULTS / "e2_trials.csv")
    n = t.groupby(["algorithm", CL, SL])["seed"].transform("nunique")
    return e2_table(t[n == t["seed"].nunique()].reset_index(drop=True))


def e2_facts() -> dict:
    t = e2("round1500")
    f = {a: e2_best(t, a) for a in ORDER}
    f.update({f"{a}_paper": e2_best(t, a, E2_PAPER[a]) for a in ORDER})
    f["stable"], f["at80"] = e2_rank16(e2("round80"), "feddualavg")
    f["at1500"] = e2_rank16(t, "feddualavg")[1]
    f["never"] = all(e2_never16(a) for a in ("fedmid", "fedmid_osp"))
    f["ranks"] = {a: e2_ranks(t, a) for a in ORDER}
    return f


@block("e2.claims")
def e2_claims() -> str:
    f = e2_facts()
    da, dap, mid, mosp = f["feddualavg"], f["feddualavg_paper"], f["fedmid"], f["fedmid_osp"]
    osp, ospp = f["feddualavg_osp"], f["feddualavg_osp_paper"]
    T = tables()
    rows = [
        ("FedDualAvg reaches the exact rank 16 in fewer than 100 rounds",
         f"**holds at the paper's rates**: rank {span(dap['rank'])} at round 80 on every seed at "
         f"{rates(E2_PAPER['feddualavg'])}. **On the whole grid**: rank 16 at round 80 on every seed at {f['at80']} "
         f"of its {f['stable']} stable pairs, at round 1500 at {f['at1500']}. (The first round at rank 16 of "
         "each run was read from the runs' histories, which are not in the repository: not recorded.)"),
        ("FedMiD and FedMiD-OSP converge slower in loss and rank",
         ("**rank: holds** - neither has rank 16 at any pair, seed or recorded round (80, 400, 1500; ranks "
          f"{f['ranks']['fedmid']} and {f['ranks']['fedmid_osp']} at the end). " if f["never"] else
          "**rank: does not hold** at every pair. ")
         + f"**Loss: does not hold as stated.** FedMiD's higher loss ({T.pm(mid['train_loss'])} at its best "
           f"pair vs FedDualAvg's {T.pm(da['train_loss'])}; recovery error {mid['recovery_error'].mean():.2f} vs "
           f"{da['recovery_error'].mean():.2f}; table D) is not slowness: FedMiD has converged, to the optimum "
           "of the problem at `2 lam` (the prox applied on the clients and again on the server), whose loss "
           f"and recovery error in the `lam` problem are {level('E2', 2, 'train_loss'):.3f} and "
           f"{level('E2', 2, 'recovery_error'):.3f} (above; seeds 0-2). **FedMiD-OSP** is level with FedDualAvg "
           f"in loss ({T.pm(mosp['train_loss'])}) and recovery error ({mosp['recovery_error'].mean():.3f}), "
           f"while keeping rank {span(mosp['rank'])}"),
        ("FedDualAvg-OSP is low-rank but inaccurate",
         f"**holds, to the extreme**: rank {span(osp['rank'])} at its best pair, but its server threshold "
         f"`eta_s eta_c K r lam` grows every round: there the loss is {osp['train_loss'].mean():.2f} (recovery "
         f"error {osp['recovery_error'].mean():.2f}), and at the paper's {rates(E2_PAPER['feddualavg_osp'])} the "
         + (f"model has collapsed to `W = 0` (rank 0, loss {ospp['train_loss'].mean():.1f}, the start) by round "
            "1500 on every seed" if (ospp["rank"] == 0).all() else f"rank is {span(ospp['rank'])}")),
    ]
    return ("| paper (Fig. 4) | here (the whole grid, seeds 0-2, 1500 rounds: tables A, A2 and D) |\n|---|---|\n"
            + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n")


@block("e2.closing")
def e2_closing() -> str:
    f = e2_facts()
    da, dap = f["feddualavg"], f["feddualavg_paper"]
    lv = levels()
    s0 = lv[(lv["setting"] == "E2") & (lv["seed"] == 0) & (lv["optimum"] == 1)].iloc[0]
    return para(f"FedDualAvg is the only method whose model has the true rank and is accurate at the same time "
                f"(recovery error {da['recovery_error'].mean():.2f} at {rates(da['pair'].iloc[0])}, "
                f"{dap['recovery_error'].mean():.2f} at the paper's {rates(E2_PAPER['feddualavg'])}; the "
                f"centralized optimum's {s0['recovery_error']:.2f} on seed 0).")


@block("results.e2")
def results_e2() -> str:
    f = e2_facts()
    da, mid, mosp, dap = f["feddualavg"], f["fedmid"], f["fedmid_osp"], f["feddualavg_paper"]
    t = e2("round1500")
    return ("| claim (paper) | ours |\n|---|---|\n"
            "| E2: FedDualAvg exact rank 16 in < 100 rounds; FedMiD(-OSP) slower in loss and rank (Fig. 4) | "
            f"the whole grid, seeds 0-2, 1500 rounds ({len(t)} configurations): at the paper's rates rank "
            f"{span(dap['rank'])} at round 80 on every seed, and at round 80 at {f['at80']} of FedDualAvg's "
            f"{f['stable']} stable rate pairs on every seed (at round 1500 at {f['at1500']}); FedMiD / FedMiD-OSP "
            + ("never have it at any pair, seed or recorded round " if f["never"] else "have it somewhere ")
            + f"(ranks {f['ranks']['fedmid']} and {f['ranks']['fedmid_osp']} at round 1500); best losses at round "
              f"1500: FedDualAvg {tables().pm(da['train_loss'])} (rank {span(da['rank'])}), FedMiD-OSP "
              f"{tables().pm(mosp['train_loss'])} (level in loss, rank {span(mosp['rank'])}), FedMiD "
              f"{tables().pm(mid['train_loss'])} (rank {span(mid['rank'])}); FedDualAvg-OSP has rank 16, then "
              "collapses to `W = 0` at the paper's rates (`results/e2.md`) |\n")


# --- E5 on the CPU: results/e5_l1_*_trials.csv (fco-ray sweep of sweeps/e5_l1_k{1,10}.yaml) ---

def e5_cpu(name: str) -> pd.DataFrame:
    """A per-trial CSV of E5 (l1) with FedMiP without server prox as `fedmip_noprox` where
    its CSV exists; one row per configuration: the mean over seeds (and the seed count)."""
    t = pd.read_csv(RESULTS / f"e5_l1_{name}_trials.csv")
    noprox = RESULTS / f"e5_l1_{name}_fedmip_noprox_trials.csv"
    if noprox.exists():
        t = pd.concat([t, pd.read_csv(noprox).assign(algorithm="fedmip_noprox")], ignore_index=True)
    t.loc[t["status"] != "finished", ["duality_gap", "duality_gap_ergodic"]] = math.inf
    g = t.groupby(["algorithm", CL, SL])
    out = g.mean(numeric_only=True).reset_index()
    out["std"] = g["duality_gap"].std(ddof=1).values
    return out


def e5_top(t: pd.DataFrame, alg: str, col: str = "duality_gap", pair=None) -> pd.Series:
    rows = t[t["algorithm"] == alg]
    if pair is not None:
        return rows[(rows[CL] == pair[0]) & (rows[SL] == pair[1])].iloc[0]
    return rows.loc[rows[col].idxmin()]


@block("results.e5")
def results_e5() -> str:
    k10, k1 = e5_cpu("k10_seed0_grid"), e5_cpu("k1_seed0_grid")
    b10, b1 = e5_cpu("k10"), e5_cpu("k1")
    v = lambda x: f"{x:.3g}"  # noqa: E731
    da10, dx10 = e5_top(k10, "feddualavg"), e5_top(k10, "feddualex")
    da_b, dx_b = e5_top(b10, "feddualavg"), e5_top(b10, "feddualex")
    da1, dx1, da1_b, dx1_b = e5_top(k1, "feddualavg"), e5_top(k1, "feddualex"), e5_top(b1, "feddualavg"), e5_top(b1, "feddualex")
    untuned = k10[(k10["algorithm"] == "feddualavg") & (k10[SL] == 1.0)]["duality_gap"]
    ex, npx = e5_top(k10, "extragrad_local_sgd"), e5_top(k10, "fedmip_noprox")
    mid10, mid1 = e5_top(k10, "fedmid"), e5_top(k1, "fedmid")
    erg10, erg1 = e5_top(k10, "feddualex", "duality_gap_ergodic"), e5_top(k1, "feddualex", "duality_gap_ergodic")
    pair = f"({da10[CL]:g}, {da10[SL]:g})"
    above10 = "**yes**" if da10["duality_gap"] > 1 else "**no at K = 10**"
    above1 = "**yes at K = 1**" if da1["duality_gap"] > 1 else "**no at K = 1**"
    text = (
        "| E5: FedDualAvg and FedMiD stay above gap 1, extra-step methods ~1e-1 (FeDualEx Fig. 4) | l1, both rates "
        "tuned: the paper's whole rate grid for all five methods at K = 10 and K = 1 on seed 0, and a 3 x 3 block "
        "of it on seeds 0-2 (K = 10, and K = 1 for FeDualEx and FedDualAvg). FedMiD above 1: "
        + ("**yes**" if min(mid10["duality_gap"], mid1["duality_gap"]) > 1 else "**no**")
        + f" ({v(mid10['duality_gap'])} at best over the whole grid at K = 10, {v(mid1['duality_gap'])} at K = 1). "
        f"FedDualAvg above 1: {above10} ({v(da10['duality_gap'])} at {pair}, {v(da_b['duality_gap'])} ± "
        f"{da_b['std']:.1g} on 3 seeds, against FeDualEx's server model {v(dx_b['duality_gap'])} ± {dx_b['std']:.1g}; "
        f"{untuned.min():.2g}-{untuned.max():.2g} at the untuned `eta_s = 1`, where \"above 1\" comes from), "
        f"{above1} ({v(da1['duality_gap'])} at best over the whole grid, {v(da1_b['duality_gap'])} ± {da1_b['std']:.1g} "
        f"on the block, vs FeDualEx {v(dx1['duality_gap'])} and {v(dx1_b['duality_gap'])} ± {dx1_b['std']:.1g}). "
        f"Extra-step methods ~1e-1: FeDualEx {v(dx10['duality_gap'])}, Extra-step local SGD {v(ex['duality_gap'])}, "
        f"FedMiP without server prox {v(npx['duality_gap'])} (the last two dense: {min(ex['density'], npx['density']):.3f}"
        f"-{max(ex['density'], npx['density']):.3f} vs FeDualEx {dx10['density']:.3f}). FeDualEx's ergodic output "
        f"(Algorithm 1's): {v(erg10['duality_gap_ergodic'])} at K = 10, {v(erg1['duality_gap_ergodic'])} at K = 1 "
        "(seed 0, whole grid). Not run on the CPU: seeds 1-9 of the whole grid, the nuclear grids (the GPU's "
        "nuclear K = 10: `results/e5_gpu.md`; `results/e5_full_scale.md`) |\n")
    return "| claim (paper) | ours |\n|---|---|\n" + text


# --- results/e5_full_scale.md: E5 (l1) on the CPU, from results/e5_l1_*_trials.csv --------------
# (results/e5_rankings.py reads the CSVs per scope; results/e1_e2_e5_tables.py writes the tables)

E5_COLS = ["duality_gap", "density", "duality_gap_ergodic", "density_ergodic"]
E5_SCOPES = {"k10_grid": "K = 10, whole grid, seed 0", "k1_grid": "K = 1, whole grid, seed 0",
             "k10_block": "K = 10, 3 x 3 block, seeds 0-2", "k1_block": "K = 1, 3 x 3 block, seeds 0-2"}
E5_LABEL = {**E5_NAMES, "fedmip": "FedMiP (Appendix H)", "fedmip, no server prox": "FedMiP without server prox"}


def rankings():
    sys.path.insert(0, str(RESULTS))
    import e5_rankings  # noqa: PLC0415

    return e5_rankings


def e5_trials(scope: str) -> pd.DataFrame:
    return rankings().load(rankings().SCOPES[E5_SCOPES[scope]])


def e5_ranked(scope: str) -> pd.DataFrame:
    """Per algorithm: its best pair by the server model and by the returned output."""
    return rankings().best(e5_trials(scope))


def e5_at(scope: str, alg: str, pair) -> pd.DataFrame:
    t = e5_trials(scope)
    return t[(t["algorithm"] == alg) & (t[CL] == pair[0]) & (t[SL] == pair[1])]


def g3(x: float) -> str:
    return f"{x:.3g}"


def pair_text(pair) -> str:
    return f"({pair[0]:g}, {pair[1]:g})"


@block("e5.rankings")
def e5_rankings_tables() -> str:
    return "\n".join(rankings().table(scope) for scope in rankings().SCOPES)


@block("e5.claims")
def e5_claims() -> str:
    k10, k1, b10 = e5_ranked("k10_grid"), e5_ranked("k1_grid"), e5_ranked("k10_block")
    name = lambda a: E5_LABEL.get(a, a)  # noqa: E731
    dx = "feddualex"
    npx, ex, da, mid, mip = "fedmip, no server prox", "extragrad_local_sgd", "feddualavg", "fedmid", "fedmip"

    def both(col, alg):
        return f"{g3(k10.loc[alg, col])} (K = 10) / {g3(k1.loc[alg, col])} (K = 1)"

    def lower(r, col, alg=dx):
        """The methods whose `col` is below `alg`'s, lowest first, as `Name value`."""
        others = r[col].drop(alg).sort_values()
        return [f"{name(a)} {g3(v)}" for a, v in others.items() if v < r.loc[alg, col]]

    above = lambda r, alg: r.loc[alg, "gap"] > 1  # noqa: E731
    mid_holds = above(k10, mid) and above(k1, mid)
    da_text = {(True, True): "**FedDualAvg: holds at K = 10 and K = 1**",
               (False, True): "**FedDualAvg: holds at K = 1, does not hold at K = 10** once the server rate is tuned",
               (True, False): "**FedDualAvg: holds at K = 10, does not hold at K = 1**",
               (False, False): "**FedDualAvg: does not hold** at either K once the server rate is tuned"}
    row1 = ("FedDualAvg and FedMiD stay above a gap of 1",
            f"FedMiD {both('gap', mid)}; FedDualAvg **{g3(k10.loc[da, 'gap'])}** (K = 10, at "
            f"{pair_text(k10.loc[da, 'pair'])}) / {g3(k1.loc[da, 'gap'])} (K = 1)",
            "the same (both return their server model)",
            ("**holds for FedMiD** (its end point is the `2 lam` saddle point, `docs/fedmid_fixed_point.md`)"
             if mid_holds else "**does not hold for FedMiD**")
            + "; " + da_text[(above(k10, da), above(k1, da))])
    order_1 = lambda r, col, alg: r.loc[alg, col] < 0.5  # noqa: E731  "of order 1e-1 or lower"
    dx_both = all(order_1(r, c, dx) for r in (k10, k1) for c in ("gap", "out_gap"))
    mip_only_noprox = (all(r.loc[mip, c] > 1 for r in (k10, k1) for c in ("gap", "out_gap"))
                       and all(order_1(r, c, npx) for r in (k10, k1) for c in ("gap", "out_gap")))
    row2 = ("FeDualEx (and FedMiP) reach a gap of order 1e-1",
            f"FeDualEx {both('gap', dx)}; FedMiP (Appendix H) {both('gap', mip)}; FedMiP without server "
            f"prox {both('gap', npx)}",
            f"FeDualEx **{g3(k10.loc[dx, 'out_gap'])}** / **{g3(k1.loc[dx, 'out_gap'])}**; FedMiP (Appendix H) "
            f"{g3(k10.loc[mip, 'out_gap'])} / {g3(k1.loc[mip, 'out_gap'])}; FedMiP without server prox "
            f"{g3(k10.loc[npx, 'out_gap'])} / {g3(k1.loc[npx, 'out_gap'])}",
            ("**holds for FeDualEx under both**" if dx_both else "**does not hold for FeDualEx under both**")
            + (" (lower by its returned output)" if all(r.loc[dx, "out_gap"] < r.loc[dx, "gap"] for r in (k10, k1)) else "")
            + ("; FedMiP holds only without the server prox, under both rankings" if mip_only_noprox else ""))

    def beats(r, col):
        below = lower(r, col)
        return ("**yes**, the lowest of every method" if not below
                else "**no**, " + ", ".join(below) + f" below FeDualEx's {g3(r.loc[dx, col])}")
    lowest = lambda r, col: not lower(r, col)  # noqa: E731
    row3 = ("FeDualEx beats the baselines",
            f"K = 10: {beats(k10, 'gap')}; K = 1: {beats(k1, 'gap')}",
            f"K = 10: {beats(k10, 'out_gap')}; K = 1: {beats(k1, 'out_gap')}",
            "**holds by the returned output" + (" at both K" if lowest(k10, "out_gap") and lowest(k1, "out_gap") else " in part")
            + ("; by the server model it does not hold at K = 10" if not lowest(k10, "gap") else "")
            + ("" if lowest(k1, "gap") else " nor at K = 1") + "**; the 3-seed block at K = 10: server model "
            + (", ".join(lower(b10, "gap")) + f" below FeDualEx's {g3(b10.loc[dx, 'gap'])}" if lower(b10, "gap")
               else f"FeDualEx lowest ({g3(b10.loc[dx, 'gap'])})")
            + "; returned output " + (f"FeDualEx lowest ({g3(b10.loc[dx, 'out_gap'])})" if lowest(b10, "out_gap")
                                      else ", ".join(lower(b10, "out_gap")) + f" below FeDualEx's {g3(b10.loc[dx, 'out_gap'])}"))
    dense = lambda r, col: r.loc[dx, col] > 0.9  # noqa: E731
    row4 = ("FeDualEx gives sparse solutions (density about 0.7), FedMiP dense (about 0.95)",
            f"FeDualEx {k10.loc[dx, 'density']:.3f} / {k1.loc[dx, 'density']:.3f}; FedMiP without server prox "
            f"{k10.loc[npx, 'density']:.3f} / {k1.loc[npx, 'density']:.3f}",
            f"FeDualEx {k10.loc[dx, 'out_density']:.3f} (K = 10) / {k1.loc[dx, 'out_density']:.3f} (K = 1); FedMiP "
            f"without server prox {k10.loc[npx, 'out_density']:.3f} / {k1.loc[npx, 'out_density']:.3f}",
            ("**holds in part**: the sparsity is the server model's; the returned output, an average of sparse "
             "points with moving supports, is dense" if dense(k10, "out_density") and dense(k1, "out_density")
             else "**holds** under both rankings"))
    ex_conv = all(r.loc[ex, c] < 0.5 for r in (k10, k1) for c in ("gap", "out_gap"))
    row5 = ("Extra-step local SGD neither converges nor gives sparsity",
            f"gap {both('gap', ex)}; density {k10.loc[ex, 'density']:.3f} / {k1.loc[ex, 'density']:.3f}",
            f"gap {g3(k10.loc[ex, 'out_gap'])} / {g3(k1.loc[ex, 'out_gap'])}; density "
            f"{k10.loc[ex, 'out_density']:.3f} / {k1.loc[ex, 'out_density']:.3f}",
            "**holds in part** under both: no sparsity, but it converges in gap" if ex_conv
            else "**holds** under both")
    rows = [row1, row2, row3, row4, row5]
    return ("| paper | ranked by the server model | ranked by the returned output (ergodic where the method has "
            "one) | verdict |\n|---|---|---|---|\n" + "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n")


@block("e5.ran")
def e5_ran() -> str:
    grid = pd.concat([e5_trials("k10_grid"), e5_trials("k1_grid")])
    k10, k1 = e5_trials("k10_block"), e5_trials("k1_block")
    rounds = lambda t: int(t["final_round"].max())  # noqa: E731
    cl = sorted(grid[CL].unique(), reverse=True)
    sl = sorted(grid[SL].unique(), reverse=True)
    bc, bs = sorted(k10[CL].unique(), reverse=True), sorted(k10[SL].unique(), reverse=True)
    seeds = lambda t: f"{int(t['seed'].min())}-{int(t['seed'].max())}"  # noqa: E731
    k1_algs = " and ".join(E5_LABEL[a] for a in sorted(k1["algorithm"].unique(), key=lambda a: a != "feddualex"))
    return (para(f"What ran (l1 problem, {rounds(e5_trials('k10_grid'))} rounds at K = 10, {rounds(e5_trials('k1_grid'))} "
                 "at K = 1; every configuration through `fco-ray sweep` of the shipped sweep files, fused: one Tune "
                 "trial per method and seed):") + "\n"
            + para(f"- **the paper's whole rate grid** (`eta_c` in {{{', '.join(f'{x:g}' for x in cl)}}} x `eta_s` in "
                   f"{{{', '.join(f'{x:g}' for x in sl)}}}) for all five methods and FedMiP without server prox, at "
                   f"K = 10 and at K = 1, on **seed 0** ({len(grid)} configurations);", "  ")
            + para(f"- the **3 x 3 block** `eta_c` in {{{', '.join(f'{x:g}' for x in bc)}}} x `eta_s` in "
                   f"{{{', '.join(f'{x:g}' for x in bs)}}} for the same six at K = 10 on **seeds {seeds(k10)}** "
                   f"({len(k10)} configurations), and for {k1_algs} at K = 1 on seeds {seeds(k1)} ({len(k1)}).", "  "))


def e5_best_table(scope: str) -> str:
    text, _ = tables().best_table(e5_trials(scope), E5_COLS, "duality_gap", "min", {})
    return text.split("\n\n")[0] + "\n"


for _scope in E5_SCOPES:
    block(f"e5.best_{_scope}")(lambda s=_scope: e5_best_table(s))
for _scope in ("k10_grid", "k1_grid"):
    block(f"e5.grid_{_scope}")(lambda s=_scope: tables().grid_table(e5_trials(s), "duality_gap") + "\n")


@block("e5.zero")
def e5_zero() -> str:
    t = e5_trials("k10_grid")
    z = t[t["algorithm"].isin(["fedmid", "fedmip"]) & (t["density"] == 0)]
    low = z[CL].min()
    rows = t[t["algorithm"].isin(["fedmid", "fedmip"]) & (t[CL] >= low)]
    every = (rows["density"] == 0).all()
    return para(f"(`fedmid` / `fedmip` at client rates >= {low:g} end at {g3(z['duality_gap'].mean())} with density 0 "
                + ("at every server rate" if every else "at some server rates")
                + ": the server model is thresholded to zero.)")


@block("e5.k1_feddualavg")
def e5_k1_feddualavg() -> str:
    t = e5_trials("k1_block")
    t = t[t["algorithm"] == "feddualavg"]
    m = t.groupby([CL, SL])["duality_gap"].mean()
    servers = sorted(t[SL].unique(), reverse=True)
    parts = [" / ".join(f"{m[(c, s)]:.2f}" for s in servers) + f" at client rate {c:g}"
             for c in sorted(t[CL].unique(), reverse=True)]
    return para("FedDualAvg at K = 1 over the block, gap by (client, server) rate: " + ", ".join(parts)
                + f" (server rates {' / '.join(f'{s:g}' for s in servers)}; mean over seeds; "
                  "`results/e5_l1_k1_trials.csv`).")


@block("e5.reproducibility")
def e5_reproducibility() -> str:
    """The block's seed-0 trials against the whole grid's at the same pairs."""
    out = []
    for k, grid, blk in (("10", "k10_grid", "k10_block"), ("1", "k1_grid", "k1_block")):
        b = e5_trials(blk)
        m = b[b["seed"] == 0].merge(e5_trials(grid), on=["algorithm", CL, SL], suffixes=("_b", "_g"))
        rel = ((m["duality_gap_b"] - m["duality_gap_g"]).abs() / m["duality_gap_g"])
        apart = m[rel > 0]
        out.append(f"at K = {k} {len(m) - len(apart)} of {len(m)} pairs equal to the CSVs' 6 digits; the other "
                   f"{len(apart)}, every one at a final gap above {apart[['duality_gap_b', 'duality_gap_g']].min().min():.2f} "
                   f"(no convergence), are up to {rel.max():.1%} apart")
    return para("Reproducibility: the seed-0 trials of the block against the same pairs of the whole grid (run as "
                "groups of 9 instead of 35): " + "; ".join(out) + ". Where a method does not converge the final gap "
                "depends on rounding (the BLAS blocking of a group of 9 or 35): the same regime, other digits.")


@block("e5.claims_list")
def e5_claims_list() -> str:
    k10, k1, b10 = e5_ranked("k10_grid"), e5_ranked("k1_grid"), e5_ranked("k10_block")
    b1 = e5_ranked("k1_block")
    dx, da, mid = "feddualex", "feddualavg", "fedmid"
    ex, npx, mip = "extragrad_local_sgd", "fedmip, no server prox", "fedmip"
    sd = lambda scope, alg, r, col="duality_gap": e5_at(scope, alg, r.loc[alg, "pair"] if col == "duality_gap"  # noqa: E731
                                                        else r.loc[alg, "out_pair"])[col].std(ddof=1)
    ms = lambda scope, r, alg, col="duality_gap": (  # noqa: E731
        f"{g3(r.loc[alg, 'gap' if col == 'duality_gap' else 'out_gap'])} ± {sd(scope, alg, r, col):.1g}")
    t10 = e5_trials("k10_grid")
    untuned = t10[(t10["algorithm"] == da) & (t10[SL] == 1.0)]["duality_gap"]
    zero = t10[(t10["algorithm"] == mid) & (t10["density"] == 0)]
    above = lambda r, a: r.loc[a, "gap"] > 1  # noqa: E731
    items = [
        f"**\"FedMiD stays above 1\"**: **{'holds' if above(k10, mid) and above(k1, mid) else 'does not hold'}**. Its "
        f"best over the whole grid is {g3(k10.loc[mid, 'gap'])} at {pair_text(k10.loc[mid, 'pair'])} (density "
        f"{k10.loc[mid, 'density']:.2f}) at K = 10 and {g3(k1.loc[mid, 'gap'])} at K = 1; client rates >= "
        f"{zero[CL].min():g} end at {g3(zero['duality_gap'].mean())} with density 0. FedMiP with the server prox of "
        f"Appendix H behaves the same ({g3(k10.loc[mip, 'gap'])} at {pair_text(k10.loc[mip, 'pair'])}).",
        f"**\"FedDualAvg stays above 1\"**: at K = 10 **{'holds' if above(k10, da) else 'does not hold'}**: "
        f"{g3(k10.loc[da, 'gap'])} at {pair_text(k10.loc[da, 'pair'])} on seed 0, {ms('k10_block', b10, da)} on 3 "
        f"seeds; at `eta_s = 1` (the untuned server rate) it stays at {untuned.min():.2g}-{untuned.max():.2g} at "
        "every client rate, which is where \"above 1\" comes from. At K = 1 "
        f"**{'holds' if above(k1, da) else 'does not hold'}**: {g3(k1.loc[da, 'gap'])} at best over the whole grid "
        f"(seed 0, at {pair_text(k1.loc[da, 'pair'])}), {ms('k1_block', b1, da)} at the block's best on 3 seeds, "
        f"against FeDualEx's {g3(k1.loc[dx, 'gap'])} (whole grid) and {ms('k1_block', b1, dx)} (block).",
        f"**\"Extra-step methods around 1e-1\"**: at K = 10 FeDualEx {g3(k10.loc[dx, 'gap'])} (server model; "
        f"{ms('k10_block', b10, dx)} on 3 seeds), Extra-step local SGD {g3(k10.loc[ex, 'gap'])}, FedMiP without "
        f"server prox {g3(k10.loc[npx, 'gap'])}; at K = 1 FeDualEx {g3(k1.loc[dx, 'gap'])}, Extra-step local SGD "
        f"{g3(k1.loc[ex, 'gap'])}, FedMiP without server prox {g3(k1.loc[npx, 'gap'])} (Appendix H's FedMiP with "
        f"server prox: {g3(k10.loc[mip, 'gap'])} at K = 10 and {g3(k1.loc[mip, 'gap'])} at K = 1, with FedMiD).",
        f"**\"FeDualEx sparse (density ~0.7), FedMiP and Extra-step local SGD dense\"**: FeDualEx "
        f"{k10.loc[dx, 'density']:.3f} against {min(k10.loc[ex, 'density'], k10.loc[npx, 'density']):.3f}-"
        f"{max(k10.loc[ex, 'density'], k10.loc[npx, 'density']):.3f} (K = 10). Among the sparse server models "
        f"FedDualAvg ({g3(k10.loc[da, 'gap'])}) and FeDualEx ({g3(k10.loc[dx, 'gap'])}) at K = 10, FeDualEx "
        f"({ms('k1_block', b1, dx)}) and FedDualAvg ({ms('k1_block', b1, da)}) at K = 1 (block).",
        f"**FeDualEx's ergodic output** (Algorithm 1's return value): {g3(k1.loc[dx, 'out_gap'])} at "
        f"{pair_text(k1.loc[dx, 'out_pair'])} at K = 1 over the whole grid ({ms('k1_block', b1, dx, 'duality_gap_ergodic')} "
        f"on 3 seeds; the ergodic outputs of FedMiP without server prox {g3(k1.loc[npx, 'out_gap'])} and of "
        f"Extra-step local SGD {g3(k1.loc[ex, 'out_gap'])}), {g3(k10.loc[dx, 'out_gap'])} at "
        f"{pair_text(k10.loc[dx, 'out_pair'])} at K = 10 (FedMiP without server prox {g3(k10.loc[npx, 'out_gap'])}, "
        f"Extra-step local SGD {g3(k10.loc[ex, 'out_gap'])}), with density {k10.loc[dx, 'out_density']:.2f} / "
        f"{k1.loc[dx, 'out_density']:.2f}.",
    ]
    return "".join(para("- " + i, "  ") for i in items)


# --- docs/results.md's E7 row: results/e7_statistics*.json, results/e7_fig2_calibrated.jsonl ------
# (benchmarks/e7_calibration.py writes results/e7.md's own region from the same records)

def e7_calibration():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import e7_calibration  # noqa: PLC0415

    return e7_calibration


def e7_within(name: str) -> tuple[int, int, int]:
    """(statistics within 10% of the paper's, statistics measured, data seeds) of a record."""
    from fco_ray.data.text_statistics import PAPER  # noqa: PLC0415

    cal = e7_calibration()
    runs = json.loads((RESULTS / f"{name}.json").read_text())["runs"]
    ok = sum(cal.within(r[k], PAPER[k]) for r in runs for k in cal.NAMES)
    return ok, len(runs) * len(cal.NAMES), len(runs)


@block("results.e7")
def results_e7() -> str:
    cal = e7_calibration()
    from e7_fig2 import best_runs  # noqa: PLC0415  (benchmarks/, on the path from here on)

    lines = [json.loads(s) for s in (RESULTS / "e7_fig2_calibrated.jsonl").read_text().splitlines()]
    header = next(r for r in lines if r["kind"] == "problem")
    runs = [r for r in lines if r["kind"] == "run"]
    claims = cal.claims(best_runs(runs), runs, header["opt_test_error"])
    ok, total, seeds = e7_within("e7_statistics")
    ok10k, total10k, _ = e7_within("e7_statistics_10k")
    rounds = max(max(r["round"]) for r in runs)
    return ("| claim (paper) | ours |\n|---|---|\n"
            "| E7: FSVRG near the optimal test error in ~30 rounds, GD far slower, CoCoA+ no better than GD, "
            "FSVRG ~ FSVRGR (Fig. 2) | data calibrated to the paper's four data statistics (within 10%: "
            f"{ok} of {total} values over {seeds} data seeds at {header['nodes']:,} nodes, {ok10k} of {total10k} at "
            f"10,000; `results/e7_statistics.md`), {header['nodes']:,} nodes, {rounds} rounds, each method at its "
            "best step size (lowest final f - f*). " + " ".join(claims)
            + " The uncalibrated stand-in at 10,000 nodes, before: the later sections of `results/e7.md` |\n")



# --- results/e7.md: the calibrated region (the same function as `benchmarks/e7_calibration.py
# --render-only --page`) and the uncalibrated sections (results/e7_page.py) -----------------------

@block("e7_calibrated")
def e7_calibrated() -> str:
    cal = e7_calibration()
    record = json.loads((RESULTS / "e7_statistics.json").read_text())
    lines = [json.loads(s) for s in (RESULTS / "e7_fig2_calibrated.jsonl").read_text().splitlines()]
    return cal.fig2_region(record, lines, "results/e7_fig2_calibrated.jsonl") + "\n"


def e7_page():
    sys.path.insert(0, str(RESULTS))
    import e7_page  # noqa: PLC0415

    return e7_page


for _name, _fn in (("e7.uncalibrated_10k", "e7_10k_table"), ("e7.uncalibrated_10k_claims", "e7_10k_claims"),
                   ("e7.uncalibrated_10k_earlier", "e7_10k_earlier"), ("e7.uncalibrated_300", "e7_300_table"),
                   ("e7.uncalibrated_300_claims", "e7_300_claims"), ("e7.memory", "e7_memory")):
    block(_name)(lambda fn=_fn: getattr(e7_page(), fn)())

# --- docs/benchmarks.md: the records the benchmark scripts write in benchmarks/results/ ----------

BENCH = ROOT / "benchmarks" / "results"


def bench_text(name: str) -> str:
    return (BENCH / name).read_text()


def bench_rows(name: str) -> list[dict[str, str]]:
    """The rows of the first markdown table of benchmarks/results/NAME, header -> cell."""
    lines = [l for l in bench_text(name).splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]
            if not l.startswith("|---")]


def bench_row(name: str, **match: str) -> dict[str, str]:
    return next(r for r in bench_rows(name) if all(r[k] == v for k, v in match.items()))


def nums(cell: str) -> list[float]:
    """The numbers of a cell: `0.63 / 0.81` -> [0.63, 0.81], `1.53x (1.35-1.75)` -> [1.53, 1.35, 1.75]."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*(?:e[-+]?\d+)?", cell)]


def bench_find(name: str, pattern: str) -> re.Match:
    m = re.search(pattern, bench_text(name))
    if m is None:
        raise SystemExit(f"benchmarks/results/{name}: no {pattern!r}")
    return m


def load_at_start(name: str) -> float:
    """The 1-minute load average at a record's start."""
    m = re.search(r"load average[^\n]*?(?:at start |\(1, 5, 15 min\) (?:before \()?)([\d.]+)", bench_text(name))
    return float(m[1])


def span2(values: list[float], fmt: str = "{:.2f}") -> str:
    x, y = fmt.format(min(values)), fmt.format(max(values))
    return x if x == y else f"{x}-{y}"


@block("bench.config_errors")
def bench_config_errors() -> str:
    """benchmarks/results/config_errors.json (`benchmarks/config_errors.py`)."""
    import statistics

    rec = json.loads(bench_text("config_errors.json"))
    cases = rec["cases"]
    base = cases.pop("python -c pass")
    each = "; ".join(f"`{name}` {min(w):.2f} s (median {statistics.median(w):.2f})" for name, w in cases.items())
    worst = max(min(w) for w in cases.values())
    return para(
        f"Each refusal is a fresh process, exit code 2 and one line of error; minimum over {rec['repeats']} "
        f"repeats: {each}; `python -c pass` {min(base):.2f} s. The slowest refusal, {worst:.2f} s, is "
        f"{'under' if worst < 0.5 else 'over'} the goal of half a second ({rec['date']}, commit {rec['commit']}, "
        f"load average {rec['load_before'][0]:g} before and {rec['load_after'][0]:g} after; "
        "`benchmarks/results/config_errors.md`).")


@block("bench.quickstart")
def bench_quickstart() -> str:
    t, run = quickstart()
    idle, busy = bench_rows("fused_quickstart_idle.md"), bench_rows("fused_quickstart.md")
    fused = lambda rows, f: next(r for r in rows if r["tune.fuse"] == f)  # noqa: E731
    return para(
        f"`fco-ray sweep sweeps/quickstart.yaml` on its {len(t)} configurations took {run['wall_seconds']:g} s from a "
        "new store to the last line, report included, on "
        f"{run['cpus']} cores at a load average of {run['load_average_before'][0]:g}-{run['load_average_after'][0]:g} "
        f"({run['date']}, `results/quickstart_run.json`). On the earlier {fused(idle, 'true')['configurations']}-"
        f"configuration grid without the report, fused ({fused(idle, 'true')['Tune trials']} Tune trials) against "
        f"unfused ({fused(idle, 'false')['Tune trials']}): {fused(idle, 'true')['wall time, s']} s against "
        f"{fused(idle, 'false')['wall time, s']} s at a load of {load_at_start('fused_quickstart_idle.md'):g} "
        f"(`benchmarks/results/fused_quickstart_idle.md`), {fused(busy, 'true')['wall time, s']} s against "
        f"{fused(busy, 'false')['wall time, s']} s at {load_at_start('fused_quickstart.md'):g} (`fused_quickstart.md`).")


@block("bench.e7")
def bench_e7() -> str:
    idle, busy = "e7_round_idle.md", "e7_round.md"
    r = lambda name, what: bench_row(name, what=what)  # noqa: E731
    fs, touch, order = r(idle, "fsvrg round"), r(idle, "touch"), r(idle, "touch in pass order")
    built = lambda name: float(bench_find(name, r"built in ([\d.]+) s wall")[1])  # noqa: E731
    prob = bench_find(idle, r"n = ([\d,]*\d) training posts, nnz = ([\d,]*\d)")
    nodes = int(bench_find(idle, r"--clients (\d+)")[1])
    mem = bench_row("e7_memory_s6.md", nodes=f"{nodes:,}")
    peak = float(bench_find("e7_memory_s6.md", r"One FSVRG round at [\d,]+ nodes.*?traced peak ([\d.]+) MiB")[1])
    fpeak = float(bench_find("e7_memory_s6.md", r"One fused FSVRG round of (\d+) step sizes.*?traced peak ([\d.]+) MiB")[2])
    scratch = float(bench_find("e7_memory_s6.md", r"= ([\d.]+) MiB per call")[1])
    group = bench_find("e7_memory_s6.md", r"One fused FSVRG round of (\d+) step sizes")[1]
    names = {"fsvrg": "FSVRG", "dane": "DANE", "gd": "GD", "fsvrg_naive": "naive FSVRG"}
    fused = ", ".join(f"{nums(x['CPU min'])[0]:.2f}x ({names[x['method']]})" for x in bench_rows("e7_fused.md"))
    return para(
        f"At the paper's {nodes:,} nodes ({prob[1]} posts, {prob[2]} nonzeros) the problem builds in {built(idle):g} s "
        f"and an FSVRG round takes {span2(nums(fs['min wall s']) + nums(fs['median wall s']))} s (min to median), "
        f"{nums(fs['/ bare pass'])[0]:.2f}x a bare compiled exact pass over the same data and "
        f"{nums(fs['/ touch in pass order'])[0]:.2f}x a bare touch of every nonzero in the pass's order (a "
        "random-access read of w and scatter per nonzero, no arithmetic), at a load of "
        f"{load_at_start(idle):g} (`benchmarks/results/e7_round_idle.md`; {built(busy):g} s to build and "
        f"{nums(r(busy, 'fsvrg round')['/ bare pass'])[0]:.2f}x the bare pass in wall time at a load of "
        f"{load_at_start(busy):g}, `e7_round.md`). Against a vectorized sequential sum of the nonzeros "
        f"({nums(touch['median wall s'])[0]:.2f} s) the round is {nums(fs['/ touch'])[0]:.0f}x: no exact pass comes "
        f"near that, since the pass-order touch alone is {nums(order['/ touch'])[0]:.1f}x it. Memory stays about "
        f"{nums(mem['held bytes / nnz'])[0]:.0f} bytes per nonzero ({mem['peak / nnz']} at the build's peak) and a "
        f"round adds {peak:.0f} MiB (a fused round of {group} step sizes {fpeak:.0f} MiB, plus {scratch:g} MiB of "
        "kernel scratch), independent of the number of nodes (`benchmarks/results/e7_memory_s6.md`). One fused "
        f"round of the sweep's {group} step sizes takes {fused} less CPU than the {group} unfused rounds "
        "(`benchmarks/results/e7_fused.md`).")


def ms_pair(cell: str) -> str:
    lo, hi = nums(cell)[:2]
    return f"{lo:.2f}-{hi:.2f}"


@block("bench.ray_round")
def bench_ray_round() -> str:
    e1, big = bench_row("ray_round_idle.md", task="e1"), bench_row("ray_round_idle.md", task="e1_1000")
    busy = bench_row("ray_round.md", task="e1")
    noop = "2 no-op actor calls ms"
    med = lambda row, col: nums(row[col])[1]  # noqa: E731
    return para(
        f"Ray's floor here: two no-op actor calls take {ms_pair(e1[noop])} ms (min to median) at a load of "
        f"{load_at_start('ray_round_idle.md'):g} (`benchmarks/results/ray_round_idle.md`) and "
        f"{ms_pair(busy[noop])} ms at {load_at_start('ray_round.md'):g} (`ray_round.md`). An E1 round (10 of 64 "
        f"clients, K = 10) takes {med(e1, 'ray ms'):.2f} ms on 2 actors against {med(e1, 'local ms'):.2f} ms local "
        f"(the two no-op calls alone are {nums(e1['no-op / local'])[0]:.2f}x a local round), and at 1,000 clients x "
        f"32 with 100 per round {med(big, 'ray ms'):.2f} ms against {med(big, 'local ms'):.2f} ms "
        f"({nums(big['ray / local'])[0]:.2f}x; medians).")


def scaling(name: str, threads: str = "default") -> list[dict[str, str]]:
    return [r for r in bench_rows(name) if r["threads"] == threads]


@block("bench.ray_scaling")
def bench_ray_scaling() -> str:
    rows = scaling("ray_scaling_s6.md")
    heavy = [r for r in rows if nums(r["local s"])[0] >= 0.1]
    what = {"mlp": "the MLP", "lasso": "the lasso"}
    each = "; ".join(f"{nums(r['speedup 2 actors (quartiles)'])[0]:.2f}x on {what[r['workload']]} at "
                     f"{r['clients/round']} clients x K = {r['K']}" for r in rows)
    driver = [nums(r["2 actors: driver CPU s / each actor's CPU s"])[0] * 1000 for r in rows]
    cpu = [nums(r["CPU speedup 2 actors"])[0] for r in heavy]
    before = [nums(r["speedup 2 actors (quartiles)"])[0] for r in scaling("ray_scaling_idle.md")
              if r["workload"] == "mlp" and r["clients/round"] == "20"]
    loaded = [nums(r["speedup 2 actors (quartiles)"])[0] for r in scaling("ray_scaling.md")
              if nums(r["local s"])[0] >= 0.1]
    return para(
        f"Where a round's client work is at least ~0.1 s of CPU the driver's share of a 2-actor round is "
        f"{min(driver):.0f}-{max(driver):.0f} ms of CPU and 2 actors cut the CPU time on a round's critical path by "
        f"{min(cpu):.2f}-{max(cpu):.2f}x. Wall time of the median round, 2 actors against local, with the machine's "
        f"other work yielding the cores (load {load_at_start('ray_scaling_s6.md'):g}, "
        f"`benchmarks/results/ray_scaling_s6.md`, the curve over actors x clients per round x K): {each}. Before "
        "the process kept its freed memory (`fco_ray/runtime/heap.py`), 2 actors reached "
        f"{span2(before)}x on the MLP at 20 clients (`ray_scaling_idle.md`); beside a run of this project's test "
        f"suite at normal priority the heavy rows gain {span2(loaded)}x (`ray_scaling.md`).")


@block("bench.ray_startup")
def bench_ray_startup() -> str:
    idle, lean = "ray_startup_idle.md", "ray_startup_lean.md"
    m = lambda name, mode, col: nums(bench_row(name, mode=mode)[col])[0]  # noqa: E731
    return para(
        f"Fixed cost of a run that starts its own cluster, median at a load of {load_at_start(idle):g} "
        f"(`benchmarks/results/ray_startup_idle.md`): importing Ray {m(idle, 'fco_ray', 'import'):.1f} s, `ray.init` "
        f"{m(idle, 'fco_ray', 'ray'):.1f} s, the actors' start (first round) {m(idle, 'fco_ray', 'round 1'):.1f} s: "
        f"{m(idle, 'fco_ray', 'to first result'):.1f} s from the start to the first round's result, "
        f"{m(idle, 'joined', 'to first result'):.1f} s when joining a running cluster. At a load of "
        f"{load_at_start(lean):g} (`ray_startup_lean.md`): import {m(lean, 'fco_ray', 'import'):.1f} s, `ray.init` "
        f"{m(lean, 'fco_ray', 'ray'):.1f} s with fco_ray's lean cluster against {m(lean, 'fco_ray_full', 'ray'):.1f} s "
        f"with Ray's full set of node processes, shutdown {m(lean, 'fco_ray', 'close'):.1f} s against "
        f"{m(lean, 'fco_ray_full', 'close'):.1f} s, first result {m(lean, 'fco_ray', 'to first result'):.1f} s against "
        f"{m(lean, 'fco_ray_full', 'to first result'):.1f} s.")


@block("bench.ray_reuse")
def bench_ray_reuse() -> str:
    old = "ray_startup.md"
    m = lambda mode, col: nums(bench_row(old, mode=mode)[col])[0]  # noqa: E731
    return para(
        f"A reused cluster takes {m('reused_2nd', 'to first result'):.1f} s from building the backend to the first "
        f"round's result; joining a named cluster from a new process {m('joined', 'to first result'):.1f} s to the "
        f"first result (`ray.init` {m('joined', 'ray'):.2f} s; median at a load of {load_at_start(old):g}, "
        "`benchmarks/results/ray_startup.md`).")


@block("bench.mlflow")
def bench_mlflow() -> str:
    ratio = bench_find("mlflow_sqlite.md", r"\(medians\): ([\d.]+)x")[1]
    old, new = bench_rows("mlflow_sweep_log.md")
    writes = lambda r: int(sum(nums(r["writes per run (create_run / log_batch / set_terminated / get_run)"])))  # noqa: E731
    wall = lambda r: nums(r["wall ms per run: min / median"])[1]  # noqa: E731
    cpu = lambda r: nums(r["CPU ms per run: min / median"])[1]  # noqa: E731
    load = bench_find("mlflow_sweep_log.md", r"load average during the run: (\d+\.?\d*-\d+\.?\d*)")[1]
    return para(
        f"A local SQLite store in write-ahead-log mode: each write is one sync, {ratio}x faster here by the medians "
        f"(`benchmarks/results/mlflow_sqlite.md`). A child run costs the driver {writes(new)} writes (create; params "
        f"and rows in one batch; the last batch with the end), {writes(old)} before: {wall(new):.0f} ms of wall time "
        f"per run instead of {wall(old):.0f} by the medians, {cpu(old) / cpu(new):.1f}x less CPU "
        f"(`benchmarks/mlflow_sweep_log.py`, `benchmarks/results/mlflow_sweep_log.md`, load {load}).")


# --- the quick start: results/quickstart_*.{csv,json,txt} (results/quickstart_record.py) ----

def quickstart() -> tuple[pd.DataFrame, dict]:
    return (pd.read_csv(RESULTS / "quickstart_trials.csv"),
            json.loads((RESULTS / "quickstart_run.json").read_text()))


@block("quickstart.output")
def quickstart_output() -> str:
    """How long the quick start took, and its recorded terminal output, abridged: the first
    line, the first and last configuration line, the verdict, the MLflow commands."""
    _, run = quickstart()
    cold = " from a cold start" if "numba_cache" in run else ""  # numba compiling its kernels
    took = para(f"It took {round(run['wall_seconds'])} s on {run['cpus']} cores{cold} "
                "(`results/quickstart_run.json`) and ended as below (abridged; the `[k/32]` lines come in "
                "the order the configurations end, which differs from run to run; without "
                "`source .venv/bin/activate` the printed commands start with `.venv/bin/`):")
    lines = (RESULTS / "quickstart_output.txt").read_text().splitlines()
    keep = [l for l in lines if l.startswith("sweep quickstart:")]
    runs = [l for l in lines if re.match(r"\[\d+/\d+\] ", l)]
    start = next(i for i, l in enumerate(lines) if l.startswith("verdict:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("MLflow parent run"))
    links = [l for l in lines[end:] if l.startswith(("next:", "  mlflow ui", "  open "))]
    shown = keep + runs[:1] + ["..."] + lines[start:end] + links
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


# --- docs/results.md's E1 / E2 conventions: results/conventions.json (results/conventions.py) ---

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


# --- docs/gpu.md: GPU timings from benchmarks/results/gpu_*.json (benchmarks/gpu.py) ---------

#: (label, problem, G, the issue's target per configuration-round in ms or None)
GPU_WORK = [("E5 l1, FeDualEx, K = 10, 100 clients", "bilinear_l1", 1, None),
            ("", "bilinear_l1", 35, None),
            ("", "bilinear_l1", 350, 0.08),
            ("E1, FedDualAvg, 10 of 64 clients, K = 10", "lasso", 1, 0.3),
            ("", "lasso", 35, None),
            ("", "lasso", 504, 0.003),
            ("E5 nuclear, FeDualEx, K = 10", "bilinear_nuclear", 1, None),
            ("", "bilinear_nuclear", 35, 5.0)]


def gpu_records() -> tuple[dict, list[dict]]:
    """The baseline record (gpu_h200.json: each round returned to the host) and the records of
    the compiled rounds on a GPU (gpu_compiled_*.json, copied from a device session's
    OUT/bench/gpu.json), oldest first."""
    base = json.loads((BENCH / "gpu_h200.json").read_text())
    compiled = [json.loads(p.read_text()) for p in sorted(BENCH.glob("gpu_compiled_*.json"))]
    return base, sorted(compiled, key=lambda r: r["environment"]["started_utc"])


def gpu_time(record: dict | None, device: str, problem: str, g: int) -> float | None:
    """A record's minimum ms per configuration-round (the default nuclear route), or None."""
    for r in (record or {}).get("timings", []):
        if (r.get("device") == device and r.get("problem") == problem and r.get("G") == g
                and "route" not in r and "per_config_round_min_ms" in r):
            return r["per_config_round_min_ms"]
    return None


def ms_text(ms: float | None, missing: str = "-") -> str:
    if ms is None:
        return missing
    return f"{ms * 1e3:.3g} us" if ms < 0.1 else f"{ms:,.3g} ms" if ms < 1000 else f"{ms:,.0f} ms"


@block("gpu.measured")
def gpu_measured() -> str:
    base, compiled = gpu_records()
    last = compiled[-1] if compiled else None
    env = base["environment"]
    head = ("| work | G | compiled rounds (GPU) | target (issue 43) | rounds returning to the host (GPU) "
            "| CPU engine |\n|---|---|---|---|---|---|\n")
    lines = []
    for label, problem, g, target in GPU_WORK:
        now = gpu_time(last, "cuda", problem, g)
        verdict = "-" if target is None else f"<= {ms_text(target)}" + (
            "" if now is None else (": met" if now <= target else ": not met"))
        lines.append(f"| {label} | {g} | {ms_text(now, 'not measured yet')} | {verdict} | "
                     f"{ms_text(gpu_time(base, 'cuda', problem, g))} | {ms_text(gpu_time(base, 'cpu', problem, g))} |")
    where = (f"Compiled rounds: {last['environment'].get('gpu', '?')}, {last['environment']['started_utc']} UTC, "
             f"JAX {last['environment'].get('jax')}, `python3 {' '.join(last['environment']['argv'])}`."
             if last else "Compiled rounds: not measured on a GPU yet (no benchmarks/results/gpu_compiled_*.json).")
    note = (f"{where} Rounds returning to the host, and the CPU engine beside them: "
            f"{env.get('gpu', '?')}, {env['started_utc']} UTC, JAX {env.get('jax')}, "
            f"`python3 {' '.join(env['argv'])}` (benchmarks/results/gpu_h200.json). Per configuration-round: "
            "the minimum over the timed rounds of a round's wall time / G.")
    return head + "\n".join(lines) + "\n\n" + para(note)


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
            write_file(page, new)
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


@block("benchmarks.auto_engine")
def benchmarks_auto_engine() -> str:
    """`device: auto` against `device: cpu` on lone runs, from benchmarks/results/auto_engine.json."""
    r = bench("auto_engine.json")
    loads = [x[k] for x in r["rows"] for k in ("load_before", "load_after")]
    items = [f"{x['case']} ({x['rounds']} rounds, evaluated every {x['eval_every']}): auto picked "
             f"{x['auto_picked']}, {x['auto_median_s']:.1f} s against {x['cpu_median_s']:.1f} s on `cpu` "
             f"({x['cpu_median_s'] / x['auto_median_s']:.2f}x)" for x in r["rows"]]
    head = para(f"Recorded by `{r['command']}`, 1-minute load average {min(loads):.1f}-{max(loads):.1f}: "
                "wall seconds of `fco_ray.run` of one configuration at the shipped sweep file's "
                "settings, in a fresh process, with each engine's default threads (medians):")
    return head + "\n" + "".join(para(f"- {item}.", "  ") for item in items)


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
