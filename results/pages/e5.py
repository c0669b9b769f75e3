"""results/e5_full_scale.md: E5 (l1) on the CPU, from results/e5_l1_*_trials.csv
(results/e5_rankings.py reads the CSVs per scope; results/e1_e2_e5_tables.py writes the tables)."""
from __future__ import annotations

import pandas as pd

from results.pages.common import CL, SL, block, para, tables
from results.pages.e5_gpu import E5_NAMES


E5_COLS = ["duality_gap", "density", "duality_gap_ergodic", "density_ergodic"]


E5_SCOPES = {"k10_grid": "K = 10, whole grid, seed 0", "k1_grid": "K = 1, whole grid, seed 0",
             "k10_block": "K = 10, 3 x 3 block, seeds 0-2", "k1_block": "K = 1, 3 x 3 block, seeds 0-2"}


E5_LABEL = {**E5_NAMES, "fedmip": "FedMiP (Appendix H)", "fedmip, no server prox": "FedMiP without server prox"}


def rankings():
    from results import e5_rankings  # noqa: PLC0415

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
