"""Typed configuration: pydantic models, YAML files and ``--set a.b=c`` dotted overrides.

The resolved config is saved with every run, so a run can be repeated exactly. It composes the
engines' own sections (``kernels``), so it sits beside the command line, above the engines, and
not in ``loopwise.core``, which imports no engine.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loopwise.errors import UserError
from loopwise.kernels.config import KernelsConfig


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs_dir: str = "runs"


class Config(BaseModel):
    """The whole resolved configuration of one loopwise invocation."""

    model_config = ConfigDict(extra="forbid")

    kernels: KernelsConfig = Field(default_factory=KernelsConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    # --proposer llm: fields of LLMConfig (retries, timeouts, prices, budget...); a command's
    # --llm-* options win over them
    llm: dict[str, Any] = Field(default_factory=dict)

    @field_validator("llm")
    @classmethod
    def _llm_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        from loopwise.core.propose.llm._config import LLMConfig

        unknown = sorted(set(value) - set(LLMConfig.model_fields))
        if unknown:
            raise ValueError(f"unknown LLM setting {unknown[0]!r} (known: {', '.join(LLMConfig.model_fields)})")
        return value


def _parse_scalar(text: str) -> Any:
    """Reads an override value the way YAML would (``true``, ``3``, ``1e-4``, ``[1, 2]``)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict, assignment: str) -> None:
    """Applies one ``a.b.c=value`` assignment to a nested dict in place."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {assignment!r}: expected KEY=VALUE, e.g. kernels.eval.perf_trials=50")
    parts = [p for p in key.strip().split(".") if p]
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"--set {assignment!r}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = _parse_scalar(raw.strip())


def _format_validation(err: ValidationError, origin: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    extra = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{origin}: {where}: {first['msg']}{extra}"


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
                base: dict | None = None) -> Config:
    """Builds the config from defaults (or ``base``), an optional YAML file and dotted overrides
    (in that order).

    Raises:
        UserError: a missing or malformed file, an unknown key or a value of the wrong type.
    """
    data: dict = copy.deepcopy(base) if base else {}
    origin = "config"
    if path is not None:
        origin = str(path)
        p = Path(path)
        if not p.is_file():
            raise UserError(f"{p}: config file not found")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" at line {mark.line + 1}" if mark is not None else ""
            raise UserError(f"{p}: not valid YAML{line}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise UserError(f"{p}: the top level must be a mapping of sections")
        _merge(data, loaded or {})
    for assignment in overrides or []:
        apply_override(data, assignment)
        origin = "--set" if path is None else f"{origin} with --set"
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise UserError(_format_validation(err, origin)) from None


def _merge(data: dict, loaded: dict) -> None:
    """Lays a config file's sections over ``data`` in place, key by key."""
    for key, value in loaded.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _merge(data[key], value)
        else:
            data[key] = value


def run_config(runs_dir: str | os.PathLike, run_id: str, kind: str, path: str | os.PathLike | None = None,
               overrides: list[str] | None = None) -> Config:
    """The config a run was started with (as it stored it), with the given file and overrides laid
    over it: a resumed run judges and searches as it began unless told otherwise. Its runs folder
    is ``runs_dir``, where it was found.

    Raises:
        UserError: no such run, a run of another ``kind``, or a stored config that is not valid.
    """
    from loopwise.core.run import open_run

    with open_run(runs_dir, run_id, kind) as store:
        meta = store.meta
    text = meta.config_text
    try:
        stored = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        stored = None
    if not isinstance(stored, dict):
        raise UserError(f"run {run_id}: its stored config is not a mapping of sections")
    cfg = load_config(path, overrides, base=stored)
    cfg.store.runs_dir = str(runs_dir)
    return cfg


def dump_config(config: Config) -> str:
    """The resolved config as YAML (what a run stores next to its results)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
