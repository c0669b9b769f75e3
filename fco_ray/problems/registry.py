"""The registry of problems by name: a pydantic model of the parameters (defaults = the
paper setting of the experiment) and a builder `(params, seed) -> Problem`.

Problem modules import this module (never the package), register their builders with
`@register_problem`, and the package imports each module once, explicitly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..runtime.limits import check_memory
from ..runtime.strict import no_bool_numbers
from .base import Problem


class ProblemParams(BaseModel):
    """Base of every problem's parameter model: flat, validated, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)  # `dim: yes` is an error
    #: the Problem class the builder returns: its `kinds` say which algorithms fit, before
    #: any data is built
    problem_class: ClassVar[type[Problem]] = Problem
    #: True where `lam` is the weight of the regularizer psi and enters nothing else (not the
    #: data, not the loss): configurations that differ only in it share one built problem and
    #: can run fused (`Problem.with_lam`, fco_ray.core.group)
    fusable_lam: ClassVar[bool] = False

    name: str
    data_seed: int | None = Field(None, ge=0, description="data seed; None = the run's seed")

    def estimated_bytes(self) -> dict[str, int] | None:
        """A lower bound of the memory a run of the problem takes (data, model), from the
        parameters alone: {part, naming the keys it grows with: bytes}; None = unknown.
        fco_ray.runtime.limits checks it against the memory available before anything is allocated."""
        return None


@dataclass(frozen=True)
class ProblemSpec:
    params: type[ProblemParams]
    build: Callable[[ProblemParams, int], Problem]


PROBLEMS: dict[str, ProblemSpec] = {}


def register_problem(name: str, params: type[ProblemParams], *, replace: bool = False):
    """Decorator: `@register_problem("mine", MyParams) def build(params, seed) -> Problem`.

    A name already registered with other parameters or another builder (a built-in such as
    `lasso`) is a ConfigError naming both, unless `replace=True`; the same builder again, or
    one of the same module and qualified name (a module reloaded), is not a clash."""
    from ..registry import check_free, qualified

    def wrap(build):
        old = PROBLEMS.get(name)
        if old is not None and not replace and (qualified(old.params), qualified(old.build)) != (
                qualified(params), qualified(build)):
            clash = (old.params, params) if qualified(old.params) != qualified(params) else (
                old.build, build)
            check_free("problem", name, clash[1], clash[0], replace,
                       "fco_ray.register_problem(name, params, replace=True)")
        PROBLEMS[name] = ProblemSpec(params, build)
        return build

    return wrap


def build_problem(params: ProblemParams, seed: int) -> Problem:
    check_memory(params)  # a ConfigError naming the key if it cannot fit
    data_seed = seed if params.data_seed is None else params.data_seed
    return PROBLEMS[params.name].build(params, data_seed)
