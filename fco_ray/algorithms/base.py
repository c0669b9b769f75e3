"""The Algorithm interface: hyperparameters plus pure functions on explicit states.

A round is `broadcast(state) -> payload`; every sampled client runs
`client_update(problem, payload, rows, key)` (vectorized over the stack of clients) and
returns a per-client message; the backend forms the weighted sum of messages, and
`server_update(state, mean_message, round)` makes the next state. `output(state)` is the
primal model that metrics are evaluated on. Aggregation is a (weighted) sum, so a shard of
clients can pre-sum its messages and the result does not depend on sharding.
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..ops.random import Key, sample_clients
from ..ops.tree import Params
from ..problems.base import Problem
from ..runtime.refs import resolve
from ..runtime.strict import no_bool_numbers

State = dict[str, Any]

#: the methods a rule stands for: a subclass overriding one needs a rule of its own
RULE_METHODS = ("server_init", "broadcast", "client_update", "server_update", "output", "extra_outputs")


#: What a problem offers the algorithms (`Problem.kinds`) and what an algorithm needs
#: (`Algorithm.supports`): a pair fits when they share a kind (checked by `fco_ray.core.checks`).
PROBLEM_KINDS = {
    "minimize": "min F(w) + psi(w) with stochastic client gradients",
    "saddle": "min_x max_y f(x, y) + psi1(x) - psi2(y), through the operator (grad_x f, -grad_y f)",
    "nodes": "a finite sum over per-node samples, with exact per-node passes (federated SVRG family)",
}


def is_real(field) -> bool:
    """Whether a hyperparameter field holds a real number (only those can vary in a group)."""
    return field.annotation in (float, float | None)


class Hyper(BaseModel):
    """Hyperparameters every algorithm has (flat names, sweepable). Each family extends it
    with only the names it uses, so a sweep over an unused name is a config error."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)  # `client_lr: on` is an error

    name: str
    clients_per_round: int | None = Field(10, ge=1, description="None = all clients")
    weighting: Literal["uniform", "samples"] = "uniform"

    @classmethod
    def real_fields(cls) -> list[str]:
        """The real-valued hyperparameters (those that may differ inside a group)."""
        return [f for f, info in cls.model_fields.items() if is_real(info)]

    @property
    def minibatch(self) -> int | None:
        """The clients' minibatch size: the declared field `batch_size` of a family that has
        one (FederatedHyper), else None (each client's full local data)."""
        return self.batch_size if "batch_size" in type(self).model_fields else None


class FederatedHyper(Hyper):
    """Local-SGD-type methods: K local steps of minibatch size B, client and server rates."""

    client_lr: float = Field(0.01, gt=0, allow_inf_nan=False)
    server_lr: float = Field(1.0, gt=0, allow_inf_nan=False)
    local_steps: int = Field(10, ge=1)
    batch_size: int | None = Field(10, ge=1, description="None = full local batch")


