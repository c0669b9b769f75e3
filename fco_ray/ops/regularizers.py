"""Regularizers psi = lam * penalty + indicator of a norm ball, as frozen value objects.

A regularizer has at most one penalty part (``l1`` or ``nuclear``, weight ``lam``) and at
most one constraint part (a ball {||u|| <= radius} in the ``l1``, ``l2``, ``linf`` or
``spectral`` norm). Only combinations with an exact prox exist as classes; ``add``
builds them. All methods act on the trailing ``event_ndim`` axes of ``x`` and broadcast
over the leading (client) axes; they return new arrays (see ``fco_ray.ops.prox``).

A fused group whose members differ in ``lam`` evaluates each member on its own problem
(``Problem.with_lam``, ``fco_ray.core.group``); ``prox`` takes one step size ``t`` per row of
a stack.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import ClassVar, Mapping

import numpy as np

from fco_ray.ops.tree import per_row

from . import prox as P

FEASIBILITY_TOL = 1e-9  # ||x|| <= radius + FEASIBILITY_TOL * (1 + radius) counts as feasible


def _singular_values(x):
    return np.linalg.svd(x, compute_uv=False)


# Norms over the event axes, keyed by the names used for penalty and constraint kinds
# (the matrix norms act on the trailing two axes, which are then the event axes).
_NORMS = {
    "l1": lambda x, axes: np.sum(np.abs(x), axis=axes),
    "l2": lambda x, axes: np.sqrt(np.sum(x * x, axis=axes)),
    "linf": lambda x, axes: np.max(np.abs(x), axis=axes, initial=0.0),
    "nuclear": lambda x, axes: np.sum(_singular_values(x), axis=-1),
    "spectral": lambda x, axes: np.max(_singular_values(x), axis=-1, initial=0.0),
}
_PROJECTIONS = {
    "l1": P.project_l1_ball,
    "l2": P.project_l2_ball,
    "linf": lambda x, radius, event_ndim: P.project_box(x, radius),
    "spectral": lambda x, radius, event_ndim: P.project_spectral_ball(x, radius),
}
_MATRIX_KINDS = {"nuclear", "spectral"}


def _polar(x: np.ndarray) -> np.ndarray:
    """U V^T restricted to the singular values s > 1e-12 * max(s): a subgradient of ||x||_*."""
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    keep = s > 1e-12 * s.max(axis=-1, keepdims=True, initial=0.0)
    return (u * keep[..., None, :]) @ vh


def _out(a):
    a = np.asarray(a, dtype=np.float64)
    return float(a) if a.ndim == 0 else a


def _check_param(owner: str, name: str, value, allow_zero: bool) -> float:
    bound = ">= 0" if allow_zero else "> 0"
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{owner}: {name} must be a finite number {bound}, got {value!r}")
    return float(value)


class Regularizer:
    """psi(u) = lam * penalty(u) + indicator{constraint_norm(u) <= radius}.

    Subclasses are frozen dataclasses that set the class attributes ``penalty`` and
    ``constraint`` (a key of the norm table, or None) and the matching fields ``lam`` and
    ``radius``. The methods below dispatch on those two attributes.
    """

    penalty: ClassVar[str | None] = None
    constraint: ClassVar[str | None] = None

    def __post_init__(self):
        owner = type(self).__name__
        for f in fields(self):
            value = _check_param(owner, f.name, getattr(self, f.name), allow_zero=f.name == "lam")
            object.__setattr__(self, f.name, value)

    @property
    def is_constraint(self) -> bool:
        """True if psi has a constraint (indicator) part."""
        return self.constraint is not None

    def with_lam(self, lam: float) -> "Regularizer":
        """The same regularizer with penalty weight `lam` (checked as at construction). One
        without a penalty part has no weight: it is returned as it is."""
        return self if self.penalty is None else replace(self, lam=lam)

    @property
    def matrix_only(self) -> bool:
        """True if psi is defined on matrices only (event_ndim must be 2)."""
        return self.penalty in _MATRIX_KINDS or self.constraint in _MATRIX_KINDS

    def _check(self, x, event_ndim: int) -> tuple[np.ndarray, tuple[int, ...]]:
        x = P._as_float(x)
        if self.matrix_only and event_ndim != 2:
            raise ValueError(f"{type(self).__name__}: needs event_ndim == 2 (matrix blocks), got event_ndim={event_ndim}")
        return x, P._event_axes(x, event_ndim)

    def value(self, x, event_ndim: int = 1):
        """psi(x) over the event axes: an array over the leading axes, or a float.

        Constraint parts contribute 0 where feasible (up to FEASIBILITY_TOL) and inf outside.
        """
        x, axes = self._check(x, event_ndim)
        total = np.zeros(x.shape[: x.ndim - event_ndim])
        if self.penalty is not None:
            total = total + self.lam * _NORMS[self.penalty](x, axes)
        if self.constraint is not None:
            norm = _NORMS[self.constraint](x, axes)
            feasible = norm <= self.radius + FEASIBILITY_TOL * (1.0 + self.radius)
            total = total + np.where(feasible, 0.0, np.inf)
        return _out(total)

    def prox(self, x, t, event_ndim: int = 1) -> np.ndarray:
        """argmin_u t psi(u) + 1/2 ||u - x||^2 over the event axes (t >= 0). `t` is a number,
        or one number per row of a stack x (shape (R,), R = x.shape[0]). t >= 0 finite is the caller's to keep (the algorithms form it from
        validated rates): it is not checked here, on every local step."""
        x, _ = self._check(x, event_ndim)
        rows = np.ndim(t) == 1
        if rows and (x.ndim != event_ndim + 1 or len(t) != x.shape[0]):
            raise ValueError(f"{type(self).__name__}.prox: one t per row needs {x.shape[:1]} "
                             f"values for one leading axis, got t of shape {np.shape(t)} for x "
                             f"of shape {x.shape}")
        if self.penalty is None:
            return self.project(x, event_ndim)
        radius = getattr(self, "radius", None)
        tau = np.asarray(t) * self.lam if rows else t * self.lam
        if self.penalty == "l1":
            tau = per_row(tau, x.ndim)
            return P.soft_threshold(x, tau) if radius is None else P.prox_l1_box(x, tau, radius)
        return P.prox_nuclear(x, per_row(tau, 2), radius)  # against singular values (R, k)

    def subgradient(self, x, event_ndim: int = 1) -> np.ndarray:
        """A subgradient of the penalty part: lam sign(x) (0 at 0) or lam U V^T; zeros if none."""
        x, _ = self._check(x, event_ndim)
        if self.penalty is None:
            return np.zeros_like(x)
        return self.lam * (np.sign(x) if self.penalty == "l1" else _polar(x))

    def project(self, x, event_ndim: int = 1) -> np.ndarray:
        """Euclidean projection onto the constraint set (a copy of x if there is none)."""
        x, _ = self._check(x, event_ndim)
        if self.constraint is None:
            return x.copy()
        return _PROJECTIONS[self.constraint](x, self.radius, event_ndim)

    def __add__(self, other):
        if not isinstance(other, Regularizer):
            return NotImplemented
        return add(self, other)


@dataclass(frozen=True)
class Zero(Regularizer):
    """psi = 0: prox is the identity."""


@dataclass(frozen=True)
class L1(Regularizer):
    """psi(u) = lam ||u||_1;  prox_{t psi}(x) = sign(x) max(|x| - t lam, 0)."""

    lam: float
    penalty: ClassVar[str] = "l1"


@dataclass(frozen=True)
class Nuclear(Regularizer):
    """psi(U) = lam ||U||_* (sum of singular values);  prox: U diag(max(s - t lam, 0)) V^T."""

    lam: float
    penalty: ClassVar[str] = "nuclear"


@dataclass(frozen=True)
class L1Ball(Regularizer):
    """psi = indicator{||u||_1 <= radius};  prox: sort-based projection (Duchi et al. 2008)."""

    radius: float
    constraint: ClassVar[str] = "l1"


@dataclass(frozen=True)
class L2Ball(Regularizer):
    """psi = indicator{||u||_2 <= radius};  prox: x min(1, radius / ||x||_2)."""

    radius: float
    constraint: ClassVar[str] = "l2"


@dataclass(frozen=True)
class Box(Regularizer):
    """psi = indicator{||u||_inf <= radius};  prox: clip(x, -radius, radius)."""

    radius: float
    constraint: ClassVar[str] = "linf"


@dataclass(frozen=True)
class SpectralBall(Regularizer):
    """psi = indicator{||U||_2 <= radius};  prox: U diag(min(s, radius)) V^T."""

    radius: float
    constraint: ClassVar[str] = "spectral"


@dataclass(frozen=True)
class L1Box(Regularizer):
    """psi(u) = lam ||u||_1 + indicator{||u||_inf <= radius};  prox: clip(soft_threshold(x, t lam))."""

    lam: float
    radius: float
    penalty: ClassVar[str] = "l1"
    constraint: ClassVar[str] = "linf"


@dataclass(frozen=True)
class NuclearSpectral(Regularizer):
    """psi(U) = lam ||U||_* + indicator{||U||_2 <= radius};  prox: U diag(min(max(s - t lam, 0), radius)) V^T."""

    lam: float
    radius: float
    penalty: ClassVar[str] = "nuclear"
    constraint: ClassVar[str] = "spectral"


_CLASSES: dict[tuple[str | None, str | None], type[Regularizer]] = {
    (cls.penalty, cls.constraint): cls
    for cls in (Zero, L1, Nuclear, L1Ball, L2Ball, Box, SpectralBall, L1Box, NuclearSpectral)
}

_SUPPORTED_SUMS = (
    "Zero + any, L1 + L1, Nuclear + Nuclear, L1 + Box -> L1Box, Nuclear + SpectralBall -> "
    "NuclearSpectral, and two balls of the same norm (their intersection)"
)


def add(a: Regularizer, b: Regularizer) -> Regularizer:
    """The regularizer a + b, when its prox is exact.

    Penalties of the same kind add their weights; balls of the same norm intersect (the
    smaller radius); one penalty and one ball combine when a class for the pair exists.
    """
    if not (isinstance(a, Regularizer) and isinstance(b, Regularizer)):
        raise TypeError(f"add expects two Regularizers, got {type(a).__name__} and {type(b).__name__}")
    pen = {r.penalty for r in (a, b)} - {None}
    con = {r.constraint for r in (a, b)} - {None}
    key = (next(iter(pen), None), next(iter(con), None))
    if len(pen) > 1 or len(con) > 1 or key not in _CLASSES:
        raise ValueError(f"no exact prox for the sum of {a!r} and {b!r}; supported: {_SUPPORTED_SUMS}")
    params = {}
    if pen:
        params["lam"] = sum(r.lam for r in (a, b) if r.penalty is not None)
    if con:
        params["radius"] = min(r.radius for r in (a, b) if r.constraint is not None)
    return _CLASSES[key](**params)


REGISTRY: dict[str, type[Regularizer]] = {
    "zero": Zero,
    "l1": L1,
    "nuclear": Nuclear,
    "l1_ball": L1Ball,
    "l2_ball": L2Ball,
    "box": Box,
    "spectral_ball": SpectralBall,
    "l1_box": L1Box,
    "nuclear_spectral": NuclearSpectral,
}


def make(name: str, **params) -> Regularizer:
    """Build a regularizer from its config name, e.g. make("l1_box", lam=0.1, radius=1.0)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown regularizer {name!r}; allowed: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    expected = [f.name for f in fields(cls)]
    unknown = sorted(set(params) - set(expected))
    missing = [p for p in expected if p not in params]
    if unknown or missing:
        raise ValueError(
            f"regularizer {name!r} takes parameters {expected}; "
            f"unknown: {unknown}, missing: {missing}"
        )
    return cls(**params)


