"""Nsight Compute driven from Python: the command line, and its ``--csv --page raw`` output as records.

We profile only the candidate's kernels (a name regex), leave the clocks alone
(``--clock-control none``, so the numbers match what our own timer sees at boost clocks) and read
the raw page, where every collected metric is one column and every profiled launch one row.

Format of the raw page, as seen in public examples (NVIDIA's Nsight Compute CLI manual,
docs.nvidia.com/nsight-compute/NsightComputeCli, "--page raw" and "--csv"; the identification
columns and ``(x, y, z)`` sizes as parsed in medav/torchbench-ncu bryt/parse_ncu.py; the wide
layout with a units row in public ncu test fixtures found through a code index):

    ==PROF== Connected to process 1234 (...)          <- profiler chatter, any number of lines
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",
        "Grid Size","Device","CC","dram__bytes_read.sum",...          <- header: metric names
    "","","","","","","","","","","","Mbyte",...      <- units row (recent ncu versions only)
    "0","1234","python3","host","k(float*)","1","7","(256, 1, 1)","(80, 1, 1)","0","9.0","1,234.5",...

Values may carry thousands separators (``1,234``) or be ``n/a``; both are handled here.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

__all__ = [
    "DEFAULT_METRICS",
    "KernelLaunch",
    "KernelMetrics",
    "Measured",
    "NcuParseError",
    "derive",
    "ncu_command",
    "parse_raw_csv",
    "to_base_unit",
]

# Identification columns ncu writes before the metric columns of the raw page.
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")
_REQUIRED_COLUMNS = ("ID", "Kernel Name")

DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_TOTAL = "dram__bytes.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
SMSP_CYCLES = "smsp__cycles_elapsed.avg"
TENSOR_PIPE_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
GRID_SIZE = "launch__grid_size"
BLOCK_SIZE = "launch__block_size"
REGISTERS = "launch__registers_per_thread"
OCCUPANCY_LIMIT_PREFIX = "launch__occupancy_limit_"
# Per-precision tensor-core operation totals (e.g. sm__ops_path_tensor_src_bf16_dst_fp32.sum); the
# _sparsity_on/off and op_* variants split the same work again and are left out to avoid counting
# it twice.
_TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_[a-z0-9]+(?:_[a-z0-9]+)*_dst_[a-z0-9]+\.sum$")

DEFAULT_METRICS: tuple[str, ...] = (
    DURATION, DRAM_READ, DRAM_WRITE, FADD, FMUL, FFMA, TENSOR_PIPE_PCT, TENSOR_INST,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    OCCUPANCY_PCT, SM_PCT, MEMORY_PCT, GRID_SIZE, BLOCK_SIZE, REGISTERS,
    "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
)

# Units whose values we convert: time to seconds; the K/M/G/T prefixes ncu puts before any base
# unit (Kbyte, Minst, Ghz) are decimal, as in ncu's own output.
_TIME_SECONDS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3,
                 "ms": 1e-3, "second": 1.0, "s": 1.0}
_PREFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_PREFIXED_BASES = ("byte", "inst", "cycle", "hz", "warp", "thread", "block", "sector", "request")
_MISSING = {"", "n/a", "N/A", "nan"}


class NcuParseError(ValueError):
    """ncu output that is not a ``--csv --page raw`` table; the message is one line."""


class Measured(NamedTuple):
    """One metric of one launch: value in base units (``None`` for ``n/a``) and that unit."""

    value: float | None
    unit: str


@dataclass(frozen=True)
class KernelLaunch:
    """One profiled kernel launch, as ncu reported it.

    Attributes:
        id: ncu's running launch number (the ``ID`` column).
        name: the kernel name column (function, demangled or mangled, per ``--kernel-name-base``).
        grid: grid size in blocks ``(x, y, z)``; ``None`` if ncu left it out.
        block: block size in threads ``(x, y, z)``; ``None`` if ncu left it out.
        device: GPU index.
        compute_capability: e.g. ``9.0``.
        metrics: metric name -> value in base units (bytes, seconds, %, counts) and that unit.
        text: metrics whose value is not a number (device names, cache configurations).
    """

    id: int
    name: str
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    device: int | None
    compute_capability: str | None
    metrics: Mapping[str, Measured] = field(default_factory=dict)
    text: Mapping[str, str] = field(default_factory=dict)

    def value(self, metric: str) -> float | None:
        """The metric in base units, ``None`` when it was not collected or was ``n/a``."""
        measured = self.metrics.get(metric)
        return None if measured is None else measured.value


@dataclass(frozen=True)
class KernelMetrics:
    """The quantities the roofline classifier and reports need, derived from one launch.

    Every field is ``None`` when its metrics were not collected: a missing counter is unknown,
    never zero, so a kernel without FLOP counters is not mistaken for one that does no math.

    Attributes:
        name: kernel name.
        duration_s: ``gpu__time_duration.sum`` in seconds.
        dram_read_bytes / dram_write_bytes: DRAM traffic.
        dram_bytes: read plus write (or ``dram__bytes.sum`` when only that was collected).
        fp32_flops: fadd + fmul + 2 x ffma thread instructions (an FMA is two FLOPs).
        tensor_ops: sum of the per-precision ``sm__ops_path_tensor_src_*_dst_*.sum`` counters.
            These are reported not to count wgmma on sm_90, so ``None`` or a small number on
            Hopper does not prove the tensor cores were idle; see ``tensor_pipe_pct``.
        tensor_instructions: ``sm__inst_executed_pipe_tensor.sum`` (instructions, not FLOPs).
        tensor_pipe_pct: tensor pipe active, % of peak.
        occupancy_pct: achieved occupancy, % of the maximum warps.
        sm_throughput_pct / memory_throughput_pct: the SM and memory-hierarchy speed of light %.
        grid_blocks / block_threads / registers_per_thread: launch configuration.
        occupancy_limits: ``launch__occupancy_limit_<what>`` -> blocks per SM that resource allows.
        raw: every numeric metric of the launch, by ncu name, in base units, for the tools that read
            counters no field above summarizes (sectors per request, bank conflicts, stall reasons).
    """

    name: str
    duration_s: float | None
    dram_read_bytes: float | None
    dram_write_bytes: float | None
    dram_bytes: float | None
    fp32_flops: float | None
    tensor_ops: float | None
    tensor_instructions: float | None
    tensor_pipe_pct: float | None
    occupancy_pct: float | None
    sm_throughput_pct: float | None
    memory_throughput_pct: float | None
    grid_blocks: int | None
    block_threads: int | None
    registers_per_thread: int | None
    occupancy_limits: Mapping[str, float] = field(default_factory=dict)
    raw: Mapping[str, float] = field(default_factory=dict)

    def metric(self, name: str) -> float | None:
        """A raw metric's value, ``None`` when it was not collected or was ``n/a``."""
        return self.raw.get(name)


