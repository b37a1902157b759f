"""The ``loopwise`` command line. Heavy modules load inside commands, so ``--help`` is instant."""

from __future__ import annotations

import os
import signal
import sys

import typer

from loopwise import __version__
from loopwise.errors import UserError

app = typer.Typer(
    name="loopwise",
    help="Optimizes ML systems the way an expert does: diagnose, propose, measure, search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loopwise {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """loopwise: kernels, training schedules and memory plans, searched and measured."""


def mcp(runs_dir: str = typer.Option("runs", "--runs-dir", help="Folder of runs: eval records its verdicts "
                                      "there, optimize_status reads it."),
        kernelbench: str | None = typer.Option(None, "--kernelbench", help="KernelBench checkout for "
                                               "kernelbench:LEVEL/ID (default: $LOOPWISE_KERNELBENCH or "
                                               "./third_party/KernelBench).")) -> None:
    """Serve the kernel lab (eval, check, profile, tools, codesearch, read_source, optimize_status) as
    MCP tools over stdio, for coding agents. See docs/mcp.md."""
    from loopwise.mcp_server import serve

    serve(runs_dir=runs_dir, kernelbench=kernelbench)


def _register() -> None:
    from loopwise.demo import demo
    from loopwise.kernels.cli import app as kernels_app
    from loopwise.memory.cli import app as memory_app
    from loopwise.runs_cli import app as runs_app
    from loopwise.runs_cli import report
    from loopwise.training.cli import app as training_app

    app.add_typer(kernels_app, name="kernels", help="GPU kernels for PyTorch modules: evaluate, check, baseline.")
    app.add_typer(training_app, name="training", help="Staged GRPO schedules, searched against baselines.")
    app.add_typer(memory_app, name="memory", help="DRAM traffic of whole models on scratchpad accelerators.")
    app.add_typer(runs_app, name="runs", help="Runs recorded in the run store.")
    app.command("demo", help="The main job on the embedded defaults (no API key needed).")(demo)
    app.command("report", help="One self-contained HTML report of a run.")(report)
    app.command("mcp", help="The kernel lab as MCP tools over stdio, for coding agents.")(mcp)


_register()


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a Slurm time limit), raised in the main thread as Ctrl-C is,
    so every ``with`` and ``finally`` on the way out runs: sandboxes and workers stop, stores close,
    and a run says how to resume it. Python's default would end the process on the spot."""


_SIGTERM_SEEN: list[bool] = []


def _on_sigterm(signum, frame) -> None:
    _SIGTERM_SEEN.append(True)
    raise Terminated()


def _stopped() -> None:
    """After Ctrl-C or SIGTERM stopped a command: one line, and the shell's status for it."""
    print("terminated" if _SIGTERM_SEEN else "interrupted", file=sys.stderr)
    sys.exit(143 if _SIGTERM_SEEN else 130)


def _one_thread_unless_chosen() -> None:
    """One OpenMP thread per process unless the user set ``OMP_NUM_THREADS``. Torch sizes its
    thread pool from the variable when it is imported (commands import it lazily, after this), and
    every sandbox and worker inherits it. One thread, because loopwise's CPU work is small tensors
    (the tiny training policies, interpreted Triton kernels, KernelBench-sized references) on which
    a pool spins more than it computes, and because it runs several processes at once (a candidate's
    sandbox beside its spares, one worker per device), whose pools would fight over the same cores.
    A user who wants more threads sets the variable, and it is left alone."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _click_exceptions() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Click's usage-error and abort classes: click's own, and the copy newer typer versions
    carry inside them (a typo in a command name is raised as the latter)."""
    import click

    import typer.exceptions

    usage, abort = [click.exceptions.ClickException], [click.exceptions.Abort]
    try:
        from typer._click import exceptions as bundled
    except ImportError:
        bundled = None
    for found, name in ((usage, "ClickException"), (abort, "Abort")):
        found += [c for c in (getattr(bundled, name, None), getattr(typer.exceptions, name, None))
                  if isinstance(c, type)]
    return tuple(usage), tuple(abort)


def main() -> None:
    """Console entry point: user mistakes are one line on stderr and exit status 2; SIGINT and
    SIGTERM stop cleanly with 130 and 143."""
    _one_thread_unless_chosen()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _stopped()
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors come here in non-standalone mode
        usage, abort = _click_exceptions()
        if isinstance(exc, usage):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, abort):
            sys.exit(1)
        if os.environ.get("LOOPWISE_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set LOOPWISE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        sys.exit(1)
    if code == 130:  # typer returns a KeyboardInterrupt as status 130 (no command returns it)
        _stopped()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
