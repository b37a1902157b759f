"""A run's lifecycle, the same for every engine: create, open, resume, and stop cleanly.

A run is one search (or batch of evaluations) kept in the run store under a new id, with its
resolved config. It is found again by its id in its runs folder; what it was started with (its
settings, its config) is read back from the run itself, so resuming repeats none of it. When a run
is stopped (Ctrl-C, or SIGTERM, which the command line raises as ``KeyboardInterrupt``), the run
is marked interrupted, its store closed, and the one command that continues it printed; the
command line then exits with 130 (143 for SIGTERM).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopwise.core.store import RunStore, SqliteRunStore
from loopwise.errors import UserError

__all__ = ["INTERRUPTED", "SETTINGS", "continue_line", "create_run", "interruptible", "open_run",
           "recorded_settings", "resume_command"]

SETTINGS = "settings"  # the event holding what a run was started with
INTERRUPTED = "interrupted"  # the event marking where a run was stopped


def create_run(runs_dir: str | os.PathLike[str], kind: str, config_text: str,
               settings: Mapping[str, Any] | None = None) -> SqliteRunStore:
    """Creates a run under a new id, its resolved config saved with it.

    Args:
        runs_dir: the folder of runs (created if missing).
        kind: what the run does, ``<engine>.<command>``.
        config_text: the resolved configuration as YAML or JSON text.
        settings: what the run was started with, recorded as its first ``settings`` event.
    """
    store = SqliteRunStore.create(runs_dir, kind, config_text)
    if settings is not None:
        store.append(SETTINGS, dict(settings))
    return store


def open_run(runs_dir: str | os.PathLike[str], run_id: str, kind: str | None = None,
             noun: str = "") -> SqliteRunStore:
    """Opens a run by its id to resume it or read it.

    Args:
        runs_dir: the folder of runs.
        run_id: the run's id.
        kind: the kind the caller can resume; None accepts any.
        noun: what a run of ``kind`` is called in the error, e.g. ``a tree search``.

    Raises:
        UserError: no run ``run_id`` is there, or it is of another kind (one line each).
    """
    store = SqliteRunStore.open(runs_dir, run_id)
    if kind is not None and store.meta.kind != kind:
        store.close()
        raise UserError(f"run {run_id} is a {store.meta.kind} run, not {noun or f'a {kind} run'}")
    return store


def recorded_settings(store: RunStore) -> dict[str, Any] | None:
    """What the run was started with (its first ``settings`` event), or None when it has none."""
    first = next(iter(store.events(kind=SETTINGS)), None)
    return None if first is None else first.payload


def resume_command(command: str, run_id: str, runs_dir: str | os.PathLike[str], *options: str) -> str:
    """The shell command that resumes run ``run_id``.

    Args:
        command: the command that started the run, without options, e.g. ``loopwise kernels optimize``.
        run_id: the run's id.
        runs_dir: the folder holding the run.
        options: further words the resume needs that the run does not keep (e.g. ``--kernelbench PATH``).

    Returns:
        One line, quoted for a POSIX shell: ``command --resume RUN_ID --runs-dir DIR options...``.
    """
    words = [*shlex.split(command), "--resume", run_id, "--runs-dir", str(Path(runs_dir).resolve()), *options]
    return shlex.join(words)


def continue_line(command: str, why: str = "stopped") -> str:
    """The line said when a run ends before its budget: ``<why>; continue with: <command>``."""
    return f"{why}; continue with: {command}"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@contextmanager
def interruptible(store: RunStore, resume_line: Callable[[], str],
                  say: Callable[[str], None] = _to_stderr,
                  progress: Callable[[], str] | None = None) -> Iterator[RunStore]:
    """Runs the body on ``store`` and closes the store however the body ends.

    On ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM as the command line raises it) the run is marked
    with an ``interrupted`` event, ``stopped; continue with: <resume line>`` is said, and the
    interrupt goes on to the command line, which exits with 130 (143 for SIGTERM).

    Args:
        store: the run's store.
        resume_line: gives the command that continues the run (see :func:`resume_command`).
        say: where the line goes; stderr by default.
        progress: gives how far the run got, said after ``stopped``, e.g. ``after 3 of 8 candidates``.
    """
    try:
        yield store
    except KeyboardInterrupt:
        try:
            store.append(INTERRUPTED, {})
        except RuntimeError:  # the body closed the store already: nothing to mark
            pass
        say(continue_line(resume_line(), f"stopped {progress()}" if progress else "stopped"))
        raise
    finally:
        store.close()
