"""Scratchpad targets as YAML with a validated schema; four ship with loopwise
(``neuroncore-v2``, ``gpu-sm-shared``, ``scratchpad-1mib``, ``scratchpad-96mib``),
and a user's own file is given by its path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopwise.errors import UserError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scratchpad(_Strict):
    bytes: int = Field(gt=0)
    partitions: int = Field(1, ge=1)


class Accumulator(_Strict):
    bytes: int = Field(0, ge=0)


class Dram(_Strict):
    bandwidth_gbs: float = Field(gt=0)


class Dma(_Strict):
    min_efficient_chunk_bytes: int = Field(1, ge=1)
    descriptor_per_partition: bool = False
    engines: int = Field(1, ge=1)


class Compute(_Strict):
    """Peak throughput at the element type planned: a matrix engine for the operators with
    multiply-accumulates (2 FLOPs each), a vector engine for the others (one operation per loop
    iteration); ``source`` says where the figures come from."""

    matrix_tflops: float = Field(gt=0)
    vector_tflops: float = Field(gt=0)
    source: str = Field(min_length=1)


class Energy(_Strict):
    """Energy per byte moved at each level; ``source`` says where the figures come from."""

    dram_pj_per_byte: float = Field(gt=0)
    scratchpad_pj_per_byte: float = Field(gt=0)
    source: str = Field(min_length=1)


class Target(_Strict):
    """A scratchpad accelerator as the planner sees it: capacity, DRAM bandwidth and DMA rules; its
    compute throughput and energy per byte where they are known (a plan's time and energy need
    them: :mod:`loopwise.memory.timing`)."""

    name: str
    scratchpad: Scratchpad
    accumulator: Accumulator = Accumulator()
    dram: Dram
    dma: Dma = Dma()
    compute: Compute | None = None
    energy: Energy | None = None


def builtin_targets() -> list[str]:
    folder = resources.files("loopwise.memory") / "targets"
    return sorted(p.name.removesuffix(".yaml").replace("_", "-") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_target(spec: str) -> Target:
    """A built-in target by name (``neuroncore-v2``) or a YAML file by path; one-line errors."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise UserError(f"target file {spec}: no such file")
        text, where = path.read_text(), str(path)
    else:
        name = spec.replace("-", "_") + ".yaml"
        resource = resources.files("loopwise.memory") / "targets" / name
        if not resource.is_file():
            raise UserError(f"unknown target {spec!r}: built in are {', '.join(builtin_targets())}, or give a YAML file")
        text, where = resource.read_text(), spec
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"target {where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return Target.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_path = ".".join(str(p) for p in first["loc"])
        raise UserError(f"target {where}: {field_path}: {first['msg']}") from None
