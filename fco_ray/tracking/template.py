"""New SQLite stores as copies of one store that MLflow has set up.

MLflow sets up a new SQLite store by running its schema migrations: 3.5-3.7 s in a fresh
process on 2 cores, against 1.1-1.6 s for a copy (benchmarks/results/mlflow_new_store.md).
fco-ray keeps one store just set up (no experiment of its own yet) per MLflow release and set
of migrations in the user's cache directory (`template_path`): the first new store the user
opens makes it, and later new stores start as a copy of it (SQLite's backup API). MLflow then
finds them at its latest revision and skips the migrations. Where the cache directory cannot
be read or written, MLflow sets up each store itself, as without it.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import quote


def template_dir() -> Path:
    """`<cache>/fco-ray/mlflow`, `<cache>` being XDG_CACHE_HOME or ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fco-ray" / "mlflow"


def template_path() -> Path:
    """`template_dir()/template-<key>.db`, the key naming MLflow's and SQLAlchemy's versions
    and MLflow's migration files: a new MLflow, or a new migration, makes a new one."""
    import mlflow
    import sqlalchemy

    versions = Path(mlflow.__file__).parent / "store" / "db_migrations" / "versions"
    names = sorted(p.name for p in versions.glob("*.py")) if versions.is_dir() else []
    key = hashlib.sha256(repr((mlflow.__version__, sqlalchemy.__version__, names)).encode()).hexdigest()[:16]
    return template_dir() / f"template-{key}.db"


def _read_only(db: Path) -> str:
    """An SQLite URI opening `db` read-only (the path quoted: `?`, `#` and `%` are URI syntax)."""
    return f"file:{quote(str(db), safe='/')}?mode=ro"


def is_new(db: Path) -> bool:
    """Whether `db` holds no table yet (absent, empty, or created empty by a check)."""
    if not db.is_file() or db.stat().st_size == 0:
        return True
    try:
        with closing(sqlite3.connect(_read_only(db), uri=True)) as connection:
            return connection.execute("select count(*) from sqlite_master").fetchone()[0] == 0
    except sqlite3.Error:
        return False  # not ours to judge: MLflow says what is wrong with it


def _database(path: Path) -> bool:
    """Whether `path` opens as an SQLite database with tables."""
    try:
        with closing(sqlite3.connect(_read_only(path), uri=True)) as connection:
            return connection.execute("select count(*) from sqlite_master").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def copy_database(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(_read_only(source), uri=True)) as src, \
            closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def start_from_template(db: Path) -> bool:
    """Give the new database `db` the tables of the template if there is one; whether it did.
    Call it where no other process sets `db` up (`fco_ray.tracking.store`'s setup lock)."""
    if not is_new(db):
        return False
    try:
        template = template_path()
    except RuntimeError:  # no home directory
        return False
    if not template.is_file():
        return False
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        copy_database(template, db)
        return True
    except (OSError, sqlite3.Error):
        try:
            if db.is_file():
                os.truncate(db, 0)  # nothing half copied: MLflow sets the store up itself
            if not _database(template):
                template.unlink()  # broken: the store MLflow sets up now becomes the template
        except OSError:
            pass
        return False


def keep_as_template(db: Path) -> None:
    """Keep `db`, a store MLflow has just set up, as the template if there is none yet. Made
    beside it and moved in whole: another process may be making it too."""
    try:
        template = template_path()
    except RuntimeError:  # no home directory
        return
    if template.exists():
        return
    temp = template.with_name(f"{template.stem}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        temp.unlink(missing_ok=True)
        copy_database(db, temp)
        os.replace(temp, template)
    except (OSError, sqlite3.Error):
        try:
            temp.unlink(missing_ok=True)
        except OSError:
            pass
