"""The one registry of backends: each registers a name, a config model (the `backend:`
section, validated with the run's config) and a factory `(config, problem) -> backend`.

A config model also says what the rest of the platform asks of a backend, so no module
outside the backends asks a backend's name:
- `actor_bundles()`: the placement-group bundles its client actors take beside a trial's own
  (a Tune trial reserves them: fco_ray/sweep/trainable.py);
- `placement_strategy`: how Tune places those bundles;
- `uses_ray`: whether it joins a Ray cluster (address, a local cluster's fit);
- `needs_gpu`: whether its client work runs on a GPU (a Tune trial then needs a GPU share:
  fco_ray/sweep/schema.py);
- `compiles_rounds`: whether it runs whole rounds compiled from the rules (fco_ray.rules), each
  member with its own draws: groups may then differ in seed (fco_ray.core.plan), and algorithms
  written as a rule alone run there;
- `for_work(problem, algorithm, group=, rounds=, eval_every=, work=, rules=)`: the settings that run a group
  (the local backend's `device: auto` picks its CPU engine there: fco_ray/backends/choice.py).
This module imports no backend implementation: factories are "module:name" references.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..runtime.refs import resolve
from .cluster import check_local_cluster
from ..runtime.strict import no_bool_numbers


class BackendSettings(BaseModel):
    """Base of the backends' config models: flat, strict, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)

    uses_ray: ClassVar[bool] = False
    placement_strategy: ClassVar[str] = "PACK"

    def actor_bundles(self) -> list[dict]:
        return []

    @property
    def compiles_rounds(self) -> bool:
        return False

    @property
    def needs_gpu(self) -> bool:
        return False

    def describe(self) -> str:
        """The settings that size a trial's reservation, for messages."""
        return f"backend {self.name}"

    def for_work(self, problem: str, algorithm: str, *, group: int, rounds: int, eval_every: int,
                 work: int, rules: bool) -> "BackendSettings":
        """The settings that run a group of `group` configurations of `algorithm` on `problem`
        (names as in the config) for `rounds` rounds evaluated every `eval_every`, each doing `work` (model floats x
        clients x local steps); `rules`: both classes declare their rules (fco_ray.rules).
        These settings, unless one says "choose"."""
        return self


class LocalBackendConfig(BackendSettings):
    name: Literal["local"] = "local"
    chunk_size: int = Field(1024, ge=1, description="clients stacked at once (memory bound)")
    device: Literal["auto", "cpu", "cuda", "jax-cpu"] = Field(
        "auto", description="where the client work runs: auto (this CPU, with the engine "
        "measured faster for the pair and run length: fco_ray/backends/choice.py), cpu (the "
        "NumPy/numba engine), cuda (whole rounds compiled with JAX on a GPU, the '[gpu]' extra) "
        "or jax-cpu (the same programs on JAX's CPU platform); fco_ray.backends.device")
    nuclear_route: Literal["householder", "gram"] = Field(
        "householder", description="how a device computes the nuclear prox of a thin matrix: "
        "householder (QR by reflections, then a small SVD) or gram (eigenvalues of X^T X: "
        "faster on a GPU, squares the singular values); fco_ray.rules.psi")

    @property
    def compiles_rounds(self) -> bool:
        """The device backend draws each member's own clients, minibatches and noise (`auto`
        may run either engine: it groups as the NumPy engine does)."""
        return self.device not in ("auto", "cpu")

    @property
    def needs_gpu(self) -> bool:
        """`cuda`: whole rounds compiled with JAX on a GPU (`auto` only ever picks a CPU engine)."""
        return self.device == "cuda"

    def for_work(self, problem: str, algorithm: str, *, group: int, rounds: int, eval_every: int,
                 work: int, rules: bool) -> "LocalBackendConfig":
        """`auto`: this CPU's faster engine for the work (`choice.chosen_device`)."""
        if self.device != "auto":
            return self
        from .choice import chosen_device

        device = chosen_device(problem, algorithm, group=group, rounds=rounds,
                               eval_every=eval_every, work=work, rules=rules)
        return self.model_copy(update={"device": device})


class RayBackendConfig(BackendSettings):
    name: Literal["ray"]
    actors: int = Field(2, ge=1, description="long-lived client actors (each owns a shard)")
    cpus_per_actor: float = Field(1.0, gt=0, allow_inf_nan=False)  # inf would wait forever
    placement: Literal["spread", "pack"] = "spread"
    chunk_size: int = Field(1024, ge=1)
    address: str | None = Field(None, description="the Ray cluster to join (host:port or "
                                "ray://host:port); unset: $RAY_ADDRESS, else a new local "
                                "cluster on loopback (fco_ray.backends.cluster)")
    uses_ray: ClassVar[bool] = True

    @property
    def placement_strategy(self) -> str:  # type: ignore[override]
        return {"spread": "SPREAD", "pack": "PACK"}[self.placement]

    def actor_bundles(self) -> list[dict]:
        return [{"CPU": self.cpus_per_actor}] * self.actors

    def describe(self) -> str:
        return f"backend.actors={self.actors}, backend.cpus_per_actor={self.cpus_per_actor:g}"


@dataclass(frozen=True)
class BackendEntry:
    config: type[BackendSettings]
    factory: str  # "module:name" of `(config, problem) -> backend`


BACKENDS: dict[str, BackendEntry] = {
    "local": BackendEntry(LocalBackendConfig, "fco_ray.backends.local:make_local"),
    "ray": BackendEntry(RayBackendConfig, "fco_ray.backends.ray_backend:make_ray"),
}


def make_backend(config: BackendSettings | dict, problem):
    """The backend of a `backend:` section (validated, or a dict validated here) for `problem`
    (its training clients). Where it runs is checked here, on the machine that runs it: a
    ray backend's actors must fit the local cluster it would start (`cluster.check_local_cluster`);
    a device that is not there is refused by the device backend's factory."""
    if isinstance(config, dict):
        if config.get("name") not in BACKENDS:
            raise ValueError(f"backend.name must be one of {sorted(BACKENDS)}, got {config.get('name')!r}")
        config = BACKENDS[config["name"]].config(**config)
    check_local_cluster(config)  # before the factory imports Ray or starts a cluster
    return resolve(BACKENDS[config.name].factory)(config, problem)
