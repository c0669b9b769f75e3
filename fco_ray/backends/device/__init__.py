"""The device path of the local backend: a round's client work for a run or a fused group
as one compiled JAX program (fco_ray/backends/device/programs.py), on a GPU or on JAX's CPU platform.

`backend: {name: local, device: cpu | cuda | jax-cpu}`:
- `cpu` (default): the NumPy/numba engine (fco_ray/backends/local.py);
- `cuda`: the JAX programs on the first GPU (needs `pip install -e '.[gpu]'`);
- `jax-cpu`: the same JAX programs on JAX's CPU platform. It is slower than `cpu` on a CPU;
  it exists so that the device code is exercised where no GPU is (CI, tests/test_device.py),
  through the same configuration path as `cuda`.

Only the client work moves (the seam is `LocalBackend.map_clients`): the server update, the
metrics and everything logged stay on the host, so a device run's history equals the CPU
engine's to rounding (tests: 1e-9 relative; measured ~1e-12 at worst, the nuclear problem).
Programs: the E5 bilinear problems (l1, nuclear) for FeDualEx, FedMiP, Extra-step local SGD,
PGDA, FedDualAvg and FedMiD; E1 (lasso) and E2 (lowrank) for the composite family; E6
(adversarial) for FeDualEx and the primal saddle methods (`SUPPORTED`).
This module imports no JAX: the configuration check (`unsupported`) runs without it.
"""
from __future__ import annotations

DEVICES = ("cpu", "cuda", "jax-cpu")

#: (algorithm, problem) pairs with a device program
SADDLE_PROBLEMS = ("bilinear_l1", "bilinear_nuclear")
SADDLE_ALGORITHMS = ("feddualex", "fedmip", "extragrad_local_sgd", "pgda", "feddualavg", "fedmid")
LEAST_SQUARES_PROBLEMS = ("lasso", "lowrank")
LEAST_SQUARES_ALGORITHMS = ("fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp", "feddualavg",
                            "feddualavg_osp", "local")
ADVERSARIAL_ALGORITHMS = ("feddualex", "fedmip", "extragrad_local_sgd", "pgda")
SUPPORTED = tuple([(a, p) for p in SADDLE_PROBLEMS for a in SADDLE_ALGORITHMS]
                  + [(a, p) for p in LEAST_SQUARES_PROBLEMS for a in LEAST_SQUARES_ALGORITHMS]
                  + [(a, "adversarial") for a in ADVERSARIAL_ALGORITHMS])
MINIBATCH_PROBLEMS = LEAST_SQUARES_PROBLEMS + ("adversarial",)


def supported_text() -> str:
    by_problem: dict[str, list[str]] = {}
    for a, p in SUPPORTED:
        by_problem.setdefault(p, []).append(a)
    return "; ".join(f"{p}: {', '.join(a)}" for p, a in by_problem.items())


def unsupported(algorithm: str, problem: str, batch_size=0) -> str | None:
    """Why (algorithm, problem) has no device program, or None if it has one."""
    if (algorithm, problem) not in SUPPORTED:
        return (f"no device program for algorithm {algorithm!r} on problem {problem!r}; "
                f"supported pairs: {supported_text()} (or backend.device: cpu)")
    if problem in MINIBATCH_PROBLEMS and batch_size is None:
        return (f"the device program of {algorithm!r} on {problem!r} needs minibatches: "
                "algorithm.batch_size must be a number, got null (or backend.device: cpu)")
    return None
