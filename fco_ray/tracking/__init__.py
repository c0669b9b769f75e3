"""Where results go: MLflow (single runs, and one parent run per sweep with one child run per
configuration), per-run artifacts, and progress lines in the terminal.

Modules: `store` (the tracking URI, its checks, `Store`), `template` (new SQLite stores as
copies of one MLflow set up), `runs` (one run: `RunLog`, and
its artifacts: model.npz, the problem's pictures), `sweeps` (a sweep's log from the Tune
driver: `SweepLog`), `queries` (reading a sweep back), `summary` (best / mean summaries, run
names), `links` (MLflow UI pages), `progress` (terminal progress lines).

Layout (docs/configuration.md; the sweep writes it, `fco-ray runs` and reports read it):
- parent run: tags `fco.role=sweep`, `fco.sweep=<name>`, `fco.metric`, `fco.mode`; artifact
  `sweep.yaml`; at the end `fco.best.<algorithm>` (JSON config) and `best.<algorithm>.<metric>`;
- child run per trial: tags `mlflow.parentRunId`, `fco.role=trial`, `fco.sweep`,
  `fco.trial_id`, `fco.algorithm`, `fco.status` (running, finished, diverged, stopped, error),
  `fco.retries` (reruns after the trial's process failed, if any), and when the sweep ends
  `fco.rank` (its place in the sweep's ranking, `0001` first: `queries.rank_configurations`);
  params = the trial's run config flattened to dotted keys; metrics with `step = round`;
  when it ends, one summary metric of the ranked metric only: `mean.<metric>` (its mean
  over the evaluated rounds, the ranking's tie-break); a metric's final value is MLflow's
  own latest value of its series (the runs table's column, `metrics.<metric>` in a search),
  so no `final.*` or `best.*` copy is logged; run name e.g. `feddualavg 0.01/1 s0`. Few
  summaries because MLflow's chart view draws each logged key as a chart in alphabetical
  order: one-point summaries came before the per-round curves (docs/sweeps.md).
- experiments fco-ray creates carry the tag `mlflow.experimentKind=custom_model_development`;
  MLflow 3.17's UI does not read it while its GenAI / Model training switch exists, so every
  link (`links`) carries `workflowType=machine_learning`.

Everything here runs in one process (the CLI or the Tune driver): SQLite stores must not be
written by many processes at once.
"""
