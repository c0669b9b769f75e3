"""The report's figures (matplotlib, Agg canvas, no pyplot state) and the data they plot.

Every figure function returns `(Figure, data)`, where `data` is a JSON-ready dict holding
exactly the numbers drawn, saved next to the PNG so the report can be checked against the
tracking store.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .dashboard import Curve, Heatmap
from ..runtime.files import replacing

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
STATUS_LABEL = {"diverged": "div.", "error": "err.", "stopped": "stop.", "running": "run.",
                "unknown": "?"}


def colors(algorithms: list[str]) -> dict[str, str]:
    """The same colour for an algorithm in every figure of a report."""
    return {alg: PALETTE[i % len(PALETTE)] for i, alg in enumerate(sorted(algorithms))}


def _figure(width: float, height: float) -> Figure:
    # fixed margins, not constrained layout: that re-measures every text and triples the cost
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _inches(fig: Figure, left: float, bottom: float, width: float, height: float):
    """An axes placed in inches from the figure's lower-left corner."""
    w, h = fig.get_size_inches()
    return fig.add_axes((left / w, bottom / h, width / w, height / h))


def _nums(values) -> list:
    """Floats for JSON, NaN as None."""
    return [None if v is None or not math.isfinite(v) else float(v) for v in np.asarray(values, float)]


def seed_stats(series: dict[str, pd.Series]) -> pd.DataFrame:
    """Per round: mean, std (sample std over seeds; 0 with one seed) and n of the seeds that
    logged that round."""
    frame = pd.concat(series, axis=1).sort_index()
    n = frame.count(axis=1)
    std = frame.std(axis=1, ddof=1).where(n > 1, 0.0)
    return pd.DataFrame({"mean": frame.mean(axis=1), "std": std, "n": n})


def _log_scale(curve: Curve, values: np.ndarray) -> bool:
    if curve.log_y is not None:
        return curve.log_y
    finite = values[np.isfinite(values)]
    return bool(finite.size and finite.min() > 0 and finite.max() / finite.min() > 100)


def curve_figure(curve: Curve, best: dict[str, dict[str, pd.Series]], seeds: dict[str, int],
                 palette: dict[str, str]) -> tuple[Figure, dict]:
    """`curve.metric` vs round: per algorithm the mean over its best configuration's seeds with a
    +-1 std band. `best[alg][run_id]` is a run's series, `seeds[run_id]` its seed."""
    fig = _figure(6.4, 3.8)
    ax = _inches(fig, 0.85, 0.55, 5.4, 3.1)
    data = {"metric": curve.metric, "algorithms": {}}
    drawn = []
    for alg, series in sorted(best.items()):
        stats = seed_stats(series)
        rounds = stats.index.to_numpy()
        mean, std = stats["mean"].to_numpy(), stats["std"].to_numpy()
        ax.plot(rounds, mean, color=palette[alg], lw=1.8, label=f"{alg} (n={len(series)})")
        ax.fill_between(rounds, mean - std, mean + std, color=palette[alg], alpha=0.2, lw=0)
        drawn.append(mean)
        data["algorithms"][alg] = {
            "rounds": [int(r) for r in rounds], "mean": _nums(mean), "std": _nums(std),
            "n": [int(v) for v in stats["n"]],
            "runs": {run: {"seed": seeds.get(run), "rounds": [int(r) for r in s.index],
                           "values": _nums(s.to_numpy())} for run, s in series.items()}}
    log_y = _log_scale(curve, np.concatenate(drawn)) if drawn else False
    if log_y:
        ax.set_yscale("log")
    if curve.log_x:
        ax.set_xscale("symlog", linthresh=1)  # round 0 is on the axis
    if curve.ylim is not None:
        ax.set_ylim(*curve.ylim)
    ax.set_xlabel("communication round")
    ax.set_ylabel(curve.label or curve.metric)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    data.update(log_y=log_y, log_x=curve.log_x)
    return fig, data


LINESTYLES = [("-", None), ("--", None), (":", None), ("-.", None), ("-", "o"), ("--", "s"),
              (":", "^"), ("-.", "v")]
BEST_COLOR = "#000000"


def _values_of(configs: list[dict], position: int) -> list:
    keys = list(configs[0]["params"]) if configs else []
    if position >= len(keys):
        return []
    return _sorted_values(pd.Series([c["params"][keys[position]] for c in configs]))


