"""Report definitions (`dashboards/*.yaml`): which metrics a sweep's report plots, and how.

A dashboard is looked up by explicit path or name, else by the sweep file's `report` key,
else by the sweep's problem (the first dashboard listing it under `problems`), else
`default`. The format is described in `dashboards/README.md`; every key is validated and a
bad one raises `ConfigError` naming the file, the key, the value and what is allowed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from ..runtime.errors import ConfigError

# the repository's dashboards/ (an editable install finds it next to the package)
from ..runtime.files import load_yaml

# the repository's dashboards/ (an editable install finds it next to the package)
PACKAGE_DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Curve(_Strict):
    """One panel: `metric` vs communication round, one line (mean +- std over seeds) per
    algorithm's best configuration."""

    metric: str = Field(min_length=1)
    label: str | None = Field(None, description="y-axis label (default: the metric name)")
    log_y: bool | None = Field(
        None, description="true, false or auto (null): log scale when the values are positive "
                          "and span more than two decades")
    log_x: bool = False
    ylim: tuple[float, float] | None = None

    @field_validator("log_y", mode="before")
    @classmethod
    def _auto(cls, value):
        if value not in (True, False, "auto", None):
            raise ValueError(f"must be true, false or auto, got {value!r}")
        return None if value == "auto" else value

    @model_validator(mode="after")
    def _ordered_limits(self):
        if self.ylim is not None and not self.ylim[0] < self.ylim[1]:
            raise ValueError(f"ylim must be [low, high] with low < high, got {list(self.ylim)}")
        return self


class Heatmap(_Strict):
    """Final `metric` (mean over seeds) over the `x` x `y` hyperparameter grid, per algorithm."""

    metric: str | None = Field(None, description="default: the sweep's tuning metric")
    x: str = "algorithm.client_lr"
    y: str = "algorithm.server_lr"
    log_color: bool = False


class Dashboard(_Strict):
    title: str | None = None
    problems: list[str] = Field(default_factory=list,
                                description="sweeps of these problems use this dashboard by default")
    metric: str | None = Field(None, description="ranking metric if the sweep recorded none")
    mode: Literal["min", "max"] | None = None
    curves: list[Curve] | None = Field(None, description="all (null): every logged metric")
    grid_curves: list[Curve] | None = Field(
        None, description="metrics drawn for every configuration of the grid (one panel per "
                          "algorithm, one line per configuration); default: the tuning metric")
    heatmaps: list[Heatmap] = Field(default_factory=lambda: [Heatmap()])
    table: list[str] | None = Field(None, description="metrics in the best-configuration table "
                                                      "(default: the curves' metrics)")
    images: list[str] = Field(default_factory=list,
                              description="image artifacts of each best run to show, e.g. attack.png")
    _name: str = PrivateAttr("default")

    @property
    def name(self) -> str:
        """The file name without `.yaml`."""
        return self._name

    @field_validator("curves", mode="before")
    @classmethod
    def _all(cls, value):
        if value is None or isinstance(value, list):
            return value
        if value == "all":
            return None
        raise ValueError(f"must be all or a list of {{metric: ...}} mappings, got {value!r}")

    @model_validator(mode="after")
    def _metric_and_mode_together(self):
        if (self.metric is None) != (self.mode is None):
            raise ValueError(f"metric and mode go together, got metric={self.metric!r}, mode={self.mode!r}")
        return self


SECTIONS = {"curves": Curve, "grid_curves": Curve, "heatmaps": Heatmap}  # where a nested key's allowed keys come from


def dashboard_dirs() -> list[Path]:
    """Where named dashboards are looked up: `./dashboards`, then the repository's."""
    dirs: list[Path] = []
    for d in (Path.cwd() / "dashboards", PACKAGE_DASHBOARDS):
        if d.is_dir() and d.resolve() not in dirs:
            dirs.append(d.resolve())
    return dirs


def available() -> dict[str, Path]:
    """Dashboard name -> file, the first directory of `dashboard_dirs()` winning."""
    found: dict[str, Path] = {}
    for d in dashboard_dirs():
        for path in sorted(d.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def _describe(err: dict) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        model = SECTIONS.get(err["loc"][0], Dashboard) if len(err["loc"]) > 1 else Dashboard
        return f"unknown key {loc!r}; allowed keys here: {sorted(model.model_fields)}"
    return f"{loc}: {err['msg']} (got {err.get('input')!r})"


def load_dashboard(path: str | Path) -> Dashboard:
    """Parse and validate one dashboard file."""
    path = Path(path)
    try:
        dash = Dashboard.model_validate(load_yaml(path))
    except ValidationError as e:
        raise ConfigError(f"{path}: " + "; ".join(_describe(err) for err in e.errors())) from None
    dash._name = path.stem
    return dash


def find_dashboard(choice: str | Path | None, problem: str | None) -> Dashboard:
    """`choice` (a path or a name in `dashboard_dirs()`), else the dashboard listing `problem`,
    else `default`."""
    names = available()
    if choice is not None:
        if Path(choice).suffix in (".yaml", ".yml") or Path(choice).is_file():
            return load_dashboard(choice)
        if str(choice) not in names:
            raise ConfigError(f"report: unknown dashboard {str(choice)!r}; available: {sorted(names)} "
                              f"(in {[str(d) for d in dashboard_dirs()]}) or a path to a .yaml file")
        return load_dashboard(names[str(choice)])
    if problem is not None:
        for path in names.values():
            dash = load_dashboard(path)
            if problem in dash.problems:
                return dash
    if "default" in names:
        return load_dashboard(names["default"])
    return Dashboard()
