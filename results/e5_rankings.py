"""E5 (l1) under both rankings, side by side, from the per-trial CSVs in results/: each method's
best rate pair by the final gap of its server model, and by the final gap of what its
algorithm returns (Algorithm 1 of the FeDualEx paper returns the ergodic average: FeDualEx,
FedMiP and Extra-step local SGD have one, `duality_gap_ergodic`; FedDualAvg and FedMiD return
their server model, so both rankings coincide for them).

    python results/e5_rankings.py

`results/generate.py` writes the same tables into `results/e5_full_scale.md`.
"""
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
NOPROX = "fedmip, no server prox"
SCOPES = {  # label: [(csv, algorithm label override)]
    "K = 10, whole grid, seed 0": [("e5_l1_k10_seed0_grid_trials.csv", None),
                                   ("e5_l1_k10_seed0_grid_fedmip_noprox_trials.csv", NOPROX)],
    "K = 1, whole grid, seed 0": [("e5_l1_k1_seed0_grid_trials.csv", None),
                                  ("e5_l1_k1_seed0_grid_fedmip_noprox_trials.csv", NOPROX)],
    "K = 10, 3 x 3 block, seeds 0-2": [("e5_l1_k10_trials.csv", None),
                                       ("e5_l1_k10_fedmip_noprox_trials.csv", NOPROX)],
    "K = 1, 3 x 3 block, seeds 0-2": [("e5_l1_k1_trials.csv", None)],
}
PAIR = ["algorithm.client_lr", "algorithm.server_lr"]


def load(files) -> pd.DataFrame:
    """The per-trial rows of a scope's CSVs, a CSV's algorithm relabelled where given."""
    frames = []
    for name, label in files:
        f = pd.read_csv(HERE / name)
        if label:
            f["algorithm"] = label
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def best(trials: pd.DataFrame) -> pd.DataFrame:
    """Per algorithm: its best pair by the server model's mean final gap (`pair`, `gap`,
    `density`) and by the returned output's (`out_pair`, `out_gap`, `out_density`,
    `ergodic`: whether the returned output is the ergodic average)."""
    mean = trials.groupby(["algorithm", *PAIR]).mean(numeric_only=True).reset_index()
    rows = []
    for alg, g in mean.groupby("algorithm"):
        ergodic = bool(g.duality_gap_ergodic.notna().all())
        s = g.loc[g.duality_gap.idxmin()]
        gap, dens = ("duality_gap_ergodic", "density_ergodic") if ergodic else ("duality_gap", "density")
        r = g.loc[g[gap].idxmin()]
        rows.append({"algorithm": alg, "pair": (s[PAIR[0]], s[PAIR[1]]), "gap": s.duality_gap,
                     "density": s.density, "out_pair": (r[PAIR[0]], r[PAIR[1]]), "out_gap": r[gap],
                     "out_density": r[dens], "ergodic": ergodic})
    return pd.DataFrame(rows).set_index("algorithm")


def table(scope: str) -> str:
    """One scope's markdown: its heading line and the table of both rankings."""
    trials = load(SCOPES[scope])
    seeds = trials.seed.nunique()
    lines = [f"**{scope}** ({seeds} seed{'s' if seeds > 1 else ''}; mean over seeds)", "",
             "| algorithm | best server model: pair | gap | density | best returned output: pair "
             "| gap | density | what is returned |", "|---|---|---|---|---|---|---|---|"]
    for alg, b in best(trials).iterrows():
        lines.append(f"| {alg} | {b.pair[0]:g}, {b.pair[1]:g} | {b.gap:.3g} | {b.density:.3f} "
                     f"| {b.out_pair[0]:g}, {b.out_pair[1]:g} | {b.out_gap:.3g} | {b.out_density:.3f} "
                     f"| {'ergodic average' if b.ergodic else 'server model (no ergodic output)'} |")
    return "\n".join(lines) + "\n"


def main():
    for scope in SCOPES:
        print("\n" + table(scope))


if __name__ == "__main__":
    main()
