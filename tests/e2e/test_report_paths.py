"""A report never writes or deletes outside its own folder, whatever a planted file, an
artifact or a name says (issue: a `reports/<sweep>/report.json` listing `/abs/path` made
`fco-ray report` delete that file). Every case plants the hostile input, runs the report,
and checks that the file outside still exists, unchanged."""
import json
import os

import pytest

from fco_ray import ConfigError
from fco_ray.cli import main
from fco_ray.report import render_report, report_after_sweep
from fco_ray.runtime.files import path_inside


#: the toy sweep of conftest's `store`, one rate pair (2 algorithms x 2 seeds): reports render fast
STORE_GRID = {"client_lrs": [0.01], "server_lrs": [1.0]}


@pytest.fixture
def victim(tmp_path):
    """A file outside every report folder: it must survive every test."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("keep me")
    yield path
    assert path.read_text() == "keep me"


def plant(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps({"parent_run_id": "x", "files": files}))


@pytest.mark.parametrize("listed", ["abs", "dotdot", "nested_dotdot", "not_a_list"])
@pytest.mark.parametrize("how", ["default_folder", "out", "after_sweep"])
def test_planted_manifest_never_deletes_outside_the_folder(store, victim, tmp_path, monkeypatch,
                                                           capsys, listed, how):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "reports" / "toy" if how != "out" else tmp_path / "mine"
    name = {"abs": str(victim), "dotdot": f"../../elsewhere/{victim.name}",
            "nested_dotdot": f"images/../../../elsewhere/{victim.name}", "not_a_list": str(victim)}[listed]
    plant(folder, name if listed == "not_a_list" else ["index.html", name])
    if how == "after_sweep":  # `fco-ray sweep` renders its report: a failure is a warning
        assert report_after_sweep(store["pid"], store["uri"], echo=lambda line: None) is None
    else:
        argv = ["report", "toy", "--tracking-uri", store["uri"]]
        assert main(argv + (["--out", str(folder)] if how == "out" else [])) == 2
        err = capsys.readouterr().err
        assert err.startswith("fco-ray: error: ") and err.count("\n") == 1
        assert "report.json" in err
    assert (folder / "report.json").is_file()  # refused before anything was removed


def test_link_out_of_the_folder_is_never_written_through(store, victim, tmp_path):
    out = tmp_path / "out"
    render_report("toy", tracking_uri=store["uri"], out_dir=out)
    (out / "index.html").unlink()
    os.symlink(victim, out / "index.html")  # writing the page would overwrite the victim
    with pytest.raises(ConfigError, match="symbolic link"):
        render_report("toy", tracking_uri=store["uri"], out_dir=out)
    (out / "index.html").unlink()
    os.symlink(victim.parent, out / "images")  # a folder link: images/<x> would land elsewhere
    (out / "report.json").write_text(json.dumps({"parent_run_id": "x",
                                                 "files": ["images/precious.txt"]}))
    with pytest.raises(ConfigError, match="not a path inside it"):
        render_report("toy", tracking_uri=store["uri"], out_dir=out)


def test_a_planted_report_json_link_is_refused(store, victim, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = victim.parent / "report.json"
    elsewhere.write_text(json.dumps({"parent_run_id": "x", "files": [victim.name]}))
    os.symlink(elsewhere, out / "report.json")
    with pytest.raises(ConfigError, match="symbolic link"):
        render_report("toy", tracking_uri=store["uri"], out_dir=out)


def test_default_folder_must_stay_under_reports(store, victim, tmp_path, monkeypatch):
    """`reports/<sweep>` planted as a link to another folder is refused, not written into."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    os.symlink(victim.parent, tmp_path / "reports" / "toy")
    with pytest.raises(ConfigError, match="sweep name 'toy' resolves to"):
        render_report("toy", tracking_uri=store["uri"])
    assert [p.name for p in victim.parent.iterdir()] == ["precious.txt"]  # nothing written there


def test_a_clean_rerender_still_replaces_its_own_files(store, tmp_path):
    out = tmp_path / "out"
    render_report("toy", tracking_uri=store["uri"], out_dir=out)
    (out / "stale.png").write_text("x")
    manifest = json.loads((out / "report.json").read_text())
    manifest["files"].append("stale.png")  # as if an earlier rendering wrote it
    (out / "report.json").write_text(json.dumps(manifest))
    (out / "mine.txt").write_text("the user's")
    render_report("toy", tracking_uri=store["uri"], out_dir=out)
    assert not (out / "stale.png").exists() and (out / "mine.txt").is_file()


def test_out_onto_an_existing_file(store, tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("mine")
    assert main(["report", "toy", "--tracking-uri", store["uri"], "--out", str(target)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert target.read_text() == "mine"


@pytest.mark.parametrize("name, why", [
    ("/etc/passwd", "absolute path"), ("..", "'..'"), ("a/../../b", "'..'"), ("", "not a file name"),
    (".", "not a path inside it"), ("a\x00b", "not a file name"), (None, "not a file name"),
    (3, "not a file name")])
def test_path_inside_refuses_every_escape(tmp_path, name, why):
    with pytest.raises(ConfigError, match=why):
        path_inside(tmp_path, name)


def test_path_inside_accepts_what_is_inside(tmp_path):
    assert path_inside(tmp_path, "a/b.png") == tmp_path / "a" / "b.png"
    assert path_inside(tmp_path, "./c") == tmp_path / "c"
