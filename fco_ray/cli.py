"""The `fco-ray` command line: one function per subcommand, registered in SUBCOMMANDS.

Exit codes: 0 success, 2 invalid input (bad config, missing file, bad --set or arguments),
1 anything else. Errors are one line on stderr.

Imports are local to the commands, after the input is read and checked: a mistyped path
or YAML error is reported in a fraction of a second, key errors once the registries are
imported (numba, scipy), and Ray, MLflow and matplotlib only load for work that needs them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from . import __version__
from .runtime.errors import short_repr
from .runtime.files import (
    ConfigError,
    apply_overrides,
    check_no_links,
    check_plain_name,
    check_sweep_key,
    load_yaml,
)

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
SWEEP_ONLY_KEYS = {"algorithms", "search", "seeds", "tune", "name", "report"}
#: the page defining every metric, linked from --help: the clone's copy (an editable install)
_PAGE = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
METRICS_PAGE = str(_PAGE) if _PAGE.is_file() else "docs/metrics.md of the fco-ray repository"


def _table(df) -> str:
    return df.to_string(index=False, float_format=lambda v: f"{v:.6g}")


def _command(name: str) -> str:
    """How to call `name` (fco-ray, mlflow) from the user's shell: bare when the one on the
    PATH is this environment's, else by its path (e.g. `.venv/bin/fco-ray` unactivated)."""
    mine = Path(sys.executable).parent / name
    found = shutil.which(name)
    if found and mine.exists() and Path(found).resolve() == mine.resolve():
        return name
    if not mine.exists():
        return f"{sys.executable} -m fco_ray" if name == "fco-ray" else name
    try:
        return str(mine.relative_to(Path.cwd()))
    except ValueError:
        return str(mine)


# --- fco-ray run -------------------------------------------------------------------------

def add_run(sub) -> None:
    p = sub.add_parser("run", help="run one configuration (no Tune) and print its metrics",
                       description="Run one configuration file (the sweep schema without the "
                                   "search space); log it as one MLflow run.")
    p.add_argument("file", help="YAML run config")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable), e.g. --set algorithm.client_lr=0.01")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    raw = load_yaml(args.file)
    if SWEEP_ONLY_KEYS & set(raw):
        raise ConfigError(f"{args.file} is a sweep file (it has {sorted(SWEEP_ONLY_KEYS & set(raw))}); "
                          f"run it with: fco-ray sweep {args.file}")
    try:
        raw = apply_overrides(raw, args.set)
        from .api import run_parsed  # the registries (numba, scipy): now that the file is read
        from .core.config import parse_run

        cfg = parse_run(raw)
        df = run_parsed(cfg, progress=not args.quiet, tracking=not args.no_mlflow)
    except ConfigError as e:
        raise ConfigError(f"{args.file}: {e}") from None
    print(_table(df))
    print(f"status: {df.attrs['status']}")
    if "mlflow_run_id" in df.attrs:
        print(f"MLflow run {df.attrs['mlflow_run_id']} in {df.attrs['mlflow_uri']} "
              f"(experiment {df.attrs['config']['tracking']['experiment']!r})")
        _next_steps(df.attrs["mlflow_uri"], df.attrs["mlflow_url"])
    return EXIT_OK


def _next_steps(uri: str, page: str, commands: list[str] = (), ui: str | None = None) -> None:
    """Where to look next: the MLflow UI (when the store is not a server already: `ui`, the
    command that starts one on this store, waits until it answers and prints the link; by
    default `mlflow ui` on the store) and `page` in it, then `commands`."""
    print("next:")
    if not uri.startswith(("http://", "https://")):
        print(f"  {ui or _command('mlflow') + f' ui --backend-store-uri {uri} --host 127.0.0.1'}")
    waits = ui and not uri.startswith(("http://", "https://"))
    print(f"  open {page}" + ("   (the command above prints it again once the UI answers)" if waits else ""))
    for command in commands:
        print(f"  {command}")


# --- fco-ray sweep -----------------------------------------------------------------------

