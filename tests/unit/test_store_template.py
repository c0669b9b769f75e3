"""New SQLite stores start as a copy of one store MLflow has set up (fco_ray/tracking/template.py):
the copy is a working store, a store that holds tables is never replaced, the template holds no
experiment of a store made after it, and without a writable cache MLflow sets stores up itself."""
import shutil
import sqlite3
from contextlib import closing

import pytest

from fco_ray.tracking import template
from fco_ray.tracking.store import Store


def experiments(db) -> list[str]:
    with closing(sqlite3.connect(db)) as c:
        return sorted(name for (name,) in c.execute("select name from experiments"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache directory of this test's own, holding a copy of the session's template (made
    here if there is none yet: one store's migrations)."""
    real = template.template_path()
    if not real.is_file():
        Store(f"sqlite:///{tmp_path / 'seed.db'}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mine = template.template_path()
    if real.is_file():
        mine.parent.mkdir(parents=True)
        shutil.copy2(real, mine)
    else:  # the user's cache is not writable here: this test's own, made by one setup
        Store(f"sqlite:///{tmp_path / 'seed-here.db'}")
    assert mine.is_file()
    return mine


def test_a_new_store_is_a_copy_of_the_template_and_a_used_one_is_kept(tmp_path, cache, monkeypatch):
    copies = []
    real_copy = template.copy_database
    monkeypatch.setattr(template, "copy_database", lambda s, t: (copies.append((s, t)), real_copy(s, t)))
    db = tmp_path / "a" / "mlflow.db"
    store = Store(f"sqlite:///{db}")
    assert copies == [(cache, db)]
    run = store.client.create_run(store.experiment_id("x"))
    store.log_rows(run.info.run_id, [{"round": 0, "f1": 0.5}, {"round": 1, "f1": 0.75}])
    again = Store(f"sqlite:///{db}")  # a used store: opened, not replaced
    assert len(copies) == 1
    assert [m.value for m in again.client.get_metric_history(run.info.run_id, "f1")] == [0.5, 0.75]
    assert experiments(db) == ["Default", "x"] and "x" not in experiments(cache)


def test_new_means_no_table_yet(tmp_path):
    db = tmp_path / "m.db"
    assert template.is_new(db)
    sqlite3.connect(db).close()  # what the store check leaves: an empty file
    assert template.is_new(db)
    with closing(sqlite3.connect(db)) as c:
        c.execute("create table t (x)")
    assert not template.is_new(db)


@pytest.mark.slow  # one store set up by MLflow's migrations (2-7 s)
def test_without_a_writable_cache_mlflow_sets_the_store_up(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "/dev/null/cache")  # no directory can be made there
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert store.experiment_id("x") is not None
    assert experiments(tmp_path / "mlflow.db") == ["Default", "x"]
    assert not template.template_path().exists()


def test_a_folder_named_with_uri_characters(tmp_path, cache):
    db = tmp_path / "a?b#c%20d" / "mlflow.db"  # `?`, `#` and `%` mean something in an SQLite URI
    assert template.is_new(db) and template.start_from_template(db)
    assert not template.is_new(db) and template._database(db)
    assert not (tmp_path / "a").exists()  # nothing written where the unquoted URI points


@pytest.mark.slow  # one store set up by MLflow's migrations (2-7 s)
def test_a_broken_template_leaves_the_setup_to_mlflow(tmp_path, cache):
    cache.write_bytes(b"not a database" * 100)
    db = tmp_path / "mlflow.db"
    store = Store(f"sqlite:///{db}")
    assert store.experiment_id("x") is not None
    assert experiments(db) == ["Default", "x"]
    assert template._database(cache)  # the broken template was replaced by this store's setup
