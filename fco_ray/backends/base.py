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
    its clients' data and any per-client state of the current run."""

    name: str

    def start_run(self) -> None:
        """A new run begins: client state of an earlier run is dropped."""

    def map_clients(self, group, payload: dict, client_ids: np.ndarray, key: Key) -> tuple[dict, float]:
        ...

    def close(self) -> None:
        ...