def ncu_command(
    python_argv: Sequence[str],
    kernel_regex: str,
    out_csv: str | Path,
    *,
    metrics: Sequence[str] = (),
    sections: Sequence[str] = (),
    section_set: str | None = None,
    ncu: str = "ncu",
    kernel_name_base: Literal["function", "demangled", "mangled"] = "function",
    launch_skip: int = 0,
    launch_count: int | None = None,
    replay_mode: Literal["kernel", "application", "range", "app-range"] = "kernel",
    cache_control: Literal["all", "none"] = "all",
    print_units: Literal["base", "auto"] = "base",
    nvtx_range: str | None = None,
) -> list[str]:
    """Builds the argv that profiles the candidate's kernels and writes the raw page as CSV.

    ``--clock-control none`` keeps the GPU at the clocks our timer sees (ncu's default locks base
    clocks, which would make its durations disagree with ours). ``--cache-control all`` flushes
    caches between replay passes, like our timer flushes L2 between calls. ``--target-processes
    all`` follows the sandbox child that actually runs the kernels.

    Args:
        python_argv: the command ncu launches, e.g. ``[sys.executable, "-m", "...", ...]``.
        kernel_regex: regular expression on the kernel name (without the ``regex:`` prefix).
        out_csv: where ncu writes the CSV (``--log-file``).
        metrics: metric names (``--metrics``).
        sections: section identifiers, e.g. ``SpeedOfLight`` (one ``--section`` each).
        section_set: a section set, e.g. ``basic`` or ``full`` (``--set``).
        ncu: the ncu executable.
        kernel_name_base: what the regex is matched against.
        launch_skip: matching launches to skip first (warm-up, autotuning).
        launch_count: matching launches to profile; ``None`` profiles all.
        replay_mode: how ncu replays a launch to collect metrics needing several passes.
        cache_control: ``all`` flushes caches before each pass; ``none`` keeps them warm.
        print_units: ``base`` asks for unscaled units (byte, nsecond); the parser converts either.
        nvtx_range: profile only launches inside this NVTX push/pop range (``--nvtx
            --nvtx-include NAME/``; the trailing slash marks a push/pop range).

    Returns:
        The argv, never a shell string.
    """
    if not python_argv:
        raise ValueError("ncu_command needs the command to profile")
    if not (metrics or sections or section_set):
        raise ValueError("ncu_command needs metrics, sections or a section set to collect")
    if launch_skip < 0 or (launch_count is not None and launch_count < 1):
        raise ValueError(f"bad launch window: skip {launch_skip}, count {launch_count}")
    regex = kernel_regex.removeprefix("regex:")
    if not regex:
        raise ValueError("an empty kernel regex would profile every kernel, not the candidate's")
    argv = [ncu, "--csv", "--page", "raw", "--print-units", print_units, "--clock-control", "none",
            "--cache-control", cache_control, "--replay-mode", replay_mode, "--target-processes", "all",
            "--kernel-name-base", kernel_name_base, "--kernel-name", f"regex:{regex}"]
    if launch_skip:
        argv += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        argv += ["--launch-count", str(launch_count)]
    if nvtx_range:
        argv += ["--nvtx", "--nvtx-include", f"{nvtx_range}/"]
    if section_set:
        argv += ["--set", section_set]
    for section in sections:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    argv += ["--log-file", str(out_csv)]
    return argv + list(python_argv)


