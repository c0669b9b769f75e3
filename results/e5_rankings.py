"""E5 (l1) under both rankings, side by side, from the per-trial CSVs in results/: each method's
best rate pair by the final gap of its server model, and by the final gap of what its
algorithm returns (Algorithm 1 of the FeDualEx paper returns the ergodic average: FeDualEx,
FedMiP and Extra-step local SGD have one, `duality_gap_ergodic`; FedDualAvg and FedMiD return
their server model, so both rankings coincide for them).

    python results/e5_rankings.py
"""
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
SCOPES = {  # label: [(csv, algorithm label override)]
    "K = 10, whole grid, seed 0": [("e5_l1_k10_seed0_grid_trials.csv", None),
                                   ("e5_l1_k10_seed0_grid_fedmip_noprox_trials.csv", "fedmip, no server prox")],
    "K = 1, whole grid, seed 0": [("e5_l1_k1_seed0_grid_trials.csv", None),
                                  ("e5_l1_k1_seed0_grid_fedmip_noprox_trials.csv", "fedmip, no server prox")],
    "K = 10, 3 x 3 block, seeds 0-2": [("e5_l1_k10_trials.csv", None),
                                       ("e5_l1_k10_fedmip_noprox_trials.csv", "fedmip, no server prox")],
    "K = 1, 3 x 3 block, seeds 0-2": [("e5_l1_k1_trials.csv", None)],
}
PAIR = ["algorithm.client_lr", "algorithm.server_lr"]


def load(files):
    frames = []
    for name, label in files:
        f = pd.read_csv(HERE / name)
        if label:
            f["algorithm"] = label
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def main():
    for scope, files in SCOPES.items():
        trials = load(files)
        mean = trials.groupby(["algorithm", *PAIR]).mean(numeric_only=True).reset_index()
        seeds = trials.seed.nunique()
        print(f"\n**{scope}** ({seeds} seed{'s' if seeds > 1 else ''}; mean over seeds)\n")
        print("| algorithm | best server model: pair | gap | density | best returned output: pair "
              "| gap | density | what is returned |")
        print("|---|---|---|---|---|---|---|---|")
        for alg, g in mean.groupby("algorithm"):
            ergodic = g.duality_gap_ergodic.notna().all()
            s = g.loc[g.duality_gap.idxmin()]
            gap, dens = ("duality_gap_ergodic", "density_ergodic") if ergodic else ("duality_gap", "density")
            r = g.loc[g[gap].idxmin()]
            print(f"| {alg} | {s[PAIR[0]]:g}, {s[PAIR[1]]:g} | {s.duality_gap:.3g} | {s.density:.3f} "
                  f"| {r[PAIR[0]]:g}, {r[PAIR[1]]:g} | {r[gap]:.3g} | {r[dens]:.3f} "
                  f"| {'ergodic average' if ergodic else 'server model (no ergodic output)'} |")


if __name__ == "__main__":
    main()