def grid_figure(curve: Curve, panels: dict[str, list[dict]], seeds: dict[str, int]) -> tuple[Figure, dict]:
    """`curve.metric` vs round for every configuration of the grid: one panel per algorithm,
    one line per configuration (mean over its seeds), its best configuration drawn thick in
    black. Colour encodes the first searched parameter (e.g. client_lr), line style the second
    (e.g. server_lr). `panels[alg]` is a list of configurations: `params`, `status`, `best`
    and `series` (run id -> that run's series). The y range and the log decision come from
    the finished configurations (a diverging one can reach 1e30 before it stops)."""
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    cols = min(max(len(panels), 1), 2)
    rows = max(1, math.ceil(len(panels) / cols))
    # each panel has its legend to its right: column = left margin + axes + legend
    pw, ph, left, bottom, top, legend = 3.9, 2.9, 0.85, 0.55, 0.35, 1.75
    column = left + pw + legend
    width, height = cols * column, rows * (ph + bottom + top)
    fig = _figure(width, height)
    data = {"metric": curve.metric, "algorithms": {}}
    finished_values = []
    stats = {}
    for alg, configs in panels.items():
        for k, config in enumerate(configs):
            s = seed_stats(config["series"])
            stats[(alg, k)] = s
            if config["status"] == "finished":
                finished_values.append(s["mean"].to_numpy())
    finished = np.concatenate(finished_values) if finished_values else np.array([])
    finished = finished[np.isfinite(finished)]
    log_y = _log_scale(curve, finished) if finished.size else False
    if log_y:
        finished = finished[finished > 0]
    for k, (alg, configs) in enumerate(sorted(panels.items())):
        ax = _inches(fig, (k % cols) * column + left, height - (k // cols + 1) * (ph + bottom + top) + bottom,
                     pw, ph)
        keys = list(configs[0]["params"]) if configs else []
        colour_values, style_values = _values_of(configs, 0), _values_of(configs, 1)
        cmap = colormaps["viridis"]
        shade = {v: cmap(0.9 * i / max(len(colour_values) - 1, 1)) for i, v in enumerate(colour_values)}
        style = {v: LINESTYLES[i % len(LINESTYLES)] for i, v in enumerate(style_values)}
        entries = []
        for j, config in enumerate(configs):
            s = stats[(alg, j)]
            rounds, mean = s.index.to_numpy(), s["mean"].to_numpy()
            values = list(config["params"].values())
            if config["best"]:
                ax.plot(rounds, mean, color=BEST_COLOR, lw=2.6, zorder=5)
            else:
                ls, marker = style.get(values[1], ("-", None)) if len(values) > 1 else ("-", None)
                colour = shade.get(values[0], "#777777") if values else "#777777"
                ax.plot(rounds, mean, color=colour, ls=ls, marker=marker, markersize=3, lw=1.1, alpha=0.85)
                if config["status"] != "finished" and len(rounds):  # where it stopped
                    ax.plot(rounds[-1:], mean[-1:], color=colour, marker="x", markersize=6, ls="none")
            entries.append({"params": {p: _json_value(v) for p, v in config["params"].items()},
                            "status": config["status"], "best": bool(config["best"]),
                            "rounds": [int(r) for r in rounds], "mean": _nums(mean),
                            "runs": {run: {"seed": seeds.get(run), "rounds": [int(r) for r in ser.index],
                                           "values": _nums(ser.to_numpy())}
                                     for run, ser in config["series"].items()}})
        data["algorithms"][alg] = {"keys": keys, "configurations": entries}
        if log_y:
            ax.set_yscale("log")
        if curve.log_x:
            ax.set_xscale("symlog", linthresh=1)
        if curve.ylim is not None:
            ax.set_ylim(*curve.ylim)
        elif finished.size:
            low, high = float(finished.min()), float(finished.max())
            if log_y:
                ax.set_ylim(low / 1.5, high * 1.5)
            else:
                pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
                ax.set_ylim(low - pad, high + pad)
        ax.set_title(alg, fontsize=9)
        ax.set_xlabel("communication round")
        ax.set_ylabel(curve.label or curve.metric)
        ax.grid(True, which="major", alpha=0.3)
        # the legend: the best configuration, colours (first key), styles (second key)
        best_params = next((c["params"] for c in configs if c["best"]), None)
        handles = [] if best_params is None else [Line2D([], [], color=BEST_COLOR, lw=2.6, label="best:\n"
                                                         + "\n".join(f"{p.split('.')[-1]}={_tick(v)}"
                                                                     for p, v in best_params.items()))]
        if keys:
            handles += [Line2D([], [], color=shade[v], lw=1.5, label=f"{keys[0].split('.')[-1]}={_tick(v)}")
                        for v in colour_values]
        if len(keys) > 1:
            handles += [Line2D([], [], color="#555555", ls=style[v][0], marker=style[v][1], markersize=3,
                               lw=1.1, label=f"{keys[1].split('.')[-1]}={_tick(v)}") for v in style_values]
        if any(c["status"] != "finished" for c in configs):
            handles.append(Line2D([], [], color="#555555", marker="x", ls="none", label="not finished"))
        ax.legend(handles=handles, fontsize=6.5, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    data.update(log_y=bool(log_y), log_x=curve.log_x)
    return fig, data


def _json_value(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v)
    return v


def _tick(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _sorted_values(values: pd.Series) -> list:
    unique = list(dict.fromkeys(values.tolist()))
    try:
        return sorted(unique)
    except TypeError:  # mixed types: keep the sweep's order
        return unique


def heatmap_figure(spec: Heatmap, metric: str, cells: dict[str, pd.DataFrame]) -> tuple[Figure, dict]:
    """Final `metric` over the `spec.x` x `spec.y` grid, one panel per algorithm on one colour
    scale. `cells[alg]` is `data.grid_cells` output; cells without a finished configuration are
    hatched and labelled with the reason (e.g. "div." for diverged)."""
    xs = _sorted_values(pd.concat([c[spec.x] for c in cells.values()]))
    ys = _sorted_values(pd.concat([c[spec.y] for c in cells.values()]))
    grids = {}
    for alg, c in sorted(cells.items()):
        value = np.full((len(ys), len(xs)), np.nan)
        status = np.full((len(ys), len(xs)), None, dtype=object)
        seeds = np.zeros((len(ys), len(xs)), dtype=int)
        for yv, xv, v, st, n in c[[spec.y, spec.x, "value", "status", "seeds"]].itertuples(
                index=False, name=None):
            i, j = ys.index(yv), xs.index(xv)
            value[i, j], status[i, j], seeds[i, j] = v, st, n
        grids[alg] = (value, status, seeds)
    finite = np.concatenate([v[np.isfinite(v)] for v, _, _ in grids.values()])
    log_color = spec.log_color and finite.size > 0 and finite.min() > 0
    if finite.size == 0:
        norm = Normalize(0, 1)
    elif log_color:
        norm = LogNorm(finite.min(), finite.max())
    else:
        low, high = float(finite.min()), float(finite.max())
        norm = Normalize(low, high if high > low else low + 1e-12)

    # panels in a grid of up to 3 columns, sized by the number of grid values; colour bar right
    cols = min(len(grids), 3)
    rows = math.ceil(len(grids) / cols)
    pw, ph = max(1.6, 0.55 * len(xs) + 0.2), max(1.2, 0.4 * len(ys) + 0.2)
    left, bottom, top, gap = 0.8, 0.85, 0.35, 0.9
    width = left + cols * pw + (cols - 1) * gap + 1.3
    height = rows * (ph + bottom + top)
    fig = _figure(width, height)
    axes = [_inches(fig, left + (k % cols) * (pw + gap), height - (k // cols + 1) * (ph + bottom + top) + bottom,
                    pw, ph) for k in range(len(grids))]
    cmap = "viridis"
    shown = None
    for ax, (alg, (value, status, _)) in zip(axes, grids.items()):
        shown = ax.imshow(np.ma.masked_invalid(value), cmap=cmap, norm=norm, origin="lower",
                          aspect="auto", interpolation="nearest")
        ax.set_facecolor("#f2f2f2")
        for (i, j), v in np.ndenumerate(value):
            if status[i, j] is None:
                continue
            if np.isfinite(v):
                dark = norm(v) < 0.5
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            else:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                       edgecolor="#888888", lw=0))
                ax.text(j, i, STATUS_LABEL.get(status[i, j], status[i, j]), ha="center",
                        va="center", fontsize=7, color="#444444")
        ax.set_xticks(range(len(xs)), [_tick(v) for v in xs], fontsize=7, rotation=45)
        ax.set_yticks(range(len(ys)), [_tick(v) for v in ys], fontsize=7)
        ax.set_xlabel(spec.x.split(".")[-1])
        ax.set_ylabel(spec.y.split(".")[-1])
        ax.set_title(alg, fontsize=9)
    if shown is not None:
        cax = _inches(fig, left + cols * pw + (cols - 1) * gap + 0.2, bottom, 0.18,
                      height - bottom - top)
        fig.colorbar(shown, cax=cax, label=f"final {metric}")
    data = {"metric": metric, "x": spec.x, "y": spec.y, "x_values": list(xs), "y_values": list(ys),
            "log_color": bool(log_color), "algorithms": {
                alg: {"value": [_nums(r) for r in value], "status": status.tolist(),
                      "seeds": seeds.tolist()} for alg, (value, status, seeds) in grids.items()}}
    return fig, data


def save(fig: Figure, path) -> None:
    # no "Software" stamp: the PNG is embedded in a page that must not name external URLs
    with replacing(path) as temp:
        fig.savefig(temp, format="png", metadata={"Software": None})
