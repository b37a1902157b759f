"""ncu command line and ``--csv --page raw`` parser, on a transcribed (not recorded) fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.kernels.profile.ncu import (
    DEFAULT_METRICS,
    Measured,
    NcuParseError,
    derive,
    ncu_command,
    parse_raw_csv,
    to_base_unit,
)

FIXTURE = Path(__file__).parents[1] / "profile_fixtures" / "ncu" / "raw_page_transcribed.csv"
ID_HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC"'
ID_CELLS = '"{id}","7","python","h","{name}","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0"'


@pytest.fixture(scope="module")
def launches():
    return parse_raw_csv(FIXTURE.read_text(encoding="utf-8"))


def test_one_record_per_launch_with_identification(launches) -> None:
    assert [(k.id, k.name) for k in launches] == [(0, "copy_kernel"), (1, "tiny_bias_kernel")]
    copy = launches[0]
    assert copy.grid == (1056, 1, 1) and copy.block == (256, 1, 1)
    assert copy.device == 0 and copy.compute_capability == "9.0"


def test_units_row_converts_to_base_units(launches) -> None:
    copy = launches[0]
    assert copy.metrics["dram__bytes_read.sum"] == Measured(pytest.approx(536.87e6), "byte")
    assert copy.metrics["gpu__time_duration.sum"] == Measured(pytest.approx(280.06e-6), "second")
    assert copy.metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == Measured(12.31, "%")
    assert copy.metrics["launch__registers_per_thread"].unit == "register/thread"


def test_na_is_none_and_thousands_separators_are_numbers(launches) -> None:
    copy, tiny = launches
    assert copy.metrics["sm__ops_path_tensor_src_bf16_dst_fp32.sum"].value is None
    assert tiny.value("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum") == 4096.0
    assert copy.value("launch__grid_size") == 1056.0
    assert tiny.value("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum") is None


def test_derived_quantities(launches) -> None:
    copy = derive(launches[0])
    assert copy.duration_s == pytest.approx(280.06e-6)
    assert copy.dram_bytes == pytest.approx(2 * 536.87e6)
    assert copy.fp32_flops == 0.0
    assert copy.tensor_ops is None  # n/a, not zero
    assert (copy.occupancy_pct, copy.sm_throughput_pct, copy.memory_throughput_pct) == (88.17, 12.31, 91.42)
    assert (copy.grid_blocks, copy.block_threads, copy.registers_per_thread) == (1056, 256, 16)
    assert copy.occupancy_limits == {"blocks": 32.0, "registers": 8.0}
    tiny = derive(launches[1])
    assert tiny.fp32_flops is None  # ffma was n/a, so the FLOP count is unknown
    assert tiny.duration_s == pytest.approx(3.01e-6)


def test_ffma_counts_two_flops_and_tensor_ops_are_summed() -> None:
    names = ["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
             "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum"]
    header = ID_HEADER + "," + ",".join(f'"{n}"' for n in names)
    row = ID_CELLS.format(id=0, name="k") + ',"10","20","1,000","5,000","3,000","5,000"'
    metrics = derive(parse_raw_csv(header + "\n" + row + "\n")[0])
    assert metrics.fp32_flops == 10 + 20 + 2 * 1000
    assert metrics.tensor_ops == 8000  # the sparsity split of the same work is not added again


def test_flops_from_the_full_sets_rates() -> None:
    """``--set full`` reports the fp32 instruction counts only as rates per elapsed cycle; the total
    is the rate times the sub-partitions' elapsed cycles. Values recorded on the H200 for cuBLAS's
    fp32 SGEMM of kernelbench:1/1 (4096^3: 2 x 4096^3 = 137.4 GFLOP)."""
    names = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed" for op in ("fadd", "fmul", "ffma")]
    header = ID_HEADER + "," + ",".join(f'"{n}"' for n in names + ["smsp__cycles_elapsed.avg"])
    row = ID_CELLS.format(id=0, name="sgemm") + ',"0","0","12,971.05","5,299,203.26"'
    metrics = derive(parse_raw_csv(header + "\n" + row + "\n")[0])
    assert metrics.fp32_flops == pytest.approx(2 * 4096 ** 3, rel=1e-3)
    # without the elapsed cycles a rate is not a count
    header = ID_HEADER + "," + ",".join(f'"{n}"' for n in names)
    row = ID_CELLS.format(id=0, name="sgemm") + ',"0","0","12,971.05"'
    assert derive(parse_raw_csv(header + "\n" + row + "\n")[0]).fp32_flops is None


def test_missing_metrics_are_none_never_zero() -> None:
    header = ID_HEADER + ',"gpu__time_duration.sum"'
    launch = parse_raw_csv(header + "\n" + ID_CELLS.format(id=3, name="k") + ',"1,500"\n')[0]
    metrics = derive(launch)
    assert launch.metrics["gpu__time_duration.sum"] == Measured(1500.0, "")  # no units row: as printed
    assert metrics.dram_bytes is None and metrics.fp32_flops is None and metrics.occupancy_pct is None
    assert metrics.grid_blocks == 4 and metrics.block_threads == 128  # from the identification columns


def test_preamble_and_trailing_prof_lines_are_skipped() -> None:
    text = ("==PROF== Connected to process 7\nsome program output\n" + ID_HEADER + ',"x"\n'
            + ID_CELLS.format(id=0, name="k") + ',"1"\n==PROF== Disconnected from process 7\n')
    assert [k.id for k in parse_raw_csv(text)] == [0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("==ERROR== ERR_NVGPUCTRPERM - no permission\n", "no ncu CSV header"),
        (ID_HEADER + ',"x"\n' + ID_CELLS.format(id=0, name="k") + "\n", "data row 1 has 11 fields but the header has 12"),
        ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n', "details page"),
        (ID_HEADER + ',"x"\n' + ID_CELLS.format(id="zero", name="k") + ',"1"\n', "non-integer ID"),
        ('"ID","Process ID"\n"0","1"\n', r"lacks column\(s\) Kernel Name"),
    ],
)
def test_malformed_csv_raises_one_line_error(text: str, message: str) -> None:
    with pytest.raises(NcuParseError, match=message) as caught:
        parse_raw_csv(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (2.5, "Kbyte", Measured(2500.0, "byte")),
        (1.5, "Gbyte", Measured(1.5e9, "byte")),
        (3.0, "msecond", Measured(3e-3, "second")),
        (7.0, "usecond", Measured(7e-6, "second")),
        (4.0, "Gbyte/second", Measured(4e9, "byte/second")),
        (42.0, "%", Measured(42.0, "%")),
        (2.0, "Minst", Measured(2e6, "inst")),
    ],
)
def test_unit_conversion(value: float, unit: str, expected: Measured) -> None:
    got = to_base_unit(value, unit)
    assert got.unit == expected.unit and got.value == pytest.approx(expected.value)


def test_command_profiles_only_the_candidate_with_clocks_left_alone() -> None:
    argv = ncu_command(["python", "-m", "runner", "--case", "3"], "regex:my_kernel|fused_.*", "/tmp/out.csv",
                       metrics=["gpu__time_duration.sum", "dram__bytes_read.sum"], launch_skip=3, launch_count=5)
    assert argv == [
        "ncu", "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
        "--cache-control", "all", "--replay-mode", "kernel", "--target-processes", "all",
        "--kernel-name-base", "function", "--kernel-name", "regex:my_kernel|fused_.*",
        "--launch-skip", "3", "--launch-count", "5",
        "--metrics", "gpu__time_duration.sum,dram__bytes_read.sum", "--log-file", "/tmp/out.csv",
        "python", "-m", "runner", "--case", "3",
    ]


def test_command_with_sections_and_a_set() -> None:
    argv = ncu_command(["python", "x.py"], "k", Path("o.csv"), section_set="basic",
                       sections=["SpeedOfLight", "LaunchStats"], replay_mode="application")
    assert argv[argv.index("--set") + 1] == "basic"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == ["SpeedOfLight", "LaunchStats"]
    assert "--metrics" not in argv and "--launch-skip" not in argv and "--launch-count" not in argv
    assert argv[argv.index("--replay-mode") + 1] == "application"
    assert argv[argv.index("--kernel-name") + 1] == "regex:k" and argv[-2:] == ["python", "x.py"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"python_argv": [], "kernel_regex": "k", "metrics": DEFAULT_METRICS}, "command to profile"),
        ({"python_argv": ["p"], "kernel_regex": "k"}, "metrics, sections or a section set"),
        ({"python_argv": ["p"], "kernel_regex": "regex:", "metrics": DEFAULT_METRICS}, "empty kernel regex"),
        ({"python_argv": ["p"], "kernel_regex": "k", "metrics": DEFAULT_METRICS, "launch_count": 0}, "launch window"),
    ],
)
def test_command_rejects_what_would_profile_the_wrong_thing(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ncu_command(out_csv="o.csv", **kwargs)
