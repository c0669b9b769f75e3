"""What the page modules share: the record's folders, the block registry (`block`), numbers as
the pages print them, and the records more than one page reads (the E1 grid, the centralized
levels and distances, results/e1_e2_e5_tables.py's tables)."""
from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Callable

import pandas as pd
from fco_ray.display import display_name

ROOT = Path(__file__).resolve().parents[2]


RESULTS = ROOT / "results"


CL, SL = "algorithm.client_lr", "algorithm.server_lr"


NAMES = {a: display_name(a) for a in ("feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp")}


ORDER = ["feddualavg", "feddualavg_osp", "fedmid", "fedmid_osp"]


PAPER_PAIR = {"feddualavg": (0.01, 1.0)}  # the FCO paper's best rates; the others (0.001, 0.3)


BLOCKS: dict[str, Callable[[], str]] = {}


def block(name: str):
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        BLOCKS[name] = fn
        return fn
    return register


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
        t = self.rows(alg)
        keys = [t[CL], t[SL]]
        g = t.groupby(keys)
        every = lambda flags: flags.groupby(keys).all().astype(bool)  # noqa: E731
        return pd.DataFrame({
            "stable": every(t["status"] == "finished"),
            "f1": g["f1"].mean(), "density": g["density"].mean(),
            "val_mse": g["val_mse"].mean() if "val_mse" in self.trials else math.nan,
            "exact": every(t["f1"] == 1.0), "near": every(t["f1"] >= 0.99)})

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


def tables():
    """results/e1_e2_e5_tables.py: the tables it prints from a sweep's runs, here from their
    per-trial CSVs (the first-round column needs the runs' histories: not in a CSV)."""
    from results import e1_e2_e5_tables  # noqa: PLC0415  (matplotlib and the rest: only when a page asks)

    return e1_e2_e5_tables


def span(values) -> str:
    """`22-25` (whole numbers: a rank), or `25` when they agree."""
    lo, hi = int(round(min(values))), int(round(max(values)))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"
