"""Validated experiment configuration: YAML / dict -> typed objects, with clear errors.

Every invalid input raises `ConfigError` naming the key path, the value and what is
allowed (the CLI turns it into exit code 2), before any work starts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from .algorithms import ALGORITHMS, Hyper
from .checks import check_fits
from .errors import ConfigError, short_repr
from .files import read_text
from .problems import PROBLEMS, ProblemParams
from .strict import no_bool_numbers


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)


class LocalBackendConfig(_Strict):
    name: Literal["local"] = "local"
    chunk_size: int = Field(1024, ge=1, description="clients stacked at once (memory bound)")


class RayBackendConfig(_Strict):
    name: Literal["ray"]
    actors: int = Field(2, ge=1, description="long-lived client actors (each owns a shard)")
    cpus_per_actor: float = Field(1.0, gt=0)
    placement: Literal["spread", "pack"] = "spread"
    chunk_size: int = Field(1024, ge=1)


BackendConfig = Annotated[Union[LocalBackendConfig, RayBackendConfig], Field(discriminator="name")]


#: MLflow store URI schemes (a bare word would silently become a file store directory)
TRACKING_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql", "databricks")


def check_tracking_uri(uri: str) -> str:
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if scheme not in TRACKING_SCHEMES or len(uri) > 4096:
        raise ValueError(f"tracking URI {short_repr(uri)} is not an MLflow store URI; use one "
                         f"of the schemes {list(TRACKING_SCHEMES)}, e.g. sqlite:///PATH/mlflow.db "
                         "or http://127.0.0.1:5000")
    return uri


class TrackingConfig(_Strict):
    # MLflow keeps experiment names in a 256-character column
    experiment: str = Field("fco-ray", min_length=1, max_length=256)
    uri: str | None = Field(None, description="MLflow tracking URI; default sqlite:///<cwd>/mlflow.db")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v):
        return v if v is None else check_tracking_uri(v)


class RunConfig(_Strict):
    problem: SerializeAsAny[ProblemParams]
    algorithm: SerializeAsAny[Hyper]
    rounds: int = Field(100, ge=1)
    eval_every: int = Field(10, ge=1)
    seed: int = Field(0, ge=0, lt=2**63)  # a 64-bit key part (fco_ray.random)
    backend: BackendConfig = LocalBackendConfig()
    tracking: TrackingConfig = TrackingConfig()


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
    if err["type"] == "bool_not_number":  # fco_ray.strict: the key is in the context
        return f"{'.'.join(p for p in (loc, str(err['ctx']['key'])) if p)}: {err['msg']}"
    if err["type"] == "value_error":  # our own validators: their message names the values
        message = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        return f"{loc}: {message}" if loc else message
    return f"{loc}: {err['msg']} (got {short_repr(err.get('input'))})"


def validate_model(model: type[BaseModel], raw: Any, prefix: str) -> BaseModel:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {type(raw).__name__}: "
                          f"{short_repr(raw)}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines = [_describe(err, prefix, model) for err in e.errors()]
        raise ConfigError("; ".join(lines)) from None


def _named(raw: Any, key: str, registry: dict) -> str:
    if not isinstance(raw, dict) or "name" not in raw:
        raise ConfigError(f"{key} must be a mapping with a 'name'; allowed names: {sorted(registry)}")
    if not isinstance(raw["name"], str) or raw["name"] not in registry:
        raise ConfigError(f"{key}.name: unknown {key} {short_repr(raw['name'])}; "
                          f"allowed: {sorted(registry)}")
    return raw["name"]


def parse_problem(raw: Any) -> ProblemParams:
    name = _named(raw, "problem", PROBLEMS)
    return validate_model(PROBLEMS[name].params, raw, "problem")


def parse_algorithm(raw: Any) -> Hyper:
    name = _named(raw, "algorithm", ALGORITHMS)
    return validate_model(ALGORITHMS[name].Hyper, raw, "algorithm")


def parse_run(raw: Any) -> RunConfig:
    """Validate a run config dict (the schema of a sweep file minus its search space)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - RUN_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)}; allowed: {sorted(RUN_KEYS)}")
    if "problem" not in raw or "algorithm" not in raw:
        raise ConfigError("config needs both 'problem' and 'algorithm' sections")
    rest = {k: v for k, v in raw.items() if k not in ("problem", "algorithm")}
    fields = {"problem": parse_problem(raw["problem"]), "algorithm": parse_algorithm(raw["algorithm"])}
    check_fits(fields["algorithm"].name, fields["problem"].problem_class.kinds, fields["problem"].name)
    try:
        return RunConfig.model_validate({**rest, **fields})
    except ValidationError as e:
        raise ConfigError("; ".join(_describe(err, "", RunConfig) for err in e.errors())) from None


