"""A run's summaries (best / mean of the ranked metric) and its readable name."""
from __future__ import annotations

from typing import Iterable

from .store import _finite, flatten

SUMMARY_PREFIXES = ("final.", "best.", "mean.")


RATES = ("algorithm.client_lr", "algorithm.server_lr")


# metric directions by name (substring): what "best" means for a metric that is not the
# sweep's ranked one; metrics matching neither (density, rank, floats_up) get no best.*
HIGHER_IS_BETTER = ("f1", "precision", "recall", "accuracy")


LOWER_IS_BETTER = ("loss", "mse", "gap", "error", "suboptimality")


def direction(metric: str, ranked: str | None = None, mode: str | None = None) -> str | None:
    """"max", "min" or None (no natural best) for `metric`; the ranked metric has `mode`."""
    if metric == ranked and mode in ("min", "max"):
        return mode
    if any(word in metric for word in HIGHER_IS_BETTER):
        return "max"
    if any(word in metric for word in LOWER_IS_BETTER):
        return "min"
    return None


class Summary:
    """The summaries of one run, from its rows: `final` (each metric's last finite value),
    `best` (min or max over the rounds, by `direction`) and, for the ranked metric, its mean
    over the evaluated rounds, the area under its curve, which breaks ties of the final value
    in favour of the configuration that got there sooner (`rank_configurations`). Only the
    ranked metric's `mean.<m>` is logged (`metrics`)."""

    def __init__(self, ranked: str | None = None, mode: str | None = None):
        self.ranked, self.mode = ranked, mode
        self.final: dict[str, float] = {}
        self.best: dict[str, float] = {}
        self.total: dict[str, list[float]] = {}  # the ranked metric: [sum, count]

    def add(self, row: dict) -> None:
        for k, v in row.items():
            if k == "round" or not _finite(v):
                continue
            v = float(v)
            self.final[k] = v
            if k == self.ranked:
                total = self.total.setdefault(k, [0.0, 0])
                total[0], total[1] = total[0] + v, total[1] + 1
            way = direction(k, self.ranked, self.mode)
            if way is not None and (k not in self.best or (v > self.best[k] if way == "max" else v < self.best[k])):
                self.best[k] = v

    def metrics(self) -> dict[str, float]:
        """What is logged: `mean.<ranked>`, the ranking's tie-break (none without a ranked
        metric). Not `best.<ranked>`: MLflow's chart view draws every logged key as a chart in
        alphabetical order, and a one-point `best.f1` came first, before the curves."""
        return {f"mean.{k}": total / count for k, (total, count) in self.total.items()}


def short_number(value) -> str:
    """0.01, 3, 1e-4: a rate in few characters (below 0.001 in powers of ten)."""
    if isinstance(value, float) and 0 < abs(value) < 1e-3:
        mantissa, exponent = f"{value:.1e}".split("e")
        mantissa = mantissa.removesuffix(".0")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def run_label(config: dict, keys: Iterable[str] = RATES) -> str:
    """A run's name in the MLflow UI and the terminal: algorithm, the values of `keys` (dotted
    config keys) and the seed, short enough that MLflow's run-name column shows both rates:
    `feddualavg 0.01/1 s0` (client_lr/server_lr), `fedmid lr=0.01 s2` (client_lr alone),
    `fedmid lam=0.1 s0` (another key)."""
    flat = flatten(config)
    keys = [k for k in keys if k in flat and flat[k] is not None and k not in ("algorithm.name", "seed")]
    parts = [str(flat.get("algorithm.name", "?"))]
    if all(k in keys for k in RATES):
        parts.append("/".join(short_number(flat[k]) for k in RATES))
        keys = [k for k in keys if k not in RATES]
    short = {"algorithm.client_lr": "lr", "algorithm.server_lr": "slr"}
    parts += [f"{short.get(k, k.split('.')[-1])}={short_number(flat[k])}" for k in keys]
    return " ".join(parts + [f"s{flat.get('seed', 0)}"])