class Algorithm(abc.ABC):
    name: ClassVar[str]
    Hyper: ClassVar[type[Hyper]] = FederatedHyper
    #: the problem kinds (PROBLEM_KINDS) this algorithm runs on
    supports: ClassVar[frozenset[str]] = frozenset({"minimize"})
    #: round-level work only on the server (no clients are called): e.g. centralized
    uses_clients: ClassVar[bool] = True
    #: whether configurations differing in real-valued hyperparameters can run as one group
    #: (fco_ray.core.group): an algorithm defined by its rule (`RuleAlgorithm`, under
    #: `jax.vmap`), or a NumPy one that serves the whole group itself (`serves_group`)
    fusable: ClassVar[bool] = False
    #: a fused group's client work is served by `group_client_update` (the whole group at
    #: once, e.g. one compiled pass over a node's data for every member; `Stacked`)
    serves_group: ClassVar[bool] = False
    #: client exchanges per communication round (e.g. 2 for FSVRG: full gradient, then local
    #: passes); the state says which exchange comes next, metrics are taken after the last.
    exchanges_per_round: ClassVar[int] = 1
    #: the algorithm's update rule for one member in JAX (`fco_ray.rules`): a class taking
    #: (hp, algorithm), or "module:Class" imported when its first group runs (configuration
    #: checks never import JAX). None: an algorithm written in NumPy (its methods below).
    rule: ClassVar[type | str | None] = None
    #: True where the rule is the definition (fco_ray.algorithms.rule_based.RuleAlgorithm):
    #: its groups run it on every executor (fco_ray.core.group.RuleGroup)
    rule_only: ClassVar[bool] = False

    def __init__(self, hp: Hyper):
        self.hp = hp

    def select_clients(self, seed: int, rnd: int, num_clients: int) -> np.ndarray:
        """The round's clients: uniform without replacement, keyed by (seed, round)."""
        per_round = self.hp.clients_per_round  # checked against the problem: fco_ray.core.checks
        if per_round is None:
            return np.arange(num_clients)
        return sample_clients(seed, rnd, num_clients, per_round)

    def client_weights(self, problem: Problem, rows: np.ndarray) -> np.ndarray:
        """Aggregation weights: 1 per client, or its sample count (`weighting: samples`)."""
        if self.hp.weighting == "samples":
            return problem.train.sizes[rows].astype(float)
        return np.ones(len(rows))

    @abc.abstractmethod
    def server_init(self, problem: Problem, params0: Params) -> State: ...

    @abc.abstractmethod
    def broadcast(self, state: State) -> dict: ...

    @abc.abstractmethod
    def client_update(self, problem: Problem, payload: dict, rows: np.ndarray, key: Key) -> dict:
        """Per-client messages, each block of shape (len(rows), ...)."""

    @abc.abstractmethod
    def server_update(self, problem: Problem, state: State, mean: dict, rnd: int) -> State: ...

    @abc.abstractmethod
    def output(self, problem: Problem, state: State) -> Params: ...

    def extra_outputs(self, problem: Problem, state: State) -> dict[str, Params]:
        """Other models to evaluate, by metric-name suffix (e.g. the ergodic average)."""
        return {}

    def extra_output_names(self) -> list[str]:
        """The suffixes `extra_outputs` uses (known without a state: for validating a sweep's
        metric before any run)."""
        return []

    @classmethod
    def has_rule(cls) -> bool:
        """Whether `rule` describes this class: declared by it or by a base whose update
        methods it does not override (an override without its own rule would be ignored)."""
        for klass in cls.__mro__:
            if "rule" in vars(klass):
                return vars(klass)["rule"] is not None
            if any(m in vars(klass) for m in RULE_METHODS):
                return False
        return False

    def make_rule(self):
        """The one-member rule of this configuration's algorithm (None: no rule)."""
        if not self.has_rule():
            return None
        return resolve(type(self).rule)(self.hp, self)

    # ---- optional protocol extensions ---------------------------------------------------
    #: `client_update` returns its messages already summed over its clients with their
    #: `client_weights` (arrays without the client axis): a compiled kernel can then add
    #: every client's weighted message into one vector instead of a (clients, ...) stack.
    presummed: ClassVar[bool] = False
    #: the algorithm keeps per-client state between rounds (e.g. CoCoA+'s dual variables).
    #: The backend stores it per (run, client) next to the client's data, makes it with
    #: `init_client_state` at a client's first round of a run, and passes it to
    #: `client_update(problem, payload, rows, key, client_state)`, which returns
    #: `(messages, new_client_state)`; `client_state` is a list, one entry per row. The
    #: server state alone then does not determine the run: no checkpoints (fco_ray.core.checkpoint).
    client_state: ClassVar[bool] = False

    def group_client_update(self, problem: Problem, payload: dict, rows: np.ndarray, key: Key) -> dict:
        """A stacked group's messages (`serves_group`): the payload holds every member on a
        leading (G, ...) axis and `self.hp`'s varying hyperparameters are (G,) arrays; every
        message is (G, ...), summed over `rows` like `client_update` (`presummed`)."""
        raise TypeError(f"algorithm {self.name!r} does not serve groups (serves_group is False)")

    def init_client_state(self, problem: Problem, rows: np.ndarray) -> list:
        """Initial state of the clients `rows` (one entry each) of a new run."""
        raise TypeError(f"algorithm {self.name!r} keeps no client state (client_state is False)")
