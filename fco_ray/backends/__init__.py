"""Where client work runs: `local` (in-process, vectorized; or a device, whole rounds
compiled) or `ray` (Ray actors). `registry.BACKENDS` lists them with their config models."""
from .local import LocalBackend
from .registry import BACKENDS, make_backend

__all__ = ["BACKENDS", "LocalBackend", "make_backend"]
