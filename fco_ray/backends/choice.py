"""Which CPU engine runs a group under `backend: {name: local, device: auto}` (the default).

Two engines run the same update rules on the CPU with the same numbers (to rounding):
- the NumPy/numba engine (`device: cpu`, fco_ray/backends/local.py), a round at a time;
- whole rounds compiled with JAX (`device: jax-cpu`, fco_ray/backends/device), which pays a
  compilation once per run.

`auto` takes the compiled rounds only where a side-by-side measurement says they are faster
for the (problem, algorithm) pair at about the group's size, the rounds between two
evaluations are at least as many as the measurement's (each such stretch is one call of the
compiled program; `CALL_BOUND_MS`), and the run is long enough for the time saved to pay for the compilation;
everything else (a pair not measured, JAX not installed or not loading, a short run, a small
problem, frequent evaluations) runs on the NumPy engine. The time saved is
estimated from the measured case scaled by the work of a round against the case's (model
floats x clients per round x local steps: `fco_ray.core.plan.round_work`): a rough guide,
enough to keep small problems, whose rounds take milliseconds, off the compiler. The
measurements are `speeds.json` beside this module, written from the benchmark record by

    python benchmarks/compiled_rounds.py --out benchmarks/results --speeds fco_ray/backends/speeds.json

This module imports neither JAX nor numba.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

SPEEDS = Path(__file__).with_name("speeds.json")
#: the compiled rounds must be at least this much faster per configuration-round (the
#: measurements' spread on a shared machine is a few percent)
MARGIN = 0.9
#: seconds to import JAX and set up its CPU client, beyond a case's measured compilation
JAX_START_S = 1.5
#: the time saved must pay for the start and the compilation this many times over
PAYBACK = 2.0
#: a compiled call (the rounds between two evaluations) pays a fixed cost: its launch and the
#: state's copy in and out, milliseconds on the CPU. The measurements ran `every` rounds per
#: call; a run evaluating more often pays that cost more often, which matters only where a
#: round is cheap: from this many ms per configuration-round, a call of one round is fine
CALL_BOUND_MS = 100.0


def load_speeds(path: Path = SPEEDS) -> list[dict]:
    """The measured cases: problem, algorithm, G, per configuration-round median ms of each
    engine (numpy_ms, compiled_ms) and the compilation's seconds (compile_s). Every pair
    there has its rules (the benchmark ran it compiled)."""
    return json.loads(Path(path).read_text())["cases"]


def nearest_case(speeds, problem: str, algorithm: str, group: int) -> dict | None:
    """The measured case of this pair whose group size is nearest `group` (log scale); None
    for a pair not measured."""
    same = [c for c in speeds if c["problem"] == problem and c["algorithm"] == algorithm]
    return min(same, key=lambda c: abs(math.log(c["G"] / group)), default=None)


def compiled_pays(case: dict | None, group: int, rounds: int, work: int, eval_every: int) -> bool:
    """Whether whole compiled rounds beat the NumPy engine for a run of `rounds` rounds,
    evaluated every `eval_every`, of a group of `group` configurations whose rounds do `work`
    (`round_work`), by `case`'s measurements."""
    if case is None or case["compiled_ms"] > MARGIN * case["numpy_ms"]:
        return False
    if eval_every < case["every"] and case["compiled_ms"] < CALL_BOUND_MS:
        return False  # shorter calls than measured, of cheap rounds: their fixed cost counts
    scale = min(1.0, work / case["work"])  # past the measured size: no extrapolation
    saved_s = rounds * group * (case["numpy_ms"] - case["compiled_ms"]) * scale / 1e3
    return saved_s >= PAYBACK * (JAX_START_S + case["compile_s"])


#: the causes already noted in this process (each note printed once)
_NOTED: set[str] = set()


def jax_loads() -> bool:
    """Whether JAX imports and offers its CPU (not installed, or a broken jaxlib: no).

    What in the environment would stop JAX -- an `XLA_FLAGS` flag XLA does not know (it
    aborts the process), `JAX_PLATFORMS` without cpu, a `jax/` folder that is not JAX -- is
    found first without loading JAX here (`device.environment.jax_trouble`: a stale flag is
    tried in a fresh subprocess, once per process and value); the run then takes the NumPy
    engine with a one-line note on stderr, since the user never asked for JAX."""
    import sys

    from .device.environment import jax_trouble

    trouble = jax_trouble("jax-cpu")
    if trouble is not None:
        if trouble != "JAX is not installed" and trouble not in _NOTED:  # a plain install: silent
            _NOTED.add(trouble)
            print(f"fco-ray: note: backend.device auto runs the NumPy engine (device cpu): "
                  f"{trouble}", file=sys.stderr)
        return False
    try:
        import jax

        return bool(jax.devices("cpu"))
    except Exception:  # noqa: BLE001 - any failure to load means: not this engine
        return False


def chosen_device(problem: str, algorithm: str, *, group: int, rounds: int, eval_every: int,
                  work: int, rules: bool = True, speeds=None) -> str:
    """'jax-cpu' where the pair has its rules (`rules`: both classes declare one), compiled
    rounds pay (`compiled_pays`) and JAX loads, else 'cpu'."""
    if not rules:
        return "cpu"
    case = nearest_case(load_speeds() if speeds is None else speeds, problem, algorithm, group)
    pays = compiled_pays(case, group, rounds, work, eval_every)
    return "jax-cpu" if pays and jax_loads() else "cpu"
