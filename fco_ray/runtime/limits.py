"""Memory bounds, checked from the configuration before anything is allocated.

Every problem's parameter model estimates the memory its build needs from the parameters
alone (`ProblemParams.estimated_bytes()`: {part naming its keys: bytes}, or None when
unknown); `check_memory` compares the total with the memory available and raises a
`ConfigError` (exit code 2) naming the largest part -- and so the key to change --, the
estimate and what is available. `dim: 200000000` thus fails in milliseconds with a
message instead of minutes later with a MemoryError, or by filling the machine.

The estimates are lower bounds (the data plus the copies the builder is known to make,
model copies at least), so a configuration that fits is never refused.
"""
from __future__ import annotations

from pathlib import Path

from .errors import ConfigError

GIB = 2**30


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, if it has one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        return max(int(limit) - used, 0)
    except (OSError, ValueError):
        return None


def available_bytes() -> int:
    """Memory this process can still allocate without swapping: the kernel's MemAvailable,
    or less under a cgroup limit or an address-space limit (`ulimit -v`)."""
    try:
        import psutil

        free = int(psutil.virtual_memory().available)
    except ImportError:  # psutil is optional: /proc/meminfo on Linux otherwise
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        free = int(meminfo["MemAvailable"].split()[0]) * 1024
    room = _cgroup_room()
    free = free if room is None else min(free, room)
    space = _address_space_room()
    return free if space is None else min(free, space)


def _address_space_used() -> int:
    """This process's virtual memory size in bytes (Linux /proc/self/statm; 0 elsewhere)."""
    try:
        import resource

        pages = int(Path("/proc/self/statm").read_text().split()[0])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError, ImportError):
        return 0


def _address_space_room() -> int | None:
    """Address space left under `ulimit -v` (RLIMIT_AS), if there is such a limit: an
    allocation past it fails with MemoryError however much memory the machine has free."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, ValueError, OSError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    return max(soft - _address_space_used(), 0)


def human(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} B"


def check_memory(params, available: int | None = None) -> None:
    """Raise ConfigError if the problem `params` would need more memory than is available."""
    parts = params.estimated_bytes()
    if not parts:
        return
    total = sum(parts.values())
    available = available_bytes() if available is None else available
    if total > available:
        part, size = max(parts.items(), key=lambda item: item[1])
        raise ConfigError(f"problem {params.name!r} needs about {human(total)} of memory, more "
                          f"than the {human(available)} available; the largest part is {part}: "
                          f"{human(size)}")


def check_declared(path, what: str, declared: int, detail: str, available: int | None = None) -> None:
    """Raise ConfigError (naming the file) if a data file's headers declare arrays of
    `declared` bytes in all, more than the memory available: checked before anything is
    read, so a small file declaring a huge array (damaged or hostile) is an error naming
    it, never a bare MemoryError. `detail` says which array (e.g. its shape and type)."""
    available = available_bytes() if available is None else available
    if declared > available:
        try:
            size = f"; the file itself is {human(Path(path).stat().st_size)}"
        except OSError:
            size = ""
        raise ConfigError(f"{path}: {what} declares {detail}: {human(declared)} in memory, more "
                          f"than the {human(available)} available{size} (a damaged file, or "
                          "not the data it claims to be)")
