"""Typed config: defaults, YAML files, --set overrides, and one-line errors for bad input."""

import pytest
import yaml

from loopwise.config import dump_config, load_config
from loopwise.errors import UserError


def test_defaults_are_the_documented_ones():
    cfg = load_config()
    ev = cfg.kernels.eval
    assert (ev.tolerance, ev.precision, ev.correct_trials, ev.perf_trials) == ("strict", "fp32", 5, 100)
    assert ev.atol == ev.rtol == 1e-4


def test_yaml_then_overrides_in_that_order(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("kernels:\n  eval:\n    perf_trials: 50\n    tolerance: legacy\n")
    cfg = load_config(f, ["kernels.eval.perf_trials=20", "kernels.eval.fresh_inputs=true"])
    assert cfg.kernels.eval.perf_trials == 20 and cfg.kernels.eval.atol == 1e-2
    assert cfg.kernels.eval.fresh_inputs is True
    again = yaml.safe_load(dump_config(cfg))
    assert again["kernels"]["eval"]["perf_trials"] == 20  # the resolved config round-trips


@pytest.mark.parametrize("content,overrides,needle", [
    (None, ["kernels.eval.bogus=1"], "kernels.eval.bogus"),
    (None, ["kernels.eval.perf_trials=lots"], "perf_trials"),
    (None, ["kernels.eval.tolerance=loose"], "tolerance"),
    (None, ["no_equals_sign"], "KEY=VALUE"),
    ("kernels: [1, 2\n", [], "not valid YAML"),
    ("- just\n- a list\n", [], "mapping"),
])
def test_bad_input_is_a_one_line_user_error(tmp_path, content, overrides, needle):
    path = None
    if content is not None:
        path = tmp_path / "bad.yaml"
        path.write_text(content)
    with pytest.raises(UserError) as info:
        load_config(path, overrides)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_a_resumed_run_gets_the_config_it_stored_under_what_is_given_now(tmp_path):
    from loopwise.config import dump_config, load_config, run_config
    from loopwise.core.store import SqliteRunStore

    started = load_config(None, ["kernels.eval.precision=relaxed", "kernels.eval.perf_trials=7",
                                 "store.runs_dir=elsewhere"])
    with SqliteRunStore.create(tmp_path, "kernels.optimize", dump_config(started)) as store:
        run_id = store.meta.run_id
    cfg = run_config(tmp_path, run_id, "kernels.optimize", None, ["kernels.eval.perf_trials=9"])
    assert (cfg.kernels.eval.precision, cfg.kernels.eval.perf_trials) == ("relaxed", 9)
    assert cfg.store.runs_dir == str(tmp_path)
    with pytest.raises(UserError, match=f"run {run_id} is a kernels.optimize run, not a kernels.bench run"):
        run_config(tmp_path, run_id, "kernels.bench")


def test_the_resume_command_names_the_runs_folder_and_quotes_it(tmp_path):
    import shlex

    from loopwise.core.run import resume_command

    runs = tmp_path / "my runs"
    line = resume_command("loopwise training search arithmetic", "20260101-000000-abcdef", runs)
    assert shlex.split(line) == ["loopwise", "training", "search", "arithmetic", "--resume",
                                 "20260101-000000-abcdef", "--runs-dir", str(runs.resolve())]


def test_the_config_has_each_registered_engine_section_under_the_engine_name():
    """The typed config composes the sections the engines register with core, under their names."""
    from loopwise.config import Config
    from loopwise.core.engines import engines

    registered = {name: e.section_model() for name, e in engines().items() if e.config_section}
    assert registered, "no engine registers a config section"
    for name, model in registered.items():
        assert Config.model_fields[name].annotation is model, name
