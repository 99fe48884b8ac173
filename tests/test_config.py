"""Config files: TOML and YAML by option name, precedence, unknown keys and bad values refused."""

from __future__ import annotations

import pytest

from bgp4.config import merge_settings, read_config_file
from bgp4.errors import InputError
from bgp4.settings import TrainSettings


def test_toml_and_yaml_give_the_same_settings_with_dashes_or_underscores(tmp_path):
    pytest.importorskip("yaml")
    toml = tmp_path / "run.toml"
    toml.write_text('model = "rnvp"\nenergy-steps = 0\nlr = 2e-3\nfix_constrained = true\nsteps = 1e3\n')
    yaml = tmp_path / "run.yaml"
    yaml.write_text("model: rnvp\nenergy_steps: 0\nlr: 0.002\nfix-constrained: true\nsteps: 1000\n")
    a = merge_settings(TrainSettings, read_config_file(toml), {})
    b = merge_settings(TrainSettings, read_config_file(yaml), {})
    assert a == b
    assert (a.model, a.energy_steps, a.lr, a.fix_constrained, a.steps) == ("rnvp", 0, 0.002, True, 1000)
    assert isinstance(a.steps, int)
    assert a.batch == TrainSettings().batch  # not in the file: the default


def test_flags_win_over_the_file_and_none_flags_do_not(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("batch = 128\nhidden = 8\ntemperature = 300\n")
    s = merge_settings(TrainSettings, read_config_file(path), {"batch": 32, "hidden": None})
    assert (s.batch, s.hidden, s.temperature) == (32, 8, 300.0)


def test_unknown_keys_are_named(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("steps = 10\nbatchsize = 3\nlearning-rate = 1\n")
    with pytest.raises(InputError, match="unknown setting.*batchsize, learning_rate"):
        merge_settings(TrainSettings, read_config_file(path), {})


@pytest.mark.parametrize(
    "line, name",
    [
        ('steps = "many"', "steps"),
        ("steps = 2.5", "steps"),
        ("steps = true", "steps"),
        ('lr = "fast"', "lr"),
        ('fix-constrained = "yes"', "fix_constrained"),
        ("seed = [1, 2]", "seed"),
    ],
)
def test_bad_types_are_refused(tmp_path, line, name):
    path = tmp_path / "run.toml"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=f"setting '{name}' has a bad value"):
        merge_settings(TrainSettings, read_config_file(path), {})


def test_unreadable_files_are_refused(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_config_file(tmp_path / "missing.toml")
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(InputError, match=r"\.toml, \.yaml or \.yml"):
        read_config_file(tmp_path / "run.json")
    (tmp_path / "broken.toml").write_text("steps = = 3\n")
    with pytest.raises(InputError, match="cannot parse"):
        read_config_file(tmp_path / "broken.toml")
    pytest.importorskip("yaml")
    (tmp_path / "list.yaml").write_text("- steps\n- 3\n")
    with pytest.raises(InputError, match="table of settings"):
        read_config_file(tmp_path / "list.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert read_config_file(tmp_path / "empty.yaml") == {}


def test_the_kind_registry_is_the_one_list_of_generator_kinds():
    from bgp4.kinds import KINDS, get_kind
    from bgp4.settings import KIND_DEFAULTS, MODELS, SPLINE_MODELS, resolve_architecture
    from bgp4.sweep.dispatch import STEP_COST

    assert MODELS == ("rnvp", "p4inv", "spline", "spline-p4inv") == tuple(KINDS)
    assert SPLINE_MODELS == ("spline", "spline-p4inv")
    assert [k.name for k in KINDS.values() if k.p4inv] == ["p4inv", "spline-p4inv"]
    assert KIND_DEFAULTS["p4inv"] == {"blocks": 25, "hidden": 60}
    assert KIND_DEFAULTS["spline"] == {"blocks": 6, "hidden": 256, "bins": 8}
    assert resolve_architecture("spline-p4inv", hidden=32) == {"blocks": 6, "hidden": 32, "bins": 8}
    assert resolve_architecture("rnvp", bins=5) == {"blocks": 25, "hidden": 60}  # no bins without splines
    assert STEP_COST == {"rnvp": 1.0, "p4inv": 1.6, "spline": 6.0, "spline-p4inv": 6.5}
    assert get_kind("spline").torsions == "circular" and get_kind("p4inv").torsions == "logit"
    with pytest.raises(
        InputError, match="unknown generator kind 'glow'; choose one of rnvp, p4inv, spline, spline-p4inv"
    ):
        get_kind("glow")
    with pytest.raises(InputError, match="unknown model 'glow'; choose one of rnvp, p4inv"):
        TrainSettings(model="glow").validated()
    with pytest.raises(InputError, match=r"bins \(--bins\) applies to the spline kinds only"):
        TrainSettings(model="p4inv", bins=8).validated()


def test_zmatrix_comes_from_the_file_and_is_validated(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('zmatrix = "auto"\n')
    assert merge_settings(TrainSettings, read_config_file(path), {}).validated().zmatrix == "auto"
    assert merge_settings(TrainSettings, read_config_file(path), {"zmatrix": "hand"}).zmatrix == "hand"
    path.write_text('zmatrix = "bonds"\n')
    with pytest.raises(InputError, match=r"zmatrix \(--zmatrix\) must be one of hand, auto"):
        merge_settings(TrainSettings, read_config_file(path), {}).validated()


def test_objective_settings_come_from_a_file_too(tmp_path):
    path = tmp_path / "fab.toml"
    path.write_text('objective = "fab"\nfab-levels = 4\nfab_buffer = 2e4\nfab-reuse = 8\nfab-power = 1\nsteps = 0\n')
    s = merge_settings(TrainSettings, read_config_file(path), {"fab_moves": 2}).validated()
    assert (s.objective, s.fab_levels, s.fab_moves, s.fab_buffer, s.fab_reuse) == ("fab", 4, 2, 20_000, 8)
    assert s.fab_power == 1.0 and isinstance(s.fab_power, float)
    assert isinstance(s.fab_buffer, int) and s.energy_lr == 1e-4
    path.write_text("fab-levels = 2.5\n")
    with pytest.raises(InputError, match="fab_levels"):
        merge_settings(TrainSettings, read_config_file(path), {})
