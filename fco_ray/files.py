"""The one error path for reading user-named files (configs, dashboards, data).

Whatever is wrong with a file the user gave -- missing, a directory, unreadable, not
UTF-8 text, too large, or not in the expected format -- becomes one `ConfigError` naming
the path and the problem (the CLI's exit code 2), never a traceback from deep inside a
reader library.
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError

MAX_TEXT_BYTES = 16 * 2**20  # a config or dashboard is kilobytes; refuse to read a huge one


def readable_file(path: str | os.PathLike, what: str = "file") -> Path:
    """`path` as a Path if it names an existing regular file this process may read."""
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as e:  # e.g. a parent directory without search permission
        raise ConfigError(f"{path}: {what} cannot be accessed ({e.strerror or e})") from None
    if path.is_dir():
        raise ConfigError(f"{path}: {what} is a directory, not a file")
    if not path.is_file():
        raise ConfigError(f"{path}: {what} is not a regular file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{path}: {what} is not readable (permission denied)")
    return path


def read_text(path: str | os.PathLike, what: str = "file", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of `path` (a byte order mark is dropped)."""
    path = readable_file(path, what)
    size = path.stat().st_size
    if size > max_bytes:
        raise ConfigError(f"{path}: {what} is {size:,} bytes; at most {max_bytes:,} are read")
    with reading(path, what):
        data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: {what} is not UTF-8 text (byte 0x{data[e.start]:02x} "
                          f"at offset {e.start})") from None


@contextmanager
def reading(path: str | os.PathLike, what: str = "file", expected: str | None = None,
            also: tuple[type[BaseException], ...] = ()):
    """Turn an error raised while a reader library parses `path` into a ConfigError naming
    the file; `expected` (e.g. "an HDF5 file") says what the file should have been, `also`
    adds the library's own exception types. ConfigErrors raised inside pass through."""
    try:
        yield
    except ConfigError:
        raise
    except PermissionError:
        raise ConfigError(f"{path}: {what} is not readable (permission denied)") from None
    except (OSError, ValueError, KeyError, TypeError, EOFError, *also) as e:
        # h5py, nibabel, gzip, numpy: a file that is not what it claims raises one of these
        hint = f"; expected {expected}" if expected else ""
        raise ConfigError(f"{path}: {what} cannot be read ({type(e).__name__}: "
                          f"{str(e)[:300]}){hint}") from None


def check_private_tree(root: str | os.PathLike, what: str) -> None:
    """Refuse `root` unless only this user could have written anything in it: `root` and
    everything under it owned by this user, writable by no group or other user, no
    symbolic links; each directory above it owned by this user or root and writable by no
    one else (unless sticky, like /tmp, where others cannot replace our entries).

    The trust rule for state that a library loads by unpickling (Ray Tune's saved
    experiment, restored by `fco-ray sweep --resume`): unpickling runs code, so a file
    that another user could have planted must never be loaded. It cannot tell files the
    user copied from elsewhere (an archive) from their own: resume only your own runs.
    """
    root = Path(root).resolve()
    uid = os.geteuid()

    def refuse(path: Path, why: str):
        raise ConfigError(f"{what}: refusing to load {path}: {why}; it is restored by "
                          f"unpickling, which runs code, so only a directory that no one but "
                          f"you can write is trusted")

    def others_write(st: os.stat_result) -> bool:
        # group write is harmless for a user-private group (umask 002 systems)
        group = st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid)
        return bool(group or st.st_mode & stat.S_IWOTH)

    for parent in root.parents:
        st = parent.stat()
        if st.st_uid not in (uid, 0):
            refuse(root, f"its parent directory {parent} belongs to user id {st.st_uid}")
        if others_write(st) and not st.st_mode & stat.S_ISVTX:
            refuse(root, f"its parent directory {parent} is writable by other users")
    for folder, dirs, files in os.walk(root):
        for name in [None, *dirs, *files]:
            path = Path(folder) if name is None else Path(folder) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                refuse(path, "it is a symbolic link")
            if st.st_uid != uid:
                refuse(path, f"it belongs to user id {st.st_uid}, not to you ({uid})")
            if others_write(st):
                refuse(path, f"it is writable by other users (mode {stat.filemode(st.st_mode)})")


def _private_group(gid: int) -> bool:
    """Whether group `gid` is this user's own: their primary group with no other members."""
    import grp
    import pwd

    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
        return gid == os.getegid() and set(grp.getgrgid(gid).gr_mem) <= {me}
    except KeyError:
        return False