def add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a sweep file with Ray Tune, logging to MLflow",
                       description="Run a sweep on the Ray cluster at RAY_ADDRESS (a local one "
                                   "is started when unset); one MLflow child run per trial.")
    p.add_argument("file", help="YAML sweep file (see sweeps/)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a sweep-file value (repeatable), e.g. --set rounds=50")
    p.add_argument("--resume", action="store_true",
                   help="finish an interrupted sweep (same file, --set values and --storage)")
    p.add_argument("--storage", default=None, metavar="DIR",
                   help="where Tune keeps its state (default ./ray_results)")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args) -> int:
    raw = apply_overrides(load_yaml(args.file), args.set)  # file errors first, before the imports
    from .sweep.checks import load_sweep

    sweep = load_sweep(args.file, args.set)  # every config error before Ray, MLflow and pandas load
    from .sweep.run import run_sweep

    outcome = run_sweep(args.file, args.set, resume=args.resume, storage=args.storage, sweep=sweep)
    name = raw.get("name", "?")
    metric, mode = (raw.get("tune") or {}).get("metric", "train_loss"), (raw.get("tune") or {}).get("mode", "min")
    search = raw.get("search") or {}
    searched = [*(search.get("grid") or {}), *(search.get("random") or {})]
    if not outcome.best.empty:
        print(f"best per algorithm (ranked by the final {metric}, {mode}, mean over seeds):")
        print(_table(_best_table(outcome.best, metric, searched)))
    from .report.verdict import verdict_lines
    from .tracking.queries import children, trials_frame
    from .tracking.store import Store

    store = Store(outcome.tracking_uri)
    trials = trials_frame(children(store, store.client.get_run(outcome.parent_run_id)))
    for line in verdict_lines(outcome.best, trials, metric, mode, searched, args.file):
        print(line)
    print(f"MLflow parent run {outcome.parent_run_id} in {outcome.tracking_uri}")
    fco = _command("fco-ray")
    from .tracking.links import trials_url, ui_base
    from .tracking.store import default_uri

    store = "" if outcome.tracking_uri == default_uri() else f" --tracking-uri {outcome.tracking_uri}"
    experiment = (raw.get("tracking") or {}).get("experiment") or name
    _next_steps(outcome.tracking_uri,
                trials_url(ui_base(outcome.tracking_uri), outcome.experiment_id, outcome.parent_run_id,
                           metric, mode),
                [f"{fco} runs {name} --best{store}", f"{fco} report {name}{store}"],
                ui=f"{fco} ui {name}{store}" + ("" if experiment == name else f" --experiment {experiment}"))
    if not outcome.ok:
        print(f"fco-ray: error: {outcome.errors} trial(s) failed (details in {outcome.path}); "
              "rerun them with --resume", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


# --- fco-ray runs ------------------------------------------------------------------------

def add_runs(sub) -> None:
    p = sub.add_parser("runs", help="list a sweep's trials from MLflow",
                       description="Summarize the latest run of a sweep from MLflow: one row "
                                   "per trial, or the best configuration per algorithm.")
    p.add_argument("sweep", help="sweep name, or the sweep file")
    p.add_argument("--best", action="store_true", help="only the best configuration per algorithm")
    p.add_argument("--experiment", default=None, help="MLflow experiment (default: the sweep's)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the sweep file's, MLFLOW_TRACKING_URI, "
                        "or sqlite:///./mlflow.db)")
    p.set_defaults(func=cmd_runs)


def cmd_runs(args) -> int:
    name, experiment, uri = args.sweep, args.experiment, args.tracking_uri
    if _is_sweep_file(args.sweep):
        from .sweep import read_sweep_file

        spec = read_sweep_file(args.sweep)
        name, experiment = spec.name, experiment or spec.tracking.experiment
        uri = uri or spec.tracking.uri
    check_sweep_key(name, "runs")
    experiment = experiment or name
    try:
        check_plain_name(experiment, "--experiment: experiment name")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    uri = _existing_store(uri)
    from .tracking.queries import (
        best_per_algorithm,
        children,
        find_parent,
        trials_frame,
    )
    from .tracking.store import Store

    store = Store(uri)
    exp_id = store.experiment_id(experiment, create=False)
    parent = find_parent(store, exp_id, name) if exp_id is not None else None
    if parent is None:
        raise ConfigError(f"no sweep {name!r} in MLflow experiment {short_repr(experiment)} at {store.uri}")
    trials = trials_frame(children(store, parent))
    metric, mode = parent.data.tags["fco.metric"], parent.data.tags["fco.mode"]
    print(f"sweep {name}: parent run {parent.info.run_id} ({parent.info.status}), "
          f"{len(trials)} trials, metric {metric} ({mode})")
    if trials.empty:
        return EXIT_OK
    if args.best:
        best = best_per_algorithm(trials, metric, mode)
        print(_table(_best_table(best, metric, _searched(trials))) if not best.empty
              else "no trial finished")
        return EXIT_OK
    columns = ["algorithm", *_searched(trials), "seed", "status", "final_round",
               *dict.fromkeys(m for m in (metric, "train_loss") if m in trials)]
    from .tracking.queries import run_ranks  # the one ranking: the verdict's, the report's, MLflow's

    place = run_ranks(trials, metric, mode) if metric in trials else {}
    table = (trials.assign(_place=trials["run_id"].map(place).fillna("~"))
             .sort_values(["_place", "algorithm"], kind="stable")[columns])
    print(_table(table.rename(columns=_short)))
    return EXIT_OK


def _is_sweep_file(arg: str) -> bool:
    """Whether a `runs` / `report` argument names a sweep file rather than a sweep."""
    try:
        return Path(arg).suffix in (".yaml", ".yml") or Path(arg).is_file()
    except (OSError, ValueError):  # e.g. a name longer than a file name may be
        return False


def _existing_store(uri: str | None) -> str:
    """The tracking URI to read (`uri`, else MLFLOW_TRACKING_URI, else ./mlflow.db), if it
    names an MLflow store that exists: reading (runs, report) must never create an empty
    store, nor a directory for a URI that is no store at all. Without importing MLflow."""
    from .runtime.files import check_tracking_uri

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    try:
        check_tracking_uri(uri)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    db = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    if db is not None and not (Path(db).exists() or Path(db).is_symlink()):
        raise ConfigError(f"no MLflow database at {db} (give --tracking-uri, or run in the "
                          "directory the sweep ran in)")
    if db is not None:
        from .runtime.files import check_sqlite_store

        check_sqlite_store(db, write=False)
    return uri


def _searched(trials) -> list[str]:
    """The rate columns plus any other param that varies across trials (besides the seed)."""
    rates = [c for c in ("algorithm.client_lr", "algorithm.server_lr") if c in trials]
    varying = [c for c in trials.attrs["params"]
               if c not in ("seed", "algorithm.name", *rates)
               and trials[c].map(str).nunique() > 1]
    return rates + varying


def _short(column: str) -> str:
    return column.split(".")[-1] if column.startswith("algorithm.") else column


def _best_table(best, metric: str, searched=()):
    """Algorithm, rates, the other `searched` keys (e.g. problem.lam), seeds, then the mean
    final metrics, the ranked one first (it is the score the configuration was chosen by: not
    repeated as a column of its own)."""
    rates = [c for c in ("algorithm.client_lr", "algorithm.server_lr") if c in best]
    other = [c for c in searched if c in best and c not in (*rates, "seed", "algorithm.name")]
    metrics = [m for m in dict.fromkeys([metric, *best.attrs["metrics"]]) if m in best and best[m].notna().any()]
    return best[["algorithm", *rates, *other, "seeds", *metrics]].rename(columns=_short)


# --- fco-ray report ----------------------------------------------------------------------

def add_report(sub) -> None:
    p = sub.add_parser("report", help="render a sweep's figures and HTML report from MLflow",
                       description="Render a sweep's report (curves of the best configurations, "
                                   "learning-rate heatmaps, best table) from its MLflow runs; "
                                   "save it locally and attach it to the sweep's parent run.")
    p.add_argument("sweep", help="sweep name, parent run id, or the sweep file")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default ./reports/<sweep>)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the sweep file's, MLFLOW_TRACKING_URI, "
                        "or sqlite:///./mlflow.db)")
    p.add_argument("--dashboard", default=None, metavar="NAME|FILE",
                   help="report definition in dashboards/ (default: the sweep file's `report`)")
    p.add_argument("--mlflow-ui", default=None, metavar="URL",
                   help="the MLflow UI the report links runs to (default: $FCO_RAY_MLFLOW_UI, the "
                        "tracking server, or http://127.0.0.1:5000 where `mlflow ui` serves)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    sweep, uri = args.sweep, args.tracking_uri
    if _is_sweep_file(sweep):
        from .sweep import read_sweep_file

        spec = read_sweep_file(sweep)
        sweep, uri = spec.name, uri or spec.tracking.uri
    check_sweep_key(sweep, "report")  # a name or a parent run id (32 hex digits) alike
    uri = _existing_store(uri)
    # a linked folder is refused before the sweep is read (render_report checks again)
    check_no_links(args.out if args.out is not None else Path.cwd() / "reports",
                   "--out" if args.out is not None else "report folder")
    from .report import render_report  # matplotlib: once the input is checked

    index = render_report(sweep, tracking_uri=uri, out_dir=args.out,
                          dashboard=args.dashboard, ui_url=args.mlflow_ui)
    import json

    manifest = json.loads((index.parent / "report.json").read_text())
    if not manifest.get("finished", True):  # the first warning says how (report.unfinished_note)
        print(f"note: {manifest['warnings'][0]}")
    print(f"report: {index} (also attached to the sweep's parent run under report/)")
    return EXIT_OK


# --- fco-ray ui --------------------------------------------------------------------------

def add_ui(sub) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI on a store, wait until it answers, print the link",
                       description="Start `mlflow ui` on the tracking store (on 127.0.0.1), wait until "
                                   "it answers (half a minute or more on a busy machine), then print "
                                   "the link: the sweep's trials in the ranking's order when a sweep "
                                   "is named, else the UI. Runs until Ctrl-C.")
    p.add_argument("sweep", nargs="?", default=None, help="sweep name or sweep file (optional)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the sweep file's, MLFLOW_TRACKING_URI, "
                        "or sqlite:///./mlflow.db)")
    p.add_argument("--experiment", default=None, help="MLflow experiment (default: the sweep's)")
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    p.add_argument("--wait", type=float, default=300.0, metavar="SECONDS",
                   help="give up when the UI has not answered after this long (default 300)")
    p.set_defaults(func=cmd_ui)


