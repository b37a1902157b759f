"""What the ``loopwise kernels`` commands share: their common options and how each builds its config."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from loopwise.errors import CandidateError

JSON = typer.Option(False, "--json", help="Print machine-readable JSON on stdout instead of tables.")
CONFIG = typer.Option(None, "--config", "-c", help="YAML config file.")
SET = typer.Option(None, "--set", help="Override a config value, e.g. --set kernels.eval.perf_trials=50.")
KERNELBENCH = typer.Option(None, "--kernelbench", help="KernelBench checkout for kernelbench:LEVEL/ID "
                           "(default: $LOOPWISE_KERNELBENCH or ./third_party/KernelBench).")
DEVICE = typer.Option(None, "--device", help="auto, cuda, cuda:N or cpu.")
EXECUTOR = typer.Option("local", "--executor", help="Where candidates are judged: local (this machine) or ray "
                        "(a Ray cluster; pip install 'loopwise\\[ray]').")
WORKERS = typer.Option(None, "--workers", help="Judge on worker processes, one per GPU: a count (2), GPU "
                       "indices (0,1) or CPU stand-ins (cpu,cpu). Default: local judges in this process on "
                       "--device; ray uses every GPU of the cluster.")
RUNS = typer.Option(None, "--runs-dir", help="Where runs are kept (default: ./runs, or store.runs_dir of --config).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="An existing Ray cluster (e.g. auto or ray://host:10001); "
                           "default: a local one started on demand.")


def command_config(config: Optional[Path], overrides: Optional[List[str]], extra: list[str],
            resume: tuple[str, str] | None = None):
    """The config of this command; with ``resume`` (a run id and its kind), the config that run
    stored, with this command's --config, --set and options laid over it."""
    from loopwise.config import load_config, run_config

    cfg = load_config(config, list(overrides or []) + extra)
    if resume and resume[0]:
        cfg = run_config(cfg.store.runs_dir, resume[0], resume[1], config, list(overrides or []) + extra)
    return cfg


def where(device: Optional[str], kernelbench: Optional[str], runs_dir: Optional[str] = None) -> list[str]:
    """The ``--set`` overrides that --device, --kernelbench and --runs-dir stand for."""
    out = [f"kernels.device={device}"] if device else []
    out += [f"store.runs_dir={runs_dir}"] if runs_dir else []
    return out + ([f"kernels.kernelbench={kernelbench}"] if kernelbench else [])


def read_candidate(path: Path) -> str:
    """A candidate file's text; a missing or non-UTF-8 file is a candidate error."""
    if not path.is_file():
        raise CandidateError(f"{path}: candidate file not found")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CandidateError(f"{path}: not a UTF-8 text file") from None
