"""Reading config files: the safe YAML loader, `--set` overrides, and `ConfigError`.

Light on purpose (PyYAML only): the CLI reads and checks its files with these before it
imports anything heavy, so a missing file or a YAML error is reported at once.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (plain data only: never builds Python objects), except that
    a key given twice in one mapping is an error rather than silently the last value."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key once per mapping)",
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


def load_yaml(path: str | Path) -> dict:
    """Read a YAML file with a safe loader (never executes code or builds Python objects;
    duplicate keys are an error)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(path, e)) from None
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
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {path}: cannot parse value {text!r}: {e}") from None
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {path}: {k!r} is not a mapping")
        node[keys[-1]] = value
    return out
