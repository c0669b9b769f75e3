"""Every backend says which way the round loop drives it (`fco_ray.backends.base.Backend`):
`compiles_rounds` False, the engine calls `map_clients` each round; True, the backend runs
whole rounds (`CompiledRounds.run_rounds`). A backend that offers both ways, or neither,
is not one the engine can drive."""
import pytest

from fco_ray.backends.device.backend import DeviceBackend
from fco_ray.backends.local import LocalBackend
from fco_ray.backends.ray_backend import RayBackend


@pytest.mark.parametrize("cls, whole_rounds", [(LocalBackend, False), (RayBackend, False),
                                               (DeviceBackend, True)])
def test_each_backend_declares_how_the_engine_drives_it(cls, whole_rounds):
    assert cls.compiles_rounds is whole_rounds
    assert callable(getattr(cls, "run_rounds", None)) is whole_rounds
    assert callable(getattr(cls, "map_clients", None)) is not whole_rounds
    assert all(callable(getattr(cls, name, None)) for name in ("start_run", "close"))


def test_the_engine_asks_the_declaration_not_the_attributes():
    from fco_ray.api import resolve
    from fco_ray.core.engine import run_rounds
    from fco_ray.core.plan import prepare

    cfg = resolve({"problem": {"name": "lasso", "clients": 4, "dim": 8, "support": 2,
                               "samples_per_client": 8, "val_clients": 1},
                   "algorithm": {"name": "fedavg", "clients_per_round": 2, "local_steps": 2},
                   "rounds": 2, "eval_every": 1, "seed": 0, "backend": {"name": "local", "device": "cpu"}})
    prepared = prepare([cfg])
    backend = LocalBackend(prepared.problem)
    backend.run_rounds = lambda *a: pytest.fail("a backend that does not compile rounds was asked to")
    [result] = run_rounds(prepared.problem, prepared.group(), backend, rounds=2, eval_every=1, seed=0)
    assert [row["round"] for row in result.records] == [0, 1, 2]
