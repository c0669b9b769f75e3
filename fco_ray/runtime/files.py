"""Reading user-named files: the one error path for files (configs, dashboards, data),
the bounded safe YAML loader and `--set` overrides.

Whatever is wrong with a file the user gave -- missing, a directory, unreadable, not
UTF-8 text, too large, not valid or hostile YAML, or not in the expected format -- becomes
one `ConfigError` naming the path and the problem (the CLI's exit code 2), never a
traceback from deep inside a reader library.

Light on purpose (PyYAML only): the CLI reads and checks its files with these before it
imports anything heavy, so a missing file or a YAML error is reported at once.
"""
from __future__ import annotations

import contextlib
import copy
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, short_repr

MAX_TEXT_BYTES = 16 * 2**20  # a config or dashboard is kilobytes; refuse to read a huge one


def readable_file(path: str | os.PathLike, what: str = "file") -> Path:
    """`path` as a Path if it names an existing regular file this process may read."""
    path = Path(path).expanduser()
    try:
        path.stat()
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


@contextlib.contextmanager
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


def path_inside(folder: str | os.PathLike, name, what: str = "file") -> Path:
    """`folder / name`, if `name` is a relative path that stays strictly inside `folder` --
    also once the symbolic links already on disk are followed --, else a ConfigError.

    The one gate for every path fco-ray writes or deletes that comes from a file, an artifact
    or a name (a report's manifest, an MLflow tag, a sweep name): an absolute path, `..`, an
    empty name or a link out of the folder can never make it act on a file elsewhere (a
    cloned repository may carry a hostile `reports/<sweep>/report.json`)."""
    text = os.fspath(name) if isinstance(name, (str, os.PathLike)) else None
    why = None
    if not text or "\x00" in text:
        why = "is not a file name"
    else:
        rel = Path(text)
        if rel.is_absolute() or rel.drive:
            why = "is an absolute path"
        elif ".." in rel.parts:
            why = "goes up with '..'"
        else:
            root = Path(os.path.realpath(folder))
            target = Path(os.path.realpath(Path(folder) / rel))
            if root not in target.parents:
                why = (f"resolves to {target}" + (" (through a symbolic link)" if target != root
                                                  else "") + ", not a path inside it")
    if why is not None:
        raise ConfigError(f"{folder}: {what} {short_repr(name)} {why}; refusing to write or "
                          "delete anything outside the folder")
    return Path(folder) / rel


def check_no_links(folder: str | os.PathLike, what: str = "folder") -> Path:
    """`folder` if no folder on its way is a symbolic link, else a ConfigError saying where
    the link leads. Checked: each part of a relative path (or of an absolute one inside the
    working directory) from the working directory down, else the folder itself.

    The gate for folders fco-ray writes into by a name the user did not choose as a target
    (a cloned repository can ship `reports` as a link to any folder, and choose the sweep
    name): what is written lands in the folder the user sees, never behind a link."""
    folder = Path(folder)
    base, rel = Path(), folder
    if folder.is_absolute():
        try:
            base, rel = Path.cwd(), folder.relative_to(Path.cwd())
        except (ValueError, OSError):
            base, rel = folder.parent, Path(folder.name)
    current = base
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            real = Path(os.path.realpath(folder))
            raise ConfigError(f"{what} {folder}: {current} is a symbolic link to "
                              f"{os.path.realpath(current)}; refusing to write through it (a "
                              "cloned repository may carry such a link): remove the link, or "
                              f"give the folder itself with --out {real}")
    return folder


