"""The verdict claims only what the sweep showed (issue: results a researcher can cite).

A paper figure is named only when every trial ran the figure's setting (declared in
`fco_ray.experiments`); its claims are then checked on the sweep's own best configurations,
and a disagreement is said. The recorded E1 sweeps are the data: at support 512 the
figure's claims hold, at support 64 FedMiD-OSP, not FedMiD, is the densest. One ranking
(`rank_configurations`) orders the verdict, the best table and the MLflow link's run list.
"""
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pandas as pd

from fco_ray.experiments import EXPERIMENTS
from fco_ray.report.verdict import verdict_lines
from fco_ray.tracking.links import experiment_url, run_url, trials_url
from fco_ray.tracking.queries import best_per_algorithm, rank_configurations, run_ranks, trials_frame

RESULTS = Path(__file__).resolve().parents[2] / "results"
KEYS = ["algorithm.client_lr", "algorithm.server_lr"]
FIG3 = dict(EXPERIMENTS[0].settings)  # Fig. 3: support 512, 64 x 128, 2000 rounds


def frame(rows: pd.DataFrame, settings: dict, metrics: list[str]) -> pd.DataFrame:
    """A recorded CSV as `trials_frame` gives it: settings as params, one run id per row."""
    t = rows.assign(**settings, run_id=[f"r{i}" for i in range(len(rows))]).reset_index(drop=True)
    t["algorithm.name"] = t["algorithm"]
    t.attrs.update(params=sorted([*settings, *KEYS, "algorithm.name", "seed"]), metrics=metrics)
    return t


def verdict(trials: pd.DataFrame, sweep_file: str) -> list[str]:
    return verdict_lines(best_per_algorithm(trials, "f1", "max"), trials, "f1", "max", KEYS, sweep_file)


def e1_record() -> pd.DataFrame:
    return frame(pd.read_csv(RESULTS / "e1_trials.csv"), FIG3, ["f1", "density", "val_mse", "train_loss"])


def test_the_recorded_e1_sweep_agrees_with_fig3_claim_by_claim():
    lines = verdict(e1_record(), "sweeps/e1_lasso.yaml")
    paper = lines[lines.index(next(l for l in lines if "Fig. 3" in l)):]
    assert paper[0] == ("  Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021), federated LASSO, at its setting: "
                        "this sweep agrees with each of its claims")
    assert paper[1].startswith('    agrees: FedDualAvg "identifies most of the sparsity pattern" (Fig. 3; '
                               "checked as: its F1 is at least FedMiD's and FedMiD-OSP's; "
                               'FedDualAvg-OSP, "very competitive" there, is not compared): FedDualAvg f1 1, ')
    assert paper[2].startswith("    agrees: FedMiD gives the densest solution")
    assert not any("next:" in l for l in lines)


def test_the_recorded_support_64_sweep_disagrees_where_fedmid_osp_is_denser():
    variants = pd.read_csv(RESULTS / "e1_variants_trials.csv")
    rows = variants[variants["variant"] == "support 64"].drop(columns="variant")
    lines = verdict(frame(rows, {**FIG3, "problem.support": 64}, ["f1", "density"]), "sweeps/e1_variants.yaml")
    head = next(l for l in lines if "support-64 variant of the E1 federated LASSO (from the slides" in l)
    assert head.endswith("this sweep agrees with 1 and disagrees with 1 of its 2 claims")
    denser = next(l for l in lines if "densest" in l)
    assert denser.startswith("    disagrees: FedMiD gives the densest solution (the curse of primal "
                             "averaging): FedMiD density ") and "the best of the others: FedMiD-OSP" in denser
    assert not any("reproduces" in l or "agrees with each" in l for l in lines)


def test_a_fedmid_only_sweep_does_not_claim_what_feddualavg_would_show():
    record = e1_record()
    lines = verdict(record[record["algorithm"] == "fedmid"], "sweeps/mine.yaml")
    assert not any("agrees:" in l or "reproduces" in l or "agrees with each" in l for l in lines)
    assert ("  Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021), federated LASSO, at its setting: none of its 2 "
            "claims can be checked on the methods this sweep ran") in lines
    assert any(l.startswith('    not checked: FedDualAvg "identifies most of the sparsity pattern"') and
               l.endswith("(feddualavg: no finished configuration here)") for l in lines)
    assert ("    not checked: FedMiD gives the densest solution (the curse of primal averaging) "
            "(none of the methods it is compared with ran)") in lines


def test_another_setting_names_what_differs_and_checks_no_claim():
    short = e1_record().assign(rounds=100)
    lines = verdict(short, "sweeps/quickstart.yaml")
    assert lines[-2] == ("  not the setting of Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021), federated LASSO "
                         "(rounds 100 here, 2000 there): no paper claim is checked")
    assert lines[-1].startswith("  next: fco-ray sweep sweeps/e1_lasso.yaml")
    mine = e1_record().assign(**{"problem.name": "mine"})
    assert not any("Fig." in l or "next:" in l for l in verdict(mine, "sweeps/mine.yaml"))


