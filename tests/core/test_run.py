"""The run lifecycle: create, open by id, settings read back, and a clean stop on an interrupt."""

from __future__ import annotations

import shlex

import pytest

from loopwise.core.run import create_run, interruptible, open_run, recorded_settings, resume_command
from loopwise.errors import UserError


def test_a_run_is_created_with_its_settings_and_opened_again_by_id(tmp_path):
    with create_run(tmp_path, "demo.search", "a: 1\n", settings={"budget": 3}) as store:
        run_id = store.meta.run_id
    with open_run(tmp_path, run_id, "demo.search") as store:
        assert recorded_settings(store) == {"budget": 3} and store.meta.config_text == "a: 1\n"
    with create_run(tmp_path, "demo.search", "{}") as bare:
        assert recorded_settings(bare) is None


def test_an_unknown_id_or_another_kind_is_one_line_user_error(tmp_path):
    with create_run(tmp_path, "demo.eval", "{}") as store:
        run_id = store.meta.run_id
    with pytest.raises(UserError, match="no run 'missing'"):
        open_run(tmp_path, "missing")
    with pytest.raises(UserError, match=f"run {run_id} is a demo.eval run, not a demo search"):
        open_run(tmp_path, run_id, "demo.search", noun="a demo search")


def test_an_interrupt_marks_the_run_closes_it_and_says_how_to_resume(tmp_path):
    said: list[str] = []
    store = create_run(tmp_path, "demo.search", "{}")
    line = resume_command("loopwise demo search", store.meta.run_id, tmp_path)
    with pytest.raises(KeyboardInterrupt), interruptible(store, lambda: line, said.append):
        store.append("step", {"n": 1})
        raise KeyboardInterrupt
    assert said == [f"stopped; continue with: {line}"]
    assert shlex.split(line)[3:5] == ["--resume", store.meta.run_id]
    with pytest.raises(RuntimeError):
        store.append("step", {"n": 2})  # closed
    with open_run(tmp_path, store.meta.run_id) as again:
        assert [e.kind for e in again.events()] == ["step", "interrupted"]


def test_a_body_that_ends_normally_closes_the_store_and_says_nothing(tmp_path):
    said: list[str] = []
    store = create_run(tmp_path, "demo.search", "{}")
    with interruptible(store, lambda: "never", said.append):
        store.append("step", {})
    assert said == []
    with pytest.raises(RuntimeError):
        store.append("step", {})


def test_the_stop_line_says_how_far_the_run_got(tmp_path):
    said: list[str] = []
    store = create_run(tmp_path, "demo.search", "{}")
    with pytest.raises(KeyboardInterrupt), interruptible(store, lambda: "go on", said.append, lambda: "after 2 of 5"):
        raise KeyboardInterrupt
    assert said == ["stopped after 2 of 5; continue with: go on"]