MAX_CONFIG_BYTES = 2**20  # a config file is kilobytes
MAX_ALIAS_NODES = 100_000  # nodes YAML aliases may add by expansion (a config has hundreds)
_MERGE = "tag:yaml.org,2002:merge"


def _expanded_size(node, memo: dict) -> int:
    """Nodes under `node` counting every alias as a copy (memoized: aliases share nodes)."""
    if id(node) not in memo:
        if isinstance(node, yaml.SequenceNode):
            memo[id(node)] = 1 + sum(_expanded_size(c, memo) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            memo[id(node)] = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo)
                                     for k, v in node.value)
        else:
            memo[id(node)] = 1
    return memo[id(node)]


class _ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (plain data only: never builds Python objects), plus:
    - aliases are bounded: all of them together may expand to at most MAX_ALIAS_NODES
      nodes, and an alias inside its own anchor (a recursive structure) is refused, so a
      few hundred bytes cannot become gigabytes ("billion laughs") anywhere downstream;
      the error names the alias's line;
    - a key given twice in one mapping is an error rather than silently the last value
      (keys brought in by a merge key `<<:` may be overridden, as YAML specifies)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._expanded, self._sizes, self._open = 0, {}, set()

    def compose_node(self, parent, index):
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent):
            if anchor in self._open:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{anchor} is inside its own anchor (a recursive "
                    "structure)", event.start_mark)
            if anchor in self.anchors:
                self._expanded += _expanded_size(self.anchors[anchor], self._sizes)
                if self._expanded > MAX_ALIAS_NODES:
                    raise yaml.composer.ComposerError(
                        None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                        f"(at alias *{anchor}); a config needs far fewer", event.start_mark)
            return super().compose_node(parent, index)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {short_repr(key)} (each key once per mapping)",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_error(path: Path, e: yaml.YAMLError) -> str:
    """One line: file:line:column, what is wrong and, for tags, what is allowed."""
    mark = getattr(e, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    message = f"{where}: invalid YAML: {problem}" + (f" ({context})" if context else "")
    if "constructor for the tag" in problem:
        message += "; a config holds plain data only (mappings, lists, strings, numbers, booleans)"
    return message


def parse_yaml(text: str, path: str | Path = "<string>") -> Any:
    """Plain data from YAML text with the bounded, safe loader above."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(Path(path), e)) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None


def load_yaml(path: str | Path) -> dict:
    """Read a YAML config file through the one file error path (fco_ray.files) and the
    bounded safe loader (no code, no Python objects, aliases bounded, no duplicate keys)."""
    path = Path(path)
    data = parse_yaml(read_text(path, "config file", MAX_CONFIG_BYTES), path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def apply_overrides(raw: dict, assignments: list[str]) -> dict:
    """Apply `key.path=value` overrides (values parsed as YAML scalars) to a nested dict."""
    out = yaml.safe_load(yaml.safe_dump(raw))  # deep copy of plain data
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        path, text = item.split("=", 1)
        keys = [k for k in path.strip().split(".") if k]
        if not keys:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        try:
            value = parse_yaml(text, f"--set {path}")
        except ConfigError as e:
            raise ConfigError(f"--set {path}: cannot parse value {short_repr(text)}: {e}") from None
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {path}: {k!r} is not a mapping")
        node[keys[-1]] = value
    return out
