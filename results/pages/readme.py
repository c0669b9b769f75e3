"""README.md: the quick start, from results/quickstart_*.{csv,json,txt} (results/quickstart_record.py)."""
from __future__ import annotations

import json
import re

import pandas as pd

from results.pages.common import RESULTS, block, f3, para


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
    links = [l for l in lines[end:] if l.startswith(("next:", "  fco-ray ui", "  open "))]
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


@block("readme.quickstart")
def readme_quickstart() -> str:
    best = quickstart_best()
    da, mid = best["feddualavg"], best["fedmid"]
    kept = round(mid["density"] * 1024)
    return para(f"The score is the support F1 of the final model (the F1 of its nonzero coordinates against the "
                f"true ones): FedDualAvg scores {f3(da['f1'])} with density {f3(da['density'])}, exactly the 512 true "
                f"features and no other, while FedMiD's best keeps {kept} features ({kept - 512} false ones) and "
                f"scores {f3(mid['f1'])}.")
