"""The one table of display names: an algorithm's registered name (config key `algorithm.name`)
-> the name the papers, the pages and the claims print. A name without an entry prints as
itself. Pages add their own qualifiers on top (e.g. "FedMiP (server prox)"), never a second
table of names."""
from __future__ import annotations

ALGORITHM_NAMES = {
    "feddualavg": "FedDualAvg", "feddualavg_osp": "FedDualAvg-OSP", "fedmid": "FedMiD",
    "fedmid_osp": "FedMiD-OSP", "feddualex": "FeDualEx", "fedmip": "FedMiP",
    "extragrad_local_sgd": "Extra-step local SGD", "fedavg_subgrad": "FedAvg(subgradient)",
}


def display_name(name: str) -> str:
    """The printed name of algorithm `name` (`name` itself where the table has none)."""
    return ALGORITHM_NAMES.get(name, name)
