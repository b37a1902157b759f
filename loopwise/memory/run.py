"""A memory plan's run in the run store: create it, open it again to resume or report it, and the
line that continues it. The memory engine creates, opens and names its runs here only."""

from __future__ import annotations

import json
import os
import shlex

from loopwise.errors import UserError

KIND = "memory.plan"
"""The run kind of ``loopwise memory plan`` (``loopwise runs list``, ``loopwise report``)."""


def create_run(runs_dir: str | os.PathLike[str], inputs: dict):
    """A new plan run under ``runs_dir`` with its resolved ``inputs`` recorded.

    Returns:
        The run's store (a :class:`loopwise.core.store.SqliteRunStore`), open.
    """
    from loopwise.core import run

    store = run.create_run(runs_dir, KIND, json.dumps(inputs, indent=1))
    store.append("inputs", inputs, key="inputs")
    return store


def open_run(runs_dir: str | os.PathLike[str], run_id: str):
    """The plan run ``run_id`` and the inputs it was started with.

    Raises:
        UserError: no such run, or a run of another kind.
    """
    from loopwise.core import run

    store = run.open_run(runs_dir, run_id, KIND, noun="a memory plan")
    return store, recorded_inputs(store)


def recorded_inputs(store) -> dict:
    """The inputs a plan run was started with."""
    event = store.latest_by_key("inputs").get("inputs")
    if event is None:
        raise UserError(f"run {store.meta.run_id} has no recorded inputs: not a memory plan run")
    return event.payload


def resume_line(store) -> str:
    """The shell command that continues the plan run held by ``store``."""
    from loopwise.core.run import resume_command

    model = recorded_inputs(store)["model"]
    return resume_command(shlex.join(["loopwise", "memory", "plan", model]), store.meta.run_id,
                          store.run_dir.parent)