def tied() -> pd.DataFrame:
    """F1 = 1 at four configurations of two algorithms: the area under the F1 curve decides."""
    rows = [("fedmid", 0.01, 1.0, 1.0, 0.70), ("feddualavg", 0.001, 0.3, 1.0, 0.80),
            ("feddualavg", 0.01, 3.0, 1.0, 0.95), ("feddualavg", 0.01, 1.0, 1.0, 0.90),
            ("fedmid", 0.1, 1.0, 0.2, 0.10)]
    t = pd.DataFrame([{"algorithm": a, "algorithm.name": a, "algorithm.client_lr": c, "algorithm.server_lr": s,
                       "seed": seed, "status": "finished", "f1": f, "mean.f1": m, "run_id": f"{a}-{c}-{s}-{seed}"}
                      for a, c, s, f, m in rows for seed in (1, 0)])
    t.attrs.update(params=["algorithm.client_lr", "algorithm.name", "algorithm.server_lr", "seed"], metrics=["f1"])
    return t


def test_one_ranking_orders_the_verdict_the_best_table_and_the_mlflow_list():
    t = tied()
    ranked = rank_configurations(t, "f1", "max")
    assert [(r.algorithm, r.place) for r in ranked.itertuples()][:3] == [
        ("feddualavg", 1), ("feddualavg", 2), ("feddualavg", 3)]
    assert ranked.iloc[0]["run_ids"] == ["feddualavg-0.01-3.0-0", "feddualavg-0.01-3.0-1"]  # by seed
    best = best_per_algorithm(t, "f1", "max")
    assert best["algorithm"].tolist() == ["feddualavg", "fedmid"] and best["place"].tolist() == [1, 4]
    assert (best.iloc[0]["algorithm.client_lr"], best.iloc[0]["algorithm.server_lr"]) == (0.01, 3.0)
    lines = verdict_lines(best, t, "f1", "max", KEYS)
    assert lines[0].startswith("verdict: feddualavg wins on final f1: 1.000 at client_lr=0.01, server_lr=3")
    assert "client_lr=0.01, server_lr=10; client_lr=0.01, server_lr=10" not in " ".join(verdict(e1_record(), "x"))
    # the MLflow run list: sorted by the tag fco.rank as text, the winner's two seeds first
    ranks = run_ranks(t, "f1", "max")
    order = sorted(ranks, key=ranks.get)
    assert order[:2] == ["feddualavg-0.01-3.0-0", "feddualavg-0.01-3.0-1"] and ranks[order[0]] == "0001"
    assert order[-2:] == ["fedmid-0.1-1.0-0", "fedmid-0.1-1.0-1"]
    url = unquote(trials_url("http://ui", "7", "pid", "f1", "max"))
    assert "orderByKey=tags.`fco.rank`&orderByAsc=true" in url and "workflowType=machine_learning" in url


def test_every_mlflow_link_opens_the_model_training_view():
    # MLflow 3.17 ignores the experiment tag while its GenAI / model-training switch exists
    for url in (experiment_url("http://ui", "1"), run_url("http://ui", "1", "abc"),
                trials_url("http://ui", "1", "pid", "f1", "max")):
        assert "?workflowType=machine_learning" in url or "&workflowType=machine_learning" in url
    assert experiment_url("http://ui", "1") == "http://ui/#/experiments/1/runs?workflowType=machine_learning"


def test_a_diverged_run_has_no_final_value():
    """Its progress line says f1=nan; its last logged row (round 0: F1 0) is not its end."""
    def run(i, status, f1):
        return SimpleNamespace(info=SimpleNamespace(run_id=f"r{i}", status="FINISHED"),
                               data=SimpleNamespace(tags={"fco.status": status, "fco.algorithm": "fedmid"},
                                                    params={"seed": "0"}, metrics={"f1": f1, "mean.f1": 0.0}))
    t = trials_frame([run(0, "diverged", 0.0), run(1, "finished", 0.5)])
    assert pd.isna(t.loc[0, "f1"]) and t.loc[1, "f1"] == 0.5


def test_the_recorded_e5_grid_disagrees_where_the_records_do():
    """E5 l1, K = 10, seed 0's whole grid: FeDualEx near 1e-1 and FedMiD above 1 agree;
    FedMiP as the paper writes it (server prox) and FedDualAvg (tuned) disagree."""
    k10 = next(e for e in EXPERIMENTS if e.sweep_file == "sweeps/e5_l1_k10.yaml")
    trials = frame(pd.read_csv(RESULTS / "e5_l1_k10_seed0_grid_trials.csv"), dict(k10.settings),
                   ["duality_gap", "density"])
    best = best_per_algorithm(trials, "duality_gap", "min")
    lines = verdict_lines(best, trials, "duality_gap", "min", KEYS, "sweeps/e5_l1_k10.yaml")
    assert lines[-5].endswith("at its setting: this sweep agrees with 2 and disagrees with 2 of its 4 claims")
    assert [l.split(":")[0].strip() for l in lines[-4:]] == ["agrees", "disagrees", "disagrees", "agrees"]
    assert "FedMiP duality_gap 1.61" in lines[-3] and "FedDualAvg duality_gap 0.0865" in lines[-2]
