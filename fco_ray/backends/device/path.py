"""`DevicePath`: the local backend's `map_clients` on a JAX device (see fco_ray/backends/device/__init__.py).

One instance per backend: the problem's data (the bilinear A and b, a least-squares
problem's samples) go to the device at the first round and stay there; each round sends
the broadcast and the round's client ids, and gets back the weighted client sums.
"""
from __future__ import annotations

import math

import numpy as np

from ...runtime.errors import ConfigError
from ...runtime.limits import available_bytes, human
from . import DEVICES, supported_text

INSTALL = "install the GPU extra: pip install -e '.[gpu]'"


def _jax():
    try:
        import jax
    except ImportError as e:
        raise ConfigError(f"backend.device needs JAX ({e}); {INSTALL}, or use backend.device: cpu") from None
    jax.config.update("jax_enable_x64", True)  # the device path computes in float64
    return jax


def jax_device(device: str):
    """The JAX device of `backend.device` ('cuda': the first GPU; 'jax-cpu': the CPU)."""
    if device not in DEVICES or device == "cpu":
        raise ConfigError(f"backend.device: must be one of {list(DEVICES[1:])} for the device "
                          f"path, got {device!r}")
    jax = _jax()
    platform = "gpu" if device == "cuda" else "cpu"
    try:
        return jax.devices(platform)[0]
    except RuntimeError as e:
        raise ConfigError(f"backend.device: 'cuda' asked for, but JAX finds no GPU ({e}); "
                          f"{INSTALL} on a machine with an NVIDIA GPU, or use backend.device: cpu") from None


def free_bytes(dev) -> int:
    """Memory left on the device: the GPU allocator's limit minus what is in use; the host's
    available memory for JAX's CPU platform."""
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return available_bytes()


def _kind(problem) -> str | None:
    """'bilinear_l1', 'bilinear_nuclear', 'least_squares' (a linear regression with an l1
    penalty, or none, on w alone: E1), or None for a problem without device programs.
    Exact classes only: a subclass may change the gradient."""
    from ...ops import regularizers as R
    from ...problems.adversarial import UniversalAdversarial
    from ...problems.linear import LinearRegression, _l1_weight
    from ...problems.saddle import BilinearSaddle

    if (type(problem) is UniversalAdversarial and set(problem.psi.regs) == {"delta"}
            and type(problem.psi.regs["delta"]) is R.L1Box):
        return "adversarial"
    if type(problem) is BilinearSaddle:
        regs = [problem.psi.regs.get(b) for b in ("x", "y")]
        if set(problem.shapes) == {"x", "y"} and all(type(r) is R.L1Box for r in regs):
            return "bilinear_l1"
        if set(problem.shapes) == {"x", "y"} and all(type(r) is R.NuclearSpectral for r in regs):
            return "bilinear_nuclear"
        return None
    if type(problem) is LinearRegression and set(problem.shapes) == {"w", "b"} and problem.shapes["b"] == ():
        if _l1_weight(problem.psi) is not None:
            return "least_squares"
        regs = problem.psi.regs
        if set(regs) == {"w"} and type(regs["w"]) is R.Nuclear and len(problem.shapes["w"]) == 2:
            return "least_squares_nuclear"
    return None


def _family(cls, kind: str) -> str | None:
    from ...algorithms.composite import DualAveraging, PrimalAveraging
    from ...algorithms.saddle import FeDualEx, PrimalSaddle

    if kind.startswith("least_squares"):
        return "composite" if issubclass(cls, (PrimalAveraging, DualAveraging)) else None
    if issubclass(cls, FeDualEx):
        return "feddualex"
    if issubclass(cls, PrimalSaddle):
        return "primal_saddle"
    if kind == "adversarial":
        return None
    if cls.name in ("fedmid", "feddualavg"):
        return "composite_saddle"
    return None


def estimate_bytes(kind: str, problem, group: int, clients: int, steps: int, batch: int | None,
                   ergodic: bool) -> dict[str, int]:
    """Device memory of one round's program for a group, by part, from the shapes alone
    (lower bounds in the spirit of fco_ray/runtime/limits.py: the live (clients, members, model)
    stacks of a step, the ergodic accumulators and the problem's data)."""
    model = sum(math.prod(s) for s in problem.shapes.values())
    if kind.startswith("least_squares") or kind == "adversarial":
        data = 8 * (problem.train.arrays["x"].size + problem.train.arrays["y"].size)
        return {"the training samples": data,
                f"the round's minibatches ({clients} clients x batch {batch} x {model} floats)":
                    8 * clients * (batch or 1) * model * 2,
                f"the stacked models ({clients} clients x {group} members x {model} floats, "
                "6 live copies)": 6 * 8 * clients * group * model}
    live = 16 if kind == "bilinear_nuclear" else 10  # the SVDs' factors add ~6 stacks
    a = problem.info["A"]
    parts = {"the matrix A": 8 * a.size,
             f"the stacked iterates ({clients} clients x {group} members x {model} floats, "
             f"{live} live copies)": live * 8 * clients * group * model}
    if ergodic:
        parts[f"the ergodic sums ({steps} steps x {group} members x {model} floats, 3 copies)"] = \
            3 * 8 * steps * group * model
    return parts