def wait_until_answers(url: str, alive, timeout: float, every: float = 1.0, clock=None, sleep=None) -> float | None:
    """Seconds until `url` answered an HTTP request, or None when `alive()` turned false (the
    server exited) or `timeout` seconds passed first."""
    import time
    import urllib.error
    import urllib.request

    clock, sleep = clock or time.monotonic, sleep or time.sleep
    start = clock()
    while clock() - start < timeout:
        if not alive():
            return None
        try:
            with urllib.request.urlopen(url, timeout=5):
                return clock() - start
        except urllib.error.HTTPError:
            return clock() - start  # it answered (an error page is an answer)
        except (OSError, ValueError):
            sleep(every)
    return None


def cmd_ui(args) -> int:
    import subprocess

    sweep, uri, experiment = args.sweep, args.tracking_uri, args.experiment
    if sweep is not None and _is_sweep_file(sweep):
        from .sweep import read_sweep_file

        spec = read_sweep_file(sweep)
        sweep, uri = spec.name, uri or spec.tracking.uri
        experiment = experiment or spec.tracking.experiment
    if sweep is not None:
        check_sweep_key(sweep, "ui")
        experiment = experiment or sweep
        try:
            check_plain_name(experiment, "--experiment: experiment name")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port: expected a port number 1-65535, got {args.port}")
    uri = _existing_store(uri)
    base = f"http://127.0.0.1:{args.port}"
    link = base
    if sweep is not None:
        from .tracking.links import trials_url
        from .tracking.queries import find_parent
        from .tracking.store import Store

        store = Store(uri)
        exp_id = store.experiment_id(experiment, create=False)
        parent = find_parent(store, exp_id, sweep) if exp_id is not None else None
        if parent is None:
            raise ConfigError(f"no sweep {sweep!r} in MLflow experiment {short_repr(experiment)} at {store.uri}")
        link = trials_url(base, exp_id, parent.info.run_id, parent.data.tags.get("fco.metric"),
                          parent.data.tags.get("fco.mode", "min"))
    command, env = ui_server(uri, args.port)
    print(f"starting the MLflow UI on {uri} at {base} (seconds; longer on a busy machine) ...",
          flush=True)
    server = subprocess.Popen(command, env=env)
    try:
        took = wait_until_answers(base, lambda: server.poll() is None, args.wait)
        if took is None:
            why = (f"it exited with code {server.returncode} (is port {args.port} taken? try --port)"
                   if server.poll() is not None else f"it did not answer within {args.wait:g} s")
            print(f"fco-ray: error: the MLflow UI did not start: {why}", file=sys.stderr)
            return EXIT_FAILED
        print(f"the MLflow UI answers (after {took:.0f} s); open:\n  {link}\n(Ctrl-C stops it)", flush=True)
        server.wait()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def ui_server(uri: str, port: int) -> tuple[list[str], dict]:
    """The command and environment of the MLflow UI that `fco-ray ui` starts: one web worker
    (one user) and no job runner (MLflow's GenAI evaluation jobs: fco-ray logs none). With
    MLflow 3.17's defaults, four web workers and seven job consumers each import MLflow, and
    the UI answers two to three times later on 2 cores (benchmarks/mlflow_ui.py). A user who
    set MLFLOW_SERVER_ENABLE_JOB_EXECUTION keeps their setting."""
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    return command, {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}


# --- entry point -------------------------------------------------------------------------

#: one `add_<command>(subparsers)` per subcommand; `fco-ray report` registers here too
SUBCOMMANDS = [add_run, add_sweep, add_runs, add_report, add_ui]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fco-ray", description="Federated composite optimization on Ray: run, sweep, inspect.",
        epilog=f"What each printed and logged metric means (f1, density, val_mse, floats_up, "
               f"floats_down, ...) and which problems have it: {METRICS_PAGE}")
    parser.add_argument("--version", action="version", version=f"fco-ray {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage error
        return EXIT_INVALID if e.code else EXIT_OK
    try:
        os.getcwd()
    except FileNotFoundError:  # every default path (mlflow.db, ray_results, reports) is under it
        print("fco-ray: error: the working directory no longer exists (it was deleted or moved); "
              "cd to an existing directory and run the command again", file=sys.stderr)
        return EXIT_INVALID
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError) as e:
        print(f"fco-ray: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("fco-ray: interrupted", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - the CLI's contract: one line, exit code 1
        print(f"fco-ray: error: {type(e).__name__}: {ConfigError(str(e))}", file=sys.stderr)  # bounded
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
