"""Validated experiment configuration: YAML / dict -> typed objects, with clear errors.

Every invalid input raises `ConfigError` naming the key path, the value and what is
allowed (the CLI turns it into exit code 2), before any work starts.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from ..algorithms import ALGORITHMS, Hyper
from ..backends.registry import BACKENDS, LocalBackendConfig, RayBackendConfig  # noqa: F401
from ..problems import PROBLEMS, ProblemParams
from ..runtime.errors import ConfigError, short_repr
from ..runtime.files import check_plain_name, check_tracking_uri
from ..runtime.strict import no_bool_numbers
from .checks import check_fits, fitting_algorithms, unknown_name


#: configurations per fused group at most: `run_grid`'s max_group, a sweep file's tune.fuse_max
MAX_FUSE = 1_024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)


#: the `backend:` section: one of the registered backends' config models, by `name`
BackendConfig = Annotated[Union[tuple(e.config for e in BACKENDS.values())], Field(discriminator="name")]


class TrackingConfig(_Strict):
    # MLflow keeps experiment names in a 256-character column
    experiment: str = Field("fco-ray", min_length=1, max_length=256)
    uri: str | None = Field(None, description="MLflow tracking URI; default sqlite:///<cwd>/mlflow.db")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v):
        return v if v is None else check_tracking_uri(v)

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, v):
        return check_plain_name(v, "experiment name")


#: rounds of one run at most: the paper's longest runs have thousands; `rounds: 1e20` (a
#: float YAML reads, taken as an integer) would never end
MAX_ROUNDS = 10_000_000


class RunConfig(_Strict):
    problem: SerializeAsAny[ProblemParams]
    algorithm: SerializeAsAny[Hyper]
    rounds: int = Field(100, ge=1, le=MAX_ROUNDS)
    eval_every: int = Field(10, ge=1)
    seed: int = Field(0, ge=0, lt=2**63)  # a 64-bit key part (fco_ray.ops.random)
    divergence: float | None = Field(
        1e3, gt=1, allow_inf_nan=False, description="a run whose train_loss exceeds this "
        "multiple of its round-0 value ends `diverged` (minimization problems); null: off")
    backend: BackendConfig = LocalBackendConfig()
    tracking: TrackingConfig = TrackingConfig()

    @model_validator(mode="after")
    def _fits(self):
        """The algorithm runs on the problem's kinds (a custom problem: once its instance is
        known, `core.plan.check_problem`)."""
        check_fits(self.algorithm.name, self.problem.problem_class.kinds, self.problem.name)
        return self

    @model_validator(mode="after")
    def _device_program(self):
        """A device other than cpu needs a rule of the problem's own (a problem without one
        runs its NumPy methods through host callbacks: on the CPU engine and Ray actors only)."""
        if self.backend.compiles_rounds and self.problem.name != "custom":
            # (a custom instance's rule is asked for where the backend is made)
            from .checks import no_device_program

            why = no_device_program(self.algorithm.name, self.problem.name)
            if why is not None:
                raise ValueError(f"backend.device: {why}")
        return self


RUN_KEYS = set(RunConfig.model_fields)


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models in a field's annotation (one, or the members of a union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)] if annotation else []


def _locate(model: type[BaseModel] | None, loc: tuple) -> tuple[list[str], type[BaseModel] | None]:
    """The key path of an error without the tags of tagged unions (`backend.ray.actors` ->
    `backend.actors`), and the model holding its last key (None if not a model)."""
    path, parts = [], list(loc)
    while parts:
        part = parts.pop(0)
        path.append(str(part))
        if not parts:  # `part` is the key in error; `model` holds it
            break
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        annotation = field.annotation if field is not None else None
        if get_origin(annotation) is dict:  # the next part is a key of the mapping
            path.append(str(parts.pop(0)))
            annotation = get_args(annotation)[1]
        members = _models(annotation) if parts else []
        if len(members) > 1:  # a tagged union: the next part is the member's `name`
            tags = {tag: m for m in members if "name" in m.model_fields
                    for tag in get_args(m.model_fields["name"].annotation)}
            members = [tags[parts.pop(0)]] if parts[0] in tags else []
        model = members[0] if members else None
    return path, model


def _describe(err: dict, prefix: str, model: type[BaseModel] | None) -> str:
    path, holder = _locate(model, err["loc"])
    loc = ".".join(p for p in (prefix, *path) if p != "")
    if err["type"] == "extra_forbidden":
        allowed = f"; allowed keys here: {sorted(holder.model_fields)}" if holder is not None else ""
        return f"unknown key {loc!r}{allowed}"
    if err["type"] in ("union_tag_not_found", "union_tag_invalid"):  # e.g. backend without name
        field = holder.model_fields.get(path[-1]) if holder is not None and path else None
        tags = sorted(tag for m in _models(field.annotation if field else None)
                      if "name" in m.model_fields for tag in get_args(m.model_fields["name"].annotation))
        given = err.get("input", {}).get("name") if isinstance(err.get("input"), dict) else None
        why = (f" is needed to say which {loc} is meant" if given is None
               else f": unknown name {short_repr(given)}")
        return f"{loc}.name{why}; allowed names: {tags} (got {short_repr(err.get('input'))})"
    if err["type"] == "bool_not_number":  # fco_ray.runtime.strict: the key is in the context
        return f"{'.'.join(p for p in (loc, str(err['ctx']['key'])) if p)}: {err['msg']}"
    if err["type"] == "value_error":  # our own validators: their message names the values
        message = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        return f"{loc}: {message}" if loc else message
    return f"{loc}: {err['msg']} (got {short_repr(err.get('input'))})"


class FuseLimit(_Strict):
    """How many configurations one fused group holds at most (None: the engine's default)."""
    fuse_max: int | None = Field(None, ge=1, le=MAX_FUSE)


def validate_model(model: type[BaseModel], raw: Any, prefix: str) -> BaseModel:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {type(raw).__name__}: "
                          f"{short_repr(raw)}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines = [_describe(err, prefix, model) for err in e.errors()]
        raise ConfigError("; ".join(lines)) from None


def _named(raw: Any, key: str, registry: dict, allowed: list[str] | None = None,
           scope: str = "") -> str:
    allowed = sorted(registry) if allowed is None else allowed
    if not isinstance(raw, dict) or "name" not in raw:
        raise ConfigError(f"{key} must be a mapping with a 'name'; allowed names: {allowed}")
    if not isinstance(raw["name"], str) or raw["name"] not in registry:
        raise ConfigError(f"{key}.name: {unknown_name(key, raw['name'], allowed, sorted(registry), scope)}")
    return raw["name"]


def parse_problem(raw: Any) -> ProblemParams:
    name = _named(raw, "problem", PROBLEMS)
    return validate_model(PROBLEMS[name].params, raw, "problem")


def parse_algorithm(raw: Any, problem: str | None = None) -> Hyper:
    """An algorithm section; an unknown name's message lists the algorithms that fit
    `problem` (a registered name), with a "did you mean" among them."""
    scope = f"for problem {problem!r}" if problem is not None else ""
    name = _named(raw, "algorithm", ALGORITHMS, fitting_algorithms(problem), scope)
    return validate_model(ALGORITHMS[name].Hyper, raw, "algorithm")


def parse_run(raw: Any) -> RunConfig:
    """Validate a run config dict (the schema of a sweep file minus its search space); NumPy
    scalars in it are taken as the Python numbers (and booleans) they hold (every section's
    model checks its values with `runtime.strict.no_bool_numbers`)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - RUN_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)}; allowed: {sorted(RUN_KEYS)}")
    if "problem" not in raw or "algorithm" not in raw:
        raise ConfigError("config needs both 'problem' and 'algorithm' sections")
    rest = {k: v for k, v in raw.items() if k not in ("problem", "algorithm")}
    problem = parse_problem(raw["problem"])
    fields = {"problem": problem, "algorithm": parse_algorithm(raw["algorithm"], problem.name)}
    try:
        return RunConfig.model_validate({**rest, **fields})
    except ValidationError as e:
        raise ConfigError("; ".join(_describe(err, "", RunConfig) for err in e.errors())) from None