class Blockwise:
    """psi(params) = sum_{name in regs} regs[name](params[name]) over a dict of blocks.

    Block ``name`` has the unbatched shape ``shapes[name]`` (so event_ndim =
    len(shapes[name])); a batched block has extra leading axes. Blocks without a
    regularizer (e.g. a bias) are left alone: passed through by prox/project, zero
    subgradient.
    """

    def __init__(self, regs: Mapping[str, Regularizer], shapes: Mapping[str, tuple]):
        self.regs = dict(regs)
        self.shapes = {name: tuple(int(d) for d in shape) for name, shape in shapes.items()}
        for name, reg in self.regs.items():
            if name not in self.shapes:
                raise ValueError(f"Blockwise: unknown block {name!r}; known blocks: {sorted(self.shapes)}")
            if not isinstance(reg, Regularizer):
                raise TypeError(f"Blockwise: block {name!r} needs a Regularizer, got {type(reg).__name__}")
            if reg.matrix_only and len(self.shapes[name]) != 2:
                raise ValueError(
                    f"Blockwise: {type(reg).__name__} on block {name!r} needs a 2-D block, got shape {self.shapes[name]}"
                )

    def __repr__(self) -> str:
        return f"Blockwise(regs={self.regs!r}, shapes={self.shapes!r})"

    @property
    def is_constraint(self) -> bool:
        return any(reg.is_constraint for reg in self.regs.values())

    def with_lam(self, lam) -> "Blockwise":
        """The same blocks with every penalty weight set to `lam` (a number, or one per row
        of a stack: `Regularizer.with_lam`)."""
        return Blockwise({name: reg.with_lam(lam) for name, reg in self.regs.items()}, self.shapes)

    def _blocks(self, params: Mapping[str, np.ndarray]):
        """(name, regularizer, block, event_ndim) for each regularized block, validated."""
        for name, reg in self.regs.items():
            if name not in params:
                raise ValueError(f"Blockwise: params have no block {name!r}; got blocks {sorted(params)}")
            shape, x = self.shapes[name], np.asarray(params[name])
            if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
                raise ValueError(f"Blockwise: block {name!r} must end with shape {shape}, got shape {x.shape}")
            yield name, reg, x, len(shape)

    def value(self, params: Mapping[str, np.ndarray]):
        """Sum of the block values: an array over the leading axes, or a float."""
        total = 0.0
        for _, reg, x, nd in self._blocks(params):
            total = total + reg.value(x, nd)
        return _out(total)

    def prox(self, params: Mapping[str, np.ndarray], t) -> dict[str, np.ndarray]:
        """Blockwise prox_{t psi} (t a number or one per row); unregularized blocks are
        passed through."""
        out = dict(params)
        for name, reg, x, nd in self._blocks(params):
            out[name] = reg.prox(x, t, nd)
        return out

    def project(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Blockwise projection onto the constraint sets; other blocks are passed through."""
        out = dict(params)
        for name, reg, x, nd in self._blocks(params):
            out[name] = reg.project(x, nd)
        return out

    def subgradient(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Blockwise penalty subgradient; zeros for unregularized blocks."""
        out = {name: np.zeros_like(P._as_float(x)) for name, x in params.items()}
        for name, reg, x, nd in self._blocks(params):
            out[name] = reg.subgradient(x, nd)
        return out