@contextlib.contextmanager
def replacing(target: str | os.PathLike):
    """The one safe writer: yields a new, empty temporary file in `target`'s folder (same
    suffix, so writers that go by it -- `savefig`, `np.savez` -- keep working); once the
    block ends without an error it replaces `target` (os.replace). An existing `target` -- a
    symbolic link or a hard link to a file elsewhere, as a cloned repository can ship -- is
    swapped out, never written into or followed, so nothing but the name `target` changes;
    on an error the temporary file is removed and `target` is left as it was.

    Every file fco-ray and the repository's scripts (`benchmarks/`, `results/`) write goes
    through this (`write_file`, `write_replacing`, `append_file`; tests/e2e/
    test_reliability_five.py checks no other write is left)."""
    target = Path(target)
    temp = target.parent / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp{target.suffix}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # never an existing file
    os.close(fd)
    try:
        yield temp
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_file(target: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `target` through `replacing`."""
    target = Path(target)
    with replacing(target) as temp:
        temp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return target


def write_replacing(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy `source` to `target` through `replacing`: an existing `target` -- a hard link to
    a file elsewhere, a symbolic link -- is swapped out, never written into."""
    with replacing(target) as temp, open(temp, "wb") as out, open(source, "rb") as src:
        while chunk := src.read(2**20):
            out.write(chunk)


def open_in_place(target: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """`os.open(target, flags | O_CREAT | O_NOFOLLOW)` for the few files written where they
    are (appended records, a lock file, which must keep its inode): a symbolic link at
    `target`, or a file with another hard link (a file that is also elsewhere), is refused
    with a ConfigError, never written into."""
    target = Path(target)
    try:
        fd = os.open(target, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError:
        if target.is_symlink():
            raise ConfigError(f"{target} is a symbolic link to {os.path.realpath(target)}; "
                              "refusing to write through it (a cloned repository may carry "
                              "such a link): remove the link") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        raise ConfigError(f"{target} is not a plain file of its own ({st.st_nlink} hard links); "
                          "refusing to write into a file that is also elsewhere: remove it")
    return fd


def append_file(target: str | os.PathLike, text: str) -> Path:
    """Append `text` to `target` (created if missing) where a record grows line by line (a
    benchmark's progress), through `open_in_place`: never through a link."""
    fd = open_in_place(target, os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(text)
    return Path(target)


MAX_CONFIG_BYTES = 2**20  # a config file is kilobytes
MAX_ALIAS_NODES = 100_000  # nodes YAML aliases may add by expansion (a config has hundreds)
_MERGE = "tag:yaml.org,2002:merge"


def _expanded_size(node, memo: dict) -> int:
    """Nodes under `node` counting every alias as a copy (memoized: aliases share nodes)."""
    if id(node) not in memo:
        if isinstance(node, yaml.SequenceNode):
            memo[id(node)] = 1 + sum(_expanded_size(c, memo) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            memo[id(node)] = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo)
                                     for k, v in node.value)
        else:
            memo[id(node)] = 1
    return memo[id(node)]


class _ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (plain data only: never builds Python objects), plus:
    - aliases are bounded: all of them together may expand to at most MAX_ALIAS_NODES
      nodes, and an alias inside its own anchor (a recursive structure) is refused, so a
      few hundred bytes cannot become gigabytes ("billion laughs") anywhere downstream;
      the error names the alias's line;
    - a key given twice in one mapping is an error rather than silently the last value
      (keys brought in by a merge key `<<:` may be overridden, as YAML specifies)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._expanded, self._sizes, self._open = 0, {}, set()

    def compose_node(self, parent, index):
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent):
            if anchor in self._open:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{anchor} is inside its own anchor (a recursive "
                    "structure)", event.start_mark)
            if anchor in self.anchors:
                self._expanded += _expanded_size(self.anchors[anchor], self._sizes)
                if self._expanded > MAX_ALIAS_NODES:
                    raise yaml.composer.ComposerError(
                        None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                        f"(at alias *{anchor}); a config needs far fewer", event.start_mark)
            return super().compose_node(parent, index)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {short_repr(key)} (each key once per mapping)",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads `1e-3` as text (its floats need a dot) and `1:20` as the base-60
# number 80. A config means neither: `1e-3` is a float as in YAML 1.2, and a base-60 number
# is an error naming its line (quote it if it is text, e.g. a time of day).
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _not_base_60(construct):
    def checked(loader, node):
        if ":" in str(node.value):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is a base-60 number in YAML 1.1 (= "
                f"{construct(loader, node)}); write the number itself, or quote it if it is text",
                node.start_mark)
        return construct(loader, node)
    return checked


_ConfigLoader.add_constructor("tag:yaml.org,2002:int",
                              _not_base_60(yaml.constructor.SafeConstructor.construct_yaml_int))
_ConfigLoader.add_constructor("tag:yaml.org,2002:float",
                              _not_base_60(yaml.constructor.SafeConstructor.construct_yaml_float))


def _yaml_error(path: Path, e: yaml.YAMLError) -> str:
    """One line: file:line:column, what is wrong and, for tags, what is allowed."""
    mark = getattr(e, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    message = f"{where}: invalid YAML: {problem}" + (f" ({context})" if context else "")
    if "constructor for the tag" in problem:
        message += "; a config holds plain data only (mappings, lists, strings, numbers, booleans)"
    return message


def parse_yaml(text: str, path: str | Path = "<string>") -> Any:
    """Plain data from YAML text with the bounded, safe loader above."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(Path(path), e)) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None


def load_yaml(path: str | Path) -> dict:
    """Read a YAML config file through the one file error path (fco_ray.runtime.files) and the
    bounded safe loader (no code, no Python objects, aliases bounded, no duplicate keys)."""
    path = Path(path)
    data = parse_yaml(read_text(path, "config file", MAX_CONFIG_BYTES), path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def apply_overrides(raw: dict, assignments: list[str]) -> dict:
    """Apply `key.path=value` overrides (values parsed as YAML scalars) to a nested dict.

    A value YAML would read as a one-line block mapping -- `sqlite:///:memory:` ends in
    `key:` -- is taken as the text it is (a mapping is written `{a: 1}`)."""
    out = copy.deepcopy(raw)  # plain data (a YAML round trip took seconds for a 1 MB file)
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"--set expects key.path=value, got {short_repr(item)}")
        path, text = item.split("=", 1)
        try:
            value = parse_yaml(text, f"--set {path}")
        except ConfigError as e:
            raise ConfigError(f"--set {path}: cannot parse value {short_repr(text)}: {e}") from None
        if isinstance(value, dict) and not text.lstrip().startswith("{"):
            value = text.strip()
        set_key(out, path, value, "--set")
    return out


def set_key(tree: dict, path: str, value, what: str) -> None:
    """Set the dotted key `path` (e.g. `algorithm.client_lr`) of the nested dict `tree`;
    `what` says where the key came from in errors (`--set`, a grid key of the API)."""
    keys = path.strip().split(".") if isinstance(path, str) else None
    if keys is None or not all(k.strip() for k in keys):  # `a..b`, `.a`, `a.`: never repaired
        example = "algorithm.client_lr=0.01" if what == "--set" else "algorithm.client_lr"
        raise ConfigError(f"{what} {short_repr(path)}: a key path is names joined by single "
                          f"dots (e.g. {example}); this one has an empty part")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{what} {path}: {k!r} is not a mapping")
    node[keys[-1]] = value



#: MLflow store URI schemes fco-ray accepts (a bare word would silently become a file store
#: directory; MLflow 3 refuses `file://` stores itself: its file store is in maintenance mode)
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
#: the Python module SQLAlchemy loads for a database URI `scheme+driver://` (first: no driver)
DB_DRIVERS = {"postgresql": "psycopg2", "postgresql+psycopg2": "psycopg2",
              "postgresql+psycopg": "psycopg", "postgresql+pg8000": "pg8000",
              "mysql": "MySQLdb", "mysql+mysqldb": "MySQLdb", "mysql+pymysql": "pymysql",
              "mysql+mysqlconnector": "mysql.connector", "mssql": "pyodbc",
              "mssql+pyodbc": "pyodbc", "mssql+pymssql": "pymssql"}


def check_tracking_uri(uri: str) -> str:
    """`uri` if it names an MLflow store that keeps what is logged (ValueError otherwise):
    a known scheme; for SQLite a file (`sqlite:///PATH`), never an in-memory database that
    would lose every run at exit; for a database server, its driver importable."""
    import importlib.util

    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    if scheme.split("+", 1)[0] not in TRACKING_SCHEMES or len(uri) > 4096:
        hint = (" (MLflow 3 no longer opens file stores: use sqlite:///PATH/mlflow.db)"
                if scheme == "file" else "")
        raise ValueError(f"tracking URI {short_repr(uri)} is not an MLflow store URI{hint}; use one "
                         f"of the schemes {list(TRACKING_SCHEMES)}, e.g. sqlite:///PATH/mlflow.db "
                         "or http://127.0.0.1:5000")
    if scheme == "sqlite":
        path, _, query = uri[len("sqlite:"):].partition("?")
        if path in ("", "//", "///") or ":memory:" in path or "mode=memory" in query:
            raise ValueError(f"tracking URI {short_repr(uri)} is an in-memory SQLite database: "
                             "nothing logged would be kept; give a file, e.g. "
                             "sqlite:///mlflow.db (relative) or sqlite:////abs/path/mlflow.db")
        if not path.startswith("///"):
            raise ValueError(f"tracking URI {short_repr(uri)}: a SQLite file needs three slashes "
                             f"(sqlite:///{path.lstrip('/')} for a path relative to the working "
                             "directory, four for an absolute one)")
    module = DB_DRIVERS.get(scheme)
    if module is not None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"tracking URI {short_repr(uri)}: its database driver (Python module "
                             f"{module!r}) is not installed in this environment; install it, "
                             "or use sqlite:///PATH/mlflow.db or an MLflow server http://...")
    return uri

def check_plain_name(name: str, what: str = "name") -> str:
    """`name` if it holds no control character (NUL, newline, tab, ...): SQLite keeps a name
    with a NUL cut at the NUL, so MLflow could not find it again, and no shell can type it."""
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7f), None) if isinstance(name, str) else None
    if bad is not None:
        raise ValueError(f"{what} {short_repr(name)} holds the control character {bad!r} "
                         f"(at offset {name.index(bad)}); names are printable text")
    return name


#: a sweep's name: a directory of Tune's storage, a tag value in MLflow search filters
SWEEP_NAME_PATTERN, MAX_SWEEP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", 128


def check_sweep_key(key: str, what: str = "sweep") -> str:
    """`key` if it can name a sweep (or a parent run id); ConfigError otherwise, quoting it
    in a bounded length. A quote in a name would break MLflow's search filter; no sweep can
    have one (the sweep file's `name` follows the same rule)."""
    # fullmatch: with re.match, `$` also matches before a final newline ("p3\n" passed)
    if not isinstance(key, str) or len(key) > MAX_SWEEP_NAME or not re.fullmatch(SWEEP_NAME_PATTERN, key):
        raise ConfigError(f"{what}: no sweep can be named {short_repr(key)}: sweep names are letters, "
                          f"digits, '_', '.' and '-' (at most {MAX_SWEEP_NAME} characters, starting "
                          "with a letter or digit)")
    return key


def check_sqlite_store(db: str | os.PathLike, write: bool) -> None:
    """ConfigError (exit 2) unless `db`, if it exists, is an SQLite file MLflow can use: a
    regular file (not a link to /dev/null, not a directory), writable with its directory
    when fco-ray will `write` (SQLite adds its journal beside it; an immutable or read-only
    file otherwise gives pages of tracebacks), and MLflow's own (another application's
    database fails later with "no such column")."""
    import sqlite3

    db = Path(db)
    if not (db.exists() or db.is_symlink()):
        return
    real = Path(os.path.realpath(db))
    shown = f"{db}" + (f" (a link to {real})" if real != db.absolute() else "")
    if not real.is_file():
        kind = "a directory" if real.is_dir() else "missing" if not real.exists() else "not a regular file"
        raise ConfigError(f"MLflow tracking database {shown}: {kind}; give the path of an SQLite file "
                          "(sqlite:///PATH/mlflow.db)")
    if write and not os.access(real, os.R_OK | os.W_OK):
        raise ConfigError(f"MLflow tracking database {shown} is read-only (no write permission, or "
                          "an immutable file); make it writable, or point tracking.uri elsewhere")
    if write and not os.access(real.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"MLflow tracking database {shown}: its directory {real.parent} is read-only; "
                          "SQLite writes its journal beside the database")
    try:
        with contextlib.closing(sqlite3.connect(f"{real.as_uri()}?mode=ro", uri=True,
                                                timeout=10)) as connection:
            tables = {row[0] for row in connection.execute(
                "select name from sqlite_master where type = 'table'")}
            version = (connection.execute("select version_num from alembic_version").fetchone()
                       if "alembic_version" in tables else None)
    except sqlite3.Error as e:
        if write:
            return  # not SQLite at all: the store check says it cannot be opened
        raise ConfigError(f"MLflow tracking database {shown} cannot be read as an SQLite database "
                          f"({e}); give the path of the store the sweep logged to") from None
    if tables and not {"experiments", "runs", "alembic_version"} <= tables:
        raise ConfigError(f"MLflow tracking database {shown} is not an MLflow store: it holds "
                          f"another application's tables {short_repr(sorted(tables))}; give "
                          "another path")
    if not tables and not write:  # MLflow would write its schema into it: reading never does
        raise ConfigError(f"MLflow tracking database {shown} is empty (no MLflow tables: nothing "
                          "was ever logged there); give the store the sweep logged to")
    known = _mlflow_schema_revisions()
    if version is not None and known and version[0] not in known:
        raise ConfigError(f"MLflow tracking database {shown} has the schema revision {short_repr(version[0])}, "
                          f"which the MLflow installed here ({_mlflow_version()}) does not know: "
                          "it was written by a newer MLflow, and `mlflow db upgrade` cannot go "
                          "back; use that newer MLflow (pip install -U mlflow), or another store")


def _mlflow_schema_revisions() -> set[str]:
    """The schema revisions the installed MLflow knows (its migration scripts are named
    `<revision>_<what>.py`), found without importing MLflow; empty if not found."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("mlflow")
    except (ImportError, ValueError):
        return set()
    if spec is None or not spec.submodule_search_locations:
        return set()
    versions = Path(list(spec.submodule_search_locations)[0]) / "store" / "db_migrations" / "versions"
    try:
        return {f.name.split("_", 1)[0] for f in versions.iterdir() if f.suffix == ".py"
                and "_" in f.name and not f.name.startswith("_")}
    except OSError:
        return set()


def _mlflow_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mlflow {version('mlflow')}"
    except PackageNotFoundError:
        return "mlflow"


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
