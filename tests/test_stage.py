"""The stage record: settings first, completion marker last, one comparison for every stage."""

from __future__ import annotations

import json
import shutil

import pytest

from bgp4.errors import InputError
from bgp4.stage import COMPLETE, FINGERPRINT, METRICS, SETTINGS, Stage, changed, refuse_changes, with_fingerprint


def test_changed_names_differing_settings_leaving_out_neutral_ones_with_defaults():
    old = {"lr": 1e-3, "steps": 10, "workers": 1}
    new = {"lr": 1e-2, "steps": 10, "workers": 4, "bins": 8}
    assert changed(old, new) == ["bins", "lr", "workers"]  # every key of either, sorted
    assert changed(old, new, neutral=("workers",)) == ["bins", "lr"]
    # a setting a record lacks (an older version's) counts as its default
    assert changed(old, new, neutral=("workers",), defaults={"bins": 8}) == ["lr"]
    # keys: only these, in this order
    assert changed(old, new, keys=("steps", "lr")) == ["lr"]
    assert changed(old, dict(old)) == []


def test_data_counts_by_fingerprint_where_both_have_one_else_by_path(tmp_path):
    data = tmp_path / "a.h5"
    data.write_bytes(b"frames" * 100)
    moved = tmp_path / "sub" / "b.h5"
    moved.parent.mkdir()
    shutil.copy(data, moved)
    other = tmp_path / "c.h5"
    other.write_bytes(b"other!" * 100)
    first = with_fingerprint({"data": str(data), "lr": 1.0})
    assert first[FINGERPRINT] and first["lr"] == 1.0
    assert changed(first, with_fingerprint({"data": str(moved), "lr": 1.0})) == []  # a copy is the same data
    assert changed(first, with_fingerprint({"data": str(other), "lr": 2.0})) == ["data", "lr"]  # data first
    gone = with_fingerprint({"data": str(tmp_path / "gone.h5"), "lr": 1.0})
    assert gone[FINGERPRINT] is None
    assert changed(first, gone) == ["data"]  # no fingerprint on one side: the path decides
    assert changed({"data": str(data)}, {"data": str(data), FINGERPRINT: "x"}) == []


def test_refuse_changes_names_the_settings_and_the_remedy():
    refuse_changes("run", [], "never shown")  # nothing differs: no error
    with pytest.raises(InputError, match=r"^run holds x with other settings \(lr, seed\); pass overwrite=True"):
        refuse_changes("run holds x", ["lr", "seed"], "pass overwrite=True (--overwrite)")


def test_stage_writes_settings_first_and_its_marker_last(tmp_path):
    stage = Stage(tmp_path / "run")
    assert stage.recorded() is None and stage.changes({"lr": 1}) is None
    assert not stage.complete and stage.completion() == {}
    stage.path.mkdir()
    stage.record({"lr": 1, "workers": 2})
    assert json.loads((stage.path / SETTINGS).read_text()) == {"lr": 1, "workers": 2}
    assert stage.changes({"lr": 1, "workers": 3}, neutral=("workers",)) == []
    assert stage.changes({"lr": 2, "workers": 2}) == ["lr"]
    assert not stage.complete
    stage.finish({"steps": 10})
    assert stage.complete and stage.completion() == {"steps": 10}
    assert (stage.path / COMPLETE).exists()
    # another marker name: a sweep's run is finished when its own marker is there
    assert not Stage(stage.path, complete="sweep-done.json").complete


def test_log_skips_a_line_cut_off_by_a_kill(tmp_path):
    stage = Stage(tmp_path)
    assert list(stage.records()) == [] and stage.last_step() == 0
    stage.log({"global_step": 5})
    stage.log({"global_step": 10, "loss": 1.5})
    assert stage.last_step() == 10
    with open(tmp_path / METRICS, "a") as f:
        f.write('{"global_step": 1')  # a kill in the middle of a line
    assert [r["global_step"] for r in stage.records()] == [5, 10]
    assert stage.last_step() == 10
    stage.log({"global_step": 15})  # logging on: the cut line is ended, not glued to this record
    assert [r["global_step"] for r in stage.records()] == [5, 10, 15]


def test_sweep_task_records_survive_a_line_cut_off_by_a_kill(tmp_path):
    from bgp4.sweep.spec import TASKS_FILE
    from bgp4.sweep.tasks import _add_task_record, _task_records

    _add_task_record(tmp_path, {"wall_s": 1.0})
    with open(tmp_path / TASKS_FILE, "a") as f:
        f.write('{"wall_s": 2')  # the task killed while writing
    _add_task_record(tmp_path, {"wall_s": 3.0})
    assert [r["wall_s"] for r in _task_records(tmp_path)] == [1.0, 3.0]


def test_run_directory_drops_a_cut_line_before_logging_on(tmp_path):
    from bgp4.generator.rundir import RunDirectory

    run = RunDirectory(tmp_path)
    for step in (5, 10, 15):
        run.log({"global_step": step})
    with open(tmp_path / METRICS, "a") as f:
        f.write('{"global_st')
    run.truncate_log(10)  # a resume from step 10
    run.log({"global_step": 15})
    assert [r["global_step"] for r in run.records()] == [5, 10, 15]
    assert len((tmp_path / METRICS).read_text().splitlines()) == 3


def test_run_directory_refuses_other_settings_and_foreign_directories(tmp_path):
    from bgp4.generator.rundir import RunDirectory

    run = RunDirectory(tmp_path / "run")
    run.prepare({"lr": 1}, overwrite=False)
    run.prepare({"lr": 1}, overwrite=False)  # the same settings: resumes
    with pytest.raises(InputError, match=r"other settings \(lr\).*overwrite=True \(--overwrite\)"):
        run.prepare({"lr": 2}, overwrite=False)
    run.prepare({"lr": 2}, overwrite=True)
    assert run.settings() == {"lr": 2}
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a bgp4 run directory"):
        RunDirectory(foreign).prepare({"lr": 1}, overwrite=True)
    assert (foreign / "notes.txt").exists()


def test_training_comparison_is_the_stage_comparison():
    from dataclasses import asdict

    from bgp4.settings import TrainSettings, changed_settings

    old = json.loads(json.dumps(asdict(TrainSettings())))
    new = {**old, "lr": 0.5, "workers": 7, "checkpoint_minutes": 1.0}
    assert changed_settings(old, new) == ["lr"]


def test_sweep_run_is_done_when_its_marker_records_the_same_settings(tmp_path):
    from bgp4.sweep.spec import DONE_FILE, RunSpec

    train, sample = {"data": "/d.h5", "steps": 10, "workers": 1}, {"n": 100, "workers": 1}
    spec = RunSpec("rnvp-s0", "rnvp", 0, str(tmp_path), train, sample, 1, 0.0)
    assert not spec.done
    spec.stage().finish({"train": {**train, "workers": 4}, "sample": sample, "host": "h"})
    assert spec.done  # execution-only settings may change
    other = RunSpec("rnvp-s0", "rnvp", 0, str(tmp_path), {**train, "steps": 11}, sample, 1, 0.0)
    assert not other.done
    (tmp_path / DONE_FILE).write_text("{cut")
    assert not spec.done