class DevicePath:
    """map_clients on a JAX device for the supported (algorithm, problem) pairs."""

    def __init__(self, problem, device: str):
        self.jax = _jax()
        self.device = jax_device(device)
        self.name = device
        self.problem = problem
        self.kind = _kind(problem)
        if self.kind is None:
            raise ConfigError(f"backend.device {device!r}: no device program for problem "
                              f"{problem.name!r} ({type(problem).__name__}); supported pairs: "
                              f"{supported_text()} (or backend.device: cpu)")
        self.data: dict | None = None  # the problem's arrays on the device, from the first round
        self.checked: set = set()  # (family, group, clients) whose memory was checked

    def put(self, v, dtype=None):
        return self.jax.device_put(np.asarray(v, dtype=dtype), self.device)

    def _data(self) -> dict:
        if self.data is None:
            p = self.problem
            if self.kind == "adversarial":
                x = p.train.arrays["x"]
                self.data = {"x": self.put(x.reshape(-1, x.shape[-1]), np.float64),
                             "y": self.put(p.train.arrays["y"].reshape(-1), np.int64)}
            elif self.kind.startswith("least_squares"):
                x = p.train.arrays["x"]
                self.data = {"x": self.put(x.reshape(-1, math.prod(p.shapes["w"])), np.float64),
                             "y": self.put(p.train.arrays["y"].reshape(-1), np.float64)}
            else:
                self.data = {"a": self.put(p.info["A"], np.float64), "b": self.put(p.info["b"], np.float64)}
        return self.data

    def _check_memory(self, family, group, clients, hp) -> None:
        key = (family, group, clients)
        if key in self.checked:
            return
        parts = estimate_bytes(self.kind, self.problem, group, clients, hp.local_steps,
                               getattr(hp, "batch_size", None), bool(getattr(hp, "ergodic", False)))
        total, free = sum(parts.values()), free_bytes(self.device)
        if total > free:
            part, size = max(parts.items(), key=lambda item: item[1])
            raise ConfigError(
                f"backend.device {self.name!r}: a group of {group} configurations of "
                f"{hp.name!r} on {self.problem.name!r} needs about {human(total)} of device "
                f"memory, more than the {human(free)} free; the largest part is {part}: "
                f"{human(size)}. Run smaller groups (run_grid max_group) or fewer clients per round")
        self.checked.add(key)

    def map_clients(self, algorithm, payload, client_ids, key) -> tuple[dict, float]:
        # `algorithm` is the round loop's group (fco_ray.core.group): its members' classes,
        # hyperparameters and lams; its payload on a leading member axis (`stack_payload`)
        cls, hps, g = algorithm.cls, [m.hp for m in algorithm.members], algorithm.size
        payload = algorithm.stack_payload(payload)
        family = _family(cls, self.kind)
        if family is None:
            raise ConfigError(f"backend.device {self.name!r}: no device program for algorithm "
                              f"{cls.name!r} on problem {self.problem.name!r}; supported pairs: "
                              f"{supported_text()} (or backend.device: cpu)")
        rows = np.asarray(client_ids)
        hp = hps[0]
        self._check_memory(family, g, len(rows), hp)
        data = self._data()
        weights = np.asarray(algorithm.client_weights(self.problem, rows), dtype=np.float64)
        common = dict(seed=np.uint64(key.seed), rnd=np.uint64(key.round),
                      ids=self.put(np.asarray(key.client_ids).reshape(-1), np.uint64),
                      weights=self.put(weights))
        lr = np.array([h.client_lr for h in hps], dtype=np.float64)
        lams = algorithm.lams

        def members(v):  # a payload block, (G, ...)
            return self.put(np.asarray(v, dtype=np.float64))

        def numbers(v):  # a payload number (shared or one per member) as (G,)
            return np.broadcast_to(np.asarray(v, dtype=np.float64), (g,)).copy()

        from . import programs

        if self.kind == "adversarial":
            out = self._adversarial(programs, cls, hp, payload, lr, lams, g, rows, data, common,
                                    members, numbers, family)
        elif self.kind.startswith("least_squares"):
            out = self._least_squares(programs, cls, hp, payload, lr, lams, g, rows, data, common,
                                      members, numbers)
        else:
            info = self.problem.info
            lam = numbers(info["lam"] if lams is None else lams)
            saddle = dict(a=data["a"], b=data["b"], lam=self.put(lam), radius=float(info["radius"]),
                          sigma=float(info["noise"]), **common)
            flags = dict(steps=hp.local_steps, matrix=self.kind == "bilinear_nuclear",
                         noisy=float(info["noise"]) != 0.0)
            if family == "feddualex":
                out = programs.feddualex(vx=members(payload["v"]["x"]), vy=members(payload["v"]["y"]),
                                         t=self.put(numbers(payload["t"])), lr=self.put(lr),
                                         ergodic=hp.ergodic, **saddle, **flags)
            elif family == "primal_saddle":
                out = programs.primal_saddle(zx0=members(payload["z"]["x"]), zy0=members(payload["z"]["y"]),
                                             lr=self.put(lr), ergodic=hp.ergodic, extra=cls.extra,
                                             prox=cls.prox, **saddle, **flags)
            else:
                dual = "etat" in payload
                tree = payload["z"] if dual else payload["w"]
                out = programs.composite_saddle(zx0=members(tree["x"]), zy0=members(tree["y"]),
                                                etat=self.put(numbers(payload.get("etat", 0.0))),
                                                lr=self.put(lr), dual=dual,
                                                client_prox=bool(getattr(cls, "client_prox", False)),
                                                **saddle, **flags)
        return algorithm.unstack_sums({k: np.array(v) for k, v in out.items()}), float(weights.sum())

    def _adversarial(self, programs, cls, hp, payload, lr, lams, g, rows, data, common, members,
                     numbers, family):
        from ...problems.adversarial import CLASSES

        p = self.problem
        lam = numbers(p.info["lam"] if lams is None else lams)
        shared = dict(lr=self.put(lr), lam=self.put(lam), radius=float(p.info["radius"]),
                      sizes=self.put(p.train.sizes[rows], np.int64),
                      offsets=self.put(rows.astype(np.int64) * p.train.max_samples),
                      steps=hp.local_steps, ergodic=hp.ergodic, batch=int(hp.batch_size),
                      classes=CLASSES, **common)
        if family == "feddualex":
            return programs.adversarial_feddualex(data["x"], data["y"],
                                                  {b: members(x) for b, x in payload["v"].items()},
                                                  t=self.put(numbers(payload["t"])), **shared)
        return programs.adversarial_primal(data["x"], data["y"],
                                           {b: members(x) for b, x in payload["z"].items()},
                                           extra=cls.extra, prox=cls.prox, **shared)

    def _least_squares(self, programs, cls, hp, payload, lr, lams, g, rows, data, common, members,
                       numbers):
        from ...algorithms.composite import DualAveraging
        from ...problems.linear import _l1_weight

        p = self.problem
        matrix = self.kind == "least_squares_nuclear"
        own = p.psi.regs["w"].lam if matrix else _l1_weight(p.psi)
        lam = numbers(own if lams is None else lams)
        steps, k = hp.local_steps, np.arange(hp.local_steps, dtype=np.float64)[:, None]
        zero = np.zeros((steps, g))
        # the thresholds (K, G) of kernels.least_squares_steps, with the floats of the CPU's
        # `np.asarray(t).reshape(steps, -1) * lam` (t = etat + lr k, or lr)
        if issubclass(cls, DualAveraging):
            tree = payload["z"]
            pre = (numbers(payload["etat"])[None] + lr[None] * k) * lam[None] if cls.client_prox else zero
            post, sub = zero, np.zeros(0 if matrix else g)
        else:
            tree = payload["w"]
            pre = zero
            post = np.broadcast_to(lr[None] * lam[None], (steps, g)) if cls.client_step == "prox" else zero
            sub = lam if cls.client_step == "subgrad" else np.zeros(0 if matrix else g)
        shape = p.shapes["w"]
        w0 = np.asarray(tree["w"], dtype=np.float64)
        w0 = w0.reshape((g, -1)) if w0.ndim > len(shape) else w0.reshape((1, -1))
        out = programs.least_squares(
            data["x"], data["y"], self.put(w0), self.put(numbers(tree["b"])), self.put(lr),
            self.put(pre), self.put(post), self.put(sub),
            sizes=self.put(p.train.sizes[rows], np.int64),
            offsets=self.put(rows.astype(np.int64) * p.train.max_samples),
            steps=steps, batch=int(hp.batch_size), matrix=tuple(shape) if matrix else None, **common)
        return {"w": out["w"].reshape((g,) + shape), "b": out["b"]}
