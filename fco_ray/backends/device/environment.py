"""Whether JAX can run here, asked without letting the environment kill the process.

What in the environment can stop JAX, and how each is answered:
- not installed, or a `jax/` folder on the path that is not JAX (an empty folder on
  PYTHONPATH imports as a namespace package: "module 'jax' has no attribute 'config'");
- `JAX_PLATFORMS` naming platforms that leave out the one asked for (`bogus`, `cuda` for
  jax-cpu): JAX would fail with its own unrelated message (an AssertionError with no text);
- `XLA_FLAGS` holding a flag XLA does not know: XLA aborts the whole process when its first
  backend starts ("Unknown flag in XLA_FLAGS"), so no try/except can catch it. Such flags
  are tried once per process and value in a fresh subprocess (`_xla_flags_trouble`), unless
  JAX already runs here (the flags were then read and accepted) or the process that started
  this one tried them (`fco_ray.runtime.xla.known_good`).

`jax_trouble(device)` says which, in one line (None: nothing found); `jax_device` and
`_jax` turn it into the ConfigError naming `backend.device`, the device asked for and the
cause, and `fco_ray.backends.choice.jax_loads` (`device: auto`) into a one-line note and the
NumPy engine. This module imports JAX only in `_jax` / `jax_device`.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from ...runtime.errors import ConfigError, short_repr
from . import DEVICES

INSTALL = "install the GPU extra: pip install -e '.[gpu]'"

from ...runtime import xla
from ...runtime.xla import ONE_THREAD, _xla_flags_trouble, known_good  # noqa: F401 (re-exported)

def _platforms(device: str) -> set[str]:
    return {"cuda", "gpu"} if device == "cuda" else {"cpu"}


def _jax_running() -> bool:
    """Whether JAX has started a backend in this process (its flags were then accepted)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def jax_trouble(device: str = "jax-cpu") -> str | None:
    """What in this environment stops JAX from running `device` ('jax-cpu' or 'cuda'), in
    one line; None where nothing does (JAX may still fail: `jax_device` says so)."""
    if "jax" not in sys.modules:
        try:
            spec = importlib.util.find_spec("jax")
        except (ImportError, ValueError) as e:
            return f"JAX cannot be found ({e})"
        if spec is None:
            return "JAX is not installed"
        where = list(spec.submodule_search_locations or [])
        if spec.origin is None or not where or not os.path.isdir(os.path.join(where[0], "_src")):
            # a namespace package (a folder named jax where JAX is not installed), or a
            # folder with an empty __init__.py that shadows the installed JAX
            return (f"the jax found on the path is {where[0] if where else spec.origin}, a "
                    "folder that is not JAX (on PYTHONPATH or in the working directory?)")
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        named = {p.strip().lower() for p in platforms.split(",") if p.strip()}
        if not named & _platforms(device):
            return (f"JAX_PLATFORMS={short_repr(platforms)} leaves JAX no "
                    f"{'GPU' if device == 'cuda' else 'CPU'} platform (unset it, or include "
                    f"{'cuda' if device == 'cuda' else 'cpu'})")
    if xla.DROPPED is not None:  # removed by xla.screen() at `import fco_ray`
        return xla.DROPPED[1]
    flags = os.environ.get("XLA_FLAGS", "").strip()
    if not known_good(flags) and not _jax_running():
        return _xla_flags_trouble(flags)
    return None


def _refuse(device: str | None, why: str) -> ConfigError:
    asked = f"{device!r} asked for" if device else "a JAX device (jax-cpu or cuda) asked for"
    return ConfigError(f"backend.device: {asked}, but {why}; fix the environment, or use "
                       "backend.device: cpu")


def _jax(device: str | None = None):
    if os.environ.get("OMP_NUM_THREADS") == "1" and "XLA_FLAGS" not in os.environ and "jax" not in sys.modules:
        # a process held to one thread (Ray sets OMP_NUM_THREADS=1 in a task or trial of one
        # CPU): XLA's CPU pool follows, so that trials side by side do not oversubscribe the
        # cores (read when JAX first loads in the process)
        os.environ["XLA_FLAGS"] = ONE_THREAD
    trouble = jax_trouble(device or "jax-cpu")
    if trouble == "JAX is not installed":
        raise ConfigError(f"backend.device needs JAX (not installed); {INSTALL}, or use "
                          "backend.device: cpu")
    if trouble is not None:
        raise _refuse(device, trouble)
    try:
        import jax

        jax.config.update("jax_enable_x64", True)  # the rules compute in float64
    except ImportError as e:
        raise ConfigError(f"backend.device needs JAX ({e}); {INSTALL}, or use backend.device: cpu") from None
    except Exception as e:  # noqa: BLE001 - a broken install: named, not a traceback
        raise _refuse(device, f"JAX does not load ({type(e).__name__}: {str(e)[:200]})") from None
    return jax


def jax_device(device: str):
    """The JAX device of `backend.device` ('cuda': the first GPU; 'jax-cpu': the CPU)."""
    if device not in DEVICES:
        raise ConfigError(f"backend.device: must be one of {list(DEVICES)} for the device "
                          f"path, got {device!r}")
    jax = _jax(device)
    platform = "gpu" if device == "cuda" else "cpu"
    try:
        return jax.devices(platform)[0]
    except Exception as e:  # noqa: BLE001 - RuntimeError, or JAX's bare AssertionError
        if device == "cuda":
            raise ConfigError(f"backend.device: 'cuda' asked for, but JAX finds no GPU "
                              f"({type(e).__name__}: {str(e)[:200]}); {INSTALL} on a machine with an NVIDIA "
                              "GPU, or use backend.device: cpu") from None
        raise _refuse(device, f"JAX offers no CPU device ({type(e).__name__}: {str(e)[:200]})") from None
