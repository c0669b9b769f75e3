"""What the round loop needs of a backend: where a group's client work runs."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..ops.random import Key


@runtime_checkable
class Backend(Protocol):
    """Runs the client work of a group (`fco_ray.core.group.Group`) for a round's clients.

    `map_clients` returns the weighted sum over `client_ids` of the group's messages (each
    of shape (G, ...) for a stacked group) and the sum of the weights; shards pre-sum, so the
    result does not depend on how clients are spread (up to summation order). A backend owns
    its clients' data and any per-client state of the current run.

    `compiles_rounds` says which of the two ways the round loop (`fco_ray.core.engine`) uses it:
    False, it runs each round and calls `map_clients` for the round's clients; True, the backend
    runs whole rounds itself, server step included (`CompiledRounds.run_rounds`: the rounds
    between two evaluations or checkpoints at once, each member with its own seed)."""

    name: str
    compiles_rounds: bool

    def start_run(self) -> None:
        """A new run begins: client state of an earlier run is dropped."""

    def map_clients(self, group, payload: dict, client_ids: np.ndarray, key: Key) -> tuple[dict, float]:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class CompiledRounds(Backend, Protocol):
    """A backend that runs whole rounds (`compiles_rounds` True): the device backend
    (`fco_ray.backends.device`)."""

    def run_rounds(self, group, state, seeds: list[int], start: int, stop: int) -> tuple:
        """Rounds start..stop-1 of the group's members (member j with seed seeds[j]) from
        `state`: (state, positions of members whose broadcast stopped being finite, (floats up,
        floats down), rows after round stop - 1 or None)."""
