"""Device memory: what a group's round program needs (an estimate from the shapes alone) and
what the device has free; a group that does not fit is refused before any work."""
from __future__ import annotations

import math

import numpy as np

from ...runtime.errors import ConfigError
from ...runtime.limits import available_bytes, human


def free_bytes(dev) -> int:
    """Memory left on the device: the GPU allocator's limit minus what is in use; the host's
    available memory for JAX's CPU platform."""
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return available_bytes()


def estimate_bytes(data_bytes: int, model: int, message: int, group: int, clients: int) -> dict[str, int]:
    """Device memory of a round's program for a group, by part, from the shapes alone (lower
    bounds in the spirit of fco_ray/runtime/limits.py): the problem's data, and per member and
    client the live copies of a local step (model, gradient, prox temporaries: 6) plus the
    client's message."""
    return {"the problem's data": data_bytes,
            f"the clients' live iterates ({clients} clients x {group} members x {model} floats, "
            "6 copies)": 6 * 8 * clients * group * model,
            f"the clients' messages ({clients} clients x {group} members x {message} floats)":
                8 * clients * group * message}


def check_memory(device, device_name: str, problem, group, problem_rule, clients: int) -> None:
    """Refuse (ConfigError) a group whose estimated device memory exceeds the free memory."""
    model = sum(math.prod(s) for s in problem.shapes.values())
    ergodic = "ergodic" in type(group.hp).model_fields and group.hp.ergodic  # a declared field
    message = model * (1 + (group.hp.local_steps if ergodic else 0))
    data = sum(np.asarray(v).nbytes for v in problem_rule.arrays().values())
    refuse_over(estimate_bytes(data, model, message, group.size, clients), free_bytes(device),
                f"backend.device {device_name!r}: a group of {group.size} configurations of "
                f"{group.name!r} on {problem.name!r} needs about", "of device memory",
                "Run smaller groups (run_grid max_group) or fewer clients per round")


def refuse_over(parts: dict[str, int], free: int, what: str, memory: str, advice: str,
                left: str = "free") -> None:
    """ConfigError "WHAT <total> MEMORY, more than the <free> LEFT; the largest part is ...
    ADVICE" where the parts add up to more than `free`."""
    total = sum(parts.values())
    if total > free:
        part, size = max(parts.items(), key=lambda item: item[1])
        raise ConfigError(f"{what} {human(total)} {memory}, more than the {human(free)} {left}; the "
                          f"largest part is {part}: {human(size)}. {advice}")
