"""A sweep run again under the same name says, before it starts, what happens to the earlier
run: a second MLflow parent run beside the first, Tune's new state beside the old one."""
from types import SimpleNamespace

from fco_ray.sweep.run import earlier_sweep
from fco_ray.tracking.store import Store
from fco_ray.tracking.sweeps import SweepLog


def test_a_second_run_of_a_sweep_is_announced(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    sweep = SimpleNamespace(name="quickstart", experiment="quickstart")
    state = tmp_path / "ray_results" / "quickstart"
    assert earlier_sweep(store, sweep, state) == []  # the first run: nothing to say

    first = SweepLog(store, "quickstart", "quickstart", "f1", "max", "name: quickstart\n", resume=False)
    first.finish(failed=False)
    state.mkdir(parents=True)
    (state / "experiment_state-2026-11-27_07-00-00.json").write_text("{}")
    lines = earlier_sweep(store, sweep, state)
    assert lines[0] == "note: sweep quickstart ran before; this run starts anew and keeps the earlier one:"
    assert f"already has its parent run {first.parent_id} (FINISHED); a second parent run is added" in lines[1]
    assert lines[2] == (f"  Tune's state of the earlier run stays in {state}, the new one is written "
                        "beside it; --resume resumes the newest")
    assert "--set name=NEW" in lines[3]
    # another name in the same experiment and storage: no note
    assert earlier_sweep(store, SimpleNamespace(name="other", experiment="quickstart"),
                         tmp_path / "ray_results" / "other") == []
