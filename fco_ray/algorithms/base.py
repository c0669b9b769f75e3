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
from pydantic import BaseModel, ConfigDict, Field

from ..problems.base import Problem
from ..random import Key, sample_clients
from ..tree import Params

State = dict[str, Any]


class Hyper(BaseModel):
    """Hyperparameters shared by the federated algorithms (flat names, sweepable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    client_lr: float = Field(0.01, gt=0, allow_inf_nan=False)
    server_lr: float = Field(1.0, gt=0, allow_inf_nan=False)
    local_steps: int = Field(10, ge=1)
    batch_size: int | None = Field(10, ge=1, description="None = full local batch")
    clients_per_round: int | None = Field(10, ge=1, description="None = all clients")
    weighting: Literal["uniform", "samples"] = "uniform"


class Algorithm(abc.ABC):
    name: ClassVar[str]
    Hyper: ClassVar[type[Hyper]] = Hyper
    #: round-level work only on the server (no clients are called): e.g. centralized
    uses_clients: ClassVar[bool] = True
    #: client exchanges per communication round (e.g. 2 for FSVRG: full gradient, then local
    #: passes); the state says which exchange comes next, metrics are taken after the last.
    exchanges_per_round: ClassVar[int] = 1

    def __init__(self, hp: Hyper):
        self.hp = hp

    def select_clients(self, seed: int, rnd: int, num_clients: int) -> np.ndarray:
        """The round's clients: uniform without replacement, keyed by (seed, round)."""
        per_round = self.hp.clients_per_round
        if per_round is None:
            return np.arange(num_clients)
        if per_round > num_clients:
            raise ValueError(
                f"algorithm.clients_per_round must be <= {num_clients} (the problem's clients), "
                f"got {per_round}")
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

    # ---- optional protocol extensions ---------------------------------------------------
    #: `client_update` returns its messages already summed over its clients with their
    #: `client_weights` (arrays without the client axis): a compiled kernel can then add
    #: every client's weighted message into one vector instead of a (clients, ...) stack.
    presummed: ClassVar[bool] = False
    #: the algorithm keeps per-client state between rounds (e.g. CoCoA+'s dual variables).
    #: The backend stores it per (run, client) next to the client's data, makes it with
    #: `init_client_state` at a client's first round of a run, and passes it to
    #: `client_update(problem, payload, rows, key, client_state)`, which returns
    #: `(messages, new_client_state)`; `client_state` is a list, one entry per row.
    client_state: ClassVar[bool] = False

    def init_client_state(self, problem: Problem, rows: np.ndarray) -> list:
        """Initial state of the clients `rows` (one entry each) of a new run."""
        raise NotImplementedError(f"algorithm {self.name!r} keeps no client state")
