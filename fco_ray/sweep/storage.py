"""Tune's storage for one sweep: one live driver per sweep name, and room on its disk.

- `sweep_lock`: two sweeps of the same name in one storage directory would share
  `ray_results/NAME` (one `tuner.pkl`, one experiment state) and orphan each other's trials on
  `--resume`. The live driver holds an exclusive lock (`flock`) on `<storage>/.NAME.lock`,
  which also records its PID; a second driver is refused with that PID. The kernel drops the
  lock when its holder dies, so a killed sweep leaves no lock behind; if the lock is still
  held but the recorded driver is gone (a child process that inherited it outlived a killed
  driver), it is stale and taken over.
- `check_room` / `StorageGuard`: a full disk under Tune's writes truncates its experiment
  state and trials' checkpoints (a sweep that cannot resume). Before Ray starts, the storage
  must have `RESERVE_BYTES` free; while the sweep runs, the driver checks the free space at
  every Tune step and, below the reserve, stops the sweep the way a lost tracking store does
  (`on_step_end` raises): Tune's state stays whole and `--resume` finishes the sweep once
  space is freed.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from pathlib import Path

from ray import tune

from ..runtime.errors import ConfigError
from ..runtime.files import open_in_place
from ..runtime.limits import human

#: free bytes Tune's storage must keep: a step writes the experiment state and the trials'
#: checkpoints (kilobytes to a few MB each here), far less than this
RESERVE_BYTES = 256 * 2**20


class StorageFull(RuntimeError):
    """Tune's storage has less than the reserve free: the sweep stops, resumable."""


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_room(root: Path, reserve: int | None = None) -> None:
    """ConfigError (exit 2, before Ray starts) if `root` has less than the reserve free."""
    reserve = RESERVE_BYTES if reserve is None else reserve
    free = free_bytes(root)
    if free < reserve:
        raise ConfigError(f"--storage {root}: only {human(free)} free; a sweep keeps at least "
                          f"{human(reserve)} free for Tune's state and checkpoints (free space, "
                          "or give --storage on another disk)")


class StorageGuard(tune.Callback):
    """Stops the sweep (resumable) when Tune's storage runs low; see the module docstring."""

    def __init__(self, root: str, reserve: int | None = None):
        self.root, self.reserve = str(root), reserve

    def __reduce__(self):  # pickled with Tune's state: plain data only
        return (StorageGuard, (self.root, self.reserve))

    def on_step_end(self, iteration, trials, **info):
        reserve = RESERVE_BYTES if self.reserve is None else self.reserve
        try:
            free = free_bytes(Path(self.root))
        except OSError:
            return  # cannot tell (e.g. a remote storage URI): Tune's own errors remain
        if free < reserve:
            raise StorageFull(f"Tune's storage {self.root} has only {human(free)} free (the sweep "
                              f"keeps {human(reserve)} free so that its state stays whole)")


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def sweep_lock(root: Path, name: str):
    """Hold `<root>/.<name>.lock` while the sweep runs; ConfigError if a live driver holds it."""
    path = root / f".{name}.lock"
    try:
        fd = open_in_place(path, os.O_RDWR, 0o600)  # never through a planted link
    except OSError as e:
        raise ConfigError(f"--storage {root}: cannot create the sweep's lock file {path.name} "
                          f"({e.strerror or e})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise  # e.g. a file system without locks: let it fail loudly
            pid = _holder(path)
            if pid is None or _alive(pid):
                who = f"process {pid}" if pid is not None else "another process"
                raise ConfigError(f"sweep {name!r} is already running from this storage ({who} "
                                  f"holds {path}); wait for it to end (or stop it), or run this "
                                  "one with another name or --storage") from None
            # stale: the driver that wrote it is gone; a leftover child holds the lock
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