class NcuRunError(RuntimeError):
    """ncu exited with an error or wrote no CSV: its exit status and the tail of what it printed."""


def run_ncu(python_argv: Sequence[str], out_csv: str | Path, *, ncu: str, timeout: float,
            kernel_regex: str = ".*", **options) -> tuple[list[KernelLaunch], float]:
    """Profiles ``python_argv`` under ncu (:func:`ncu_command` with ``options``) and parses the CSV
    it writes to ``out_csv``: the launches, and the seconds ncu took.

    Raises:
        NcuRunError: ncu failed or wrote no CSV.
    """
    import subprocess
    import time

    out_csv = Path(out_csv)
    t0 = time.perf_counter()
    done = subprocess.run(ncu_command(python_argv, kernel_regex, out_csv, ncu=ncu, **options), capture_output=True,
                          text=True, timeout=timeout)
    seconds = round(time.perf_counter() - t0, 1)
    if done.returncode != 0 or not out_csv.is_file():
        raise NcuRunError(f"ncu rc {done.returncode}: {(done.stderr or done.stdout)[-400:]}")
    return parse_raw_csv(out_csv.read_text(errors="replace")), seconds


def parse_raw_csv(text: str) -> list[KernelLaunch]:
    """Parses ncu ``--csv --page raw`` output into one record per profiled launch.

    Lines before the header (``==PROF==`` chatter, program output) and ``==``-prefixed lines
    after it are skipped. A units row, when present, gives each metric's unit; values are
    converted to base units (see :func:`to_base_unit`).

    Raises:
        NcuParseError: no header, a details-page table, a row whose width differs from the header,
            or an ID that is not an integer.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        first = next((line.strip() for line in lines if line.strip()), "")
        raise NcuParseError(f'no ncu CSV header ("ID",...) found; output starts with {first[:120]!r}')
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    header = rows[0]
    _check_header(header)
    units, data = [""] * len(header), rows[1:]
    if data and data[0] and data[0][0] == "":  # the units row leaves the ID column empty
        units, data = _checked_width(data[0], header, "units row"), data[1:]
    return [_launch(header, units, _checked_width(row, header, f"data row {n}"))
            for n, row in enumerate(data, start=1)]


def derive(launch: KernelLaunch) -> KernelMetrics:
    """Computes the standard quantities of one launch; unknown ones stay ``None``."""
    value = launch.value
    read, write = value(DRAM_READ), value(DRAM_WRITE)
    dram = read + write if read is not None and write is not None else value(DRAM_TOTAL)
    limits = {name.removeprefix(OCCUPANCY_LIMIT_PREFIX): m.value for name, m in launch.metrics.items()
              if name.startswith(OCCUPANCY_LIMIT_PREFIX) and m.value is not None}
    grid = value(GRID_SIZE)
    if grid is None and launch.grid is not None:
        grid = float(_product(launch.grid))
    block = value(BLOCK_SIZE)
    if block is None and launch.block is not None:
        block = float(_product(launch.block))
    return KernelMetrics(
        name=launch.name, duration_s=value(DURATION), dram_read_bytes=read, dram_write_bytes=write,
        dram_bytes=dram, fp32_flops=_fp32_flops(launch), tensor_ops=_tensor_ops(launch),
        tensor_instructions=value(TENSOR_INST), tensor_pipe_pct=value(TENSOR_PIPE_PCT),
        occupancy_pct=value(OCCUPANCY_PCT), sm_throughput_pct=value(SM_PCT),
        memory_throughput_pct=value(MEMORY_PCT), grid_blocks=_int(grid), block_threads=_int(block),
        registers_per_thread=_int(value(REGISTERS)), occupancy_limits=limits,
        raw={name: m.value for name, m in launch.metrics.items() if m.value is not None},
    )


def to_base_unit(value: float, unit: str) -> Measured:
    """Converts ncu's scaled units to base ones: times to seconds, ``Kbyte``/``Mbyte``/... to bytes.

    Rates (``Gbyte/second``) convert both sides. Units we do not know (``%``, ``register/thread``)
    pass through unchanged, so a percentage stays a percentage.
    """
    if "/" in unit:
        top, bottom = unit.split("/", 1)
        (top_scale, top_unit), (bottom_scale, bottom_unit) = _scale(top), _scale(bottom)
        return Measured(value * top_scale / bottom_scale, f"{top_unit}/{bottom_unit}")
    scale, base = _scale(unit)
    return Measured(value * scale, base)


def _scale(unit: str) -> tuple[float, str]:
    """The factor from ``unit`` to its base unit, and that base unit."""
    if unit in _TIME_SECONDS:
        return _TIME_SECONDS[unit], "second"
    if unit[:1] in _PREFIXES and unit[1:] in _PREFIXED_BASES:
        return _PREFIXES[unit[0]], unit[1:]
    return 1.0, unit


def _check_header(header: list[str]) -> None:
    if "Metric Name" in header and "Metric Value" in header:
        raise NcuParseError("this is ncu's details page (one row per metric); run ncu with --page raw")
    missing = [column for column in _REQUIRED_COLUMNS if column not in header]
    if missing:
        raise NcuParseError(f"ncu CSV header lacks column(s) {', '.join(missing)}")
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        raise NcuParseError(f"ncu CSV header repeats column(s) {', '.join(duplicated)}")


def _checked_width(row: list[str], header: list[str], where: str) -> list[str]:
    if len(row) != len(header):
        raise NcuParseError(f"ncu CSV {where} has {len(row)} fields but the header has {len(header)}")
    return row


def _launch(header: list[str], units: list[str], row: list[str]) -> KernelLaunch:
    cells = dict(zip(header, row))
    try:
        launch_id = int(cells["ID"].replace(",", ""))
    except ValueError:
        raise NcuParseError(f"ncu CSV row has a non-integer ID {cells['ID']!r}") from None
    metrics: dict[str, Measured] = {}
    text: dict[str, str] = {}
    for name, unit, cell in zip(header, units, row):
        if name in ID_COLUMNS:
            continue
        number = _number(cell)
        if number is None and cell.strip() not in _MISSING:
            text[name] = cell.strip()
            continue
        metrics[name] = Measured(None, unit) if number is None else to_base_unit(number, unit)
    device = _number(cells.get("Device", ""))
    return KernelLaunch(
        id=launch_id, name=cells["Kernel Name"], grid=_dims(cells.get("Grid Size")),
        block=_dims(cells.get("Block Size")), device=None if device is None else int(device),
        compute_capability=cells.get("CC") or None, metrics=metrics, text=text,
    )


def _number(cell: str) -> float | None:
    """``1,234.5`` -> 1234.5; ``n/a``, empty or text -> ``None``."""
    stripped = cell.strip()
    if stripped in _MISSING:
        return None
    try:
        return float(stripped.replace(",", ""))
    except ValueError:
        return None


def _dims(cell: str | None) -> tuple[int, ...] | None:
    """``(256, 1, 1)`` -> (256, 1, 1); anything else -> ``None``."""
    if not cell:
        return None
    parts = cell.strip().strip("()").split(",")
    try:
        return tuple(int(part) for part in parts)
    except ValueError:
        return None


def _fp32_flops(launch: KernelLaunch) -> float | None:
    """fadd + fmul + 2 ffma; ``None`` unless all three were collected, since a partial sum undercounts.

    ``--metrics`` gives each count as a total (``...pred_on.sum``); the ``full`` section set gives
    only its rate (``...pred_on.sum.per_cycle_elapsed``, per elapsed cycle of an SM sub-partition),
    which times ``smsp__cycles_elapsed.avg`` is the same total."""
    cycles = launch.value(SMSP_CYCLES)

    def total(name: str) -> float | None:
        count = launch.value(name)
        if count is None and cycles is not None:
            rate = launch.value(name + ".per_cycle_elapsed")
            count = None if rate is None else rate * cycles
        return count

    fadd, fmul, ffma = (total(name) for name in (FADD, FMUL, FFMA))
    if fadd is None or fmul is None or ffma is None:
        return None
    return fadd + fmul + 2 * ffma


def _tensor_ops(launch: KernelLaunch) -> float | None:
    values = [m.value for name, m in launch.metrics.items() if _TENSOR_OPS.match(name)]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _product(dims: Iterable[int]) -> int:
    total = 1
    for dim in dims:
        total *= dim
    return total


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))
