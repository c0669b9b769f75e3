"""docs/benchmarks.md: the records the benchmark scripts write in benchmarks/results/."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pandas as pd

from results.pages.common import ROOT, block, para
from results.pages.readme import quickstart


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


@block("bench.suite_processes")
def bench_suite_processes() -> str:
    """benchmarks/results/suite_processes.json (`benchmarks/suite_processes.py`)."""
    rec = json.loads(bench_text("suite_processes.json"))
    m = rec["measured"]
    share = lambda k: 100 * k["cpu_s"] / m["busy_cpu_s"]  # noqa: E731
    kinds = "; ".join(f"{k['kind']} {k['cpu_s']:.0f} CPU-s ({share(k):.0f}%, {k['processes']} processes)"
                      for k in m["kinds"] if share(k) >= 2)
    return para(
        f"Where the whole suite's CPU time goes, by kind of process (`python benchmarks/suite_processes.py`: "
        f"{rec['date']}, commit {rec['commit']}, {rec['cpus']} x {rec['cpu']}, caches as they were, load average "
        f"{m['load_before'][0]:g} at the start). The suite took {m['wall_s']:.0f} s of wall time and kept the "
        f"machine busy for {m['busy_cpu_s']:.0f} CPU-seconds (idle {m['idle_cpu_s']:.0f}): {kinds}. It started "
        f"{m['ray_clusters']} Ray clusters. Every kind, with CPU seconds per process: "
        "`benchmarks/results/suite_processes.md`.")


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
    last = "ray_round_one_pickle.md"
    now = bench_row(last, task="e1")
    noop = "2 no-op actor calls ms"
    med = lambda row, col: nums(row[col])[1]  # noqa: E731
    return para(
        f"Ray's floor here: two no-op actor calls take {ms_pair(e1[noop])} ms (min to median) at a load of "
        f"{load_at_start('ray_round_idle.md'):g} (`benchmarks/results/ray_round_idle.md`) and "
        f"{ms_pair(busy[noop])} ms at {load_at_start('ray_round.md'):g} (`ray_round.md`). An E1 round (10 of 64 "
        f"clients, K = 10) takes {med(e1, 'ray ms'):.2f} ms on 2 actors against {med(e1, 'local ms'):.2f} ms local "
        f"(the two no-op calls alone are {nums(e1['no-op / local'])[0]:.2f}x a local round), and at 1,000 clients x "
        f"32 with 100 per round {med(big, 'ray ms'):.2f} ms against {med(big, 'local ms'):.2f} ms "
        f"({nums(big['ray / local'])[0]:.2f}x; medians). On a slower machine of the same kind, with each actor "
        f"call and its answer as one pickle (bytes to Ray, whose serializer of arrays cost more than the client "
        f"work), an E1 round took {ms_pair(now['ray ms'])} ms (min to median) against {ms_pair(now[noop])} ms "
        f"for the two no-op calls, {nums(now['ray / no-op, min'])[0]:.2f}x the floor by the minimum, at a load "
        f"of {load_at_start(last):g} (`{last}`); against the same no-op calls with their arguments as bytes "
        f"({ms_pair(now['the same as bytes ms'])} ms) it is {nums(now['ray / no-op as bytes, min'])[0]:.2f}x: "
        "beyond the calls go the actors' client work, the driver's server step and the sums' way back.")


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



def min_median(times: list[float], digits: int) -> str:
    return f"{min(times):.{digits}f} s (median {statistics.median(times):.{digits}f})"


def interleaved(r: dict, what: str, script: str) -> str:
    """How a record of `benchmarks/record.py` was measured, with where it is."""
    return (f"{r['repeats']} {what} each, interleaved, on {r['cpus']} x {r['cpu']} at a load average of "
            f"{r['load_before'][0]:g}-{r['load_after'][0]:g} ({r['date']}, commit {r['commit']}; "
            f"`benchmarks/{script}.py`, `benchmarks/results/{script}.md`)")


@block("bench.mlflow_new_store")
def bench_mlflow_new_store() -> str:
    r = bench("mlflow_new_store.json")
    copied, migrated = r["cases"].values()
    return para(
        f"A new SQLite store starts as a copy of one MLflow set up before (`fco_ray/tracking/template.py`): "
        f"opening it took {min_median(copied, 2)} in a fresh process, against {min_median(migrated, 2)} when "
        f"MLflow runs its schema migrations; {interleaved(r, 'new stores', 'mlflow_new_store')}.")


@block("bench.mlflow_ui")
def bench_mlflow_ui() -> str:
    r = bench("mlflow_ui.json")
    ours, theirs = r["cases"].values()
    return para(
        f"`fco-ray ui` starts the MLflow UI with one web worker and without MLflow's job runner; it answered "
        f"after {min_median(ours, 1)} against {min_median(theirs, 1)} for `mlflow ui` with MLflow "
        f"{r['mlflow']}'s defaults (four web workers, seven job consumers, each importing MLflow): "
        f"{statistics.median(theirs) / statistics.median(ours):.1f}x sooner by the medians, "
        f"{interleaved(r, 'starts', 'mlflow_ui')}.")


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


#: how a row's local loop ran, where the record names it (benchmarks/fused.py)
LOOPS = {"accelerator": " (accelerator)", "rule": " (rule)", "compiled": " (compiled)"}


def fused_record(name: str) -> str:
    """Fused groups vs single configurations per round, run_grid fused vs separate, and the
    sweep end to end, from one record of benchmarks/fused.py."""
    r = bench(name)
    at = f" at commit {r['commit']}" if r.get("commit") else ""
    on = f" on {r['cpu']}, {r['cpus']} CPUs" if r.get("cpu") else ""
    out = [f"Recorded {r['date'].replace('T', ' ')} by `{r['command']}`{at}{on} "
           f"(`benchmarks/results/{Path(name).with_suffix('.md')}`), "
           f"1-minute load average {one_min(r['load_start'])} at the start and {one_min(r['load_end'])} at the end."]
    rows = [x for x in r["rounds"] if x["loop"] != "Python steps"]
    if rows:
        out.append("Per round, a fused group against one configuration of the same case (interleaved): "
                   "the group round's cost in single rounds (medians) and the configurations x rounds "
                   "per second gained by fusing (G x single round / group round, by the medians and "
                   "by the minima): " + "; ".join(
                       f"{x['case']}, G = {x['G']}{LOOPS.get(x['loop'], '')}: "
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
