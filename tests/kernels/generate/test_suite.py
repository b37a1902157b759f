"""The generated suite: every problem loads and runs, the same seed gives the same text, and the
suite covers the grammar (ops, categories, dtypes, misaligned sizes, 1-6 op chains)."""

from __future__ import annotations

import collections

import pytest
import torch

from loopwise.kernels.generate import CATEGORIES, all_ops, generate_suite, write_suite
from loopwise.kernels.generate.compose import MAX_OPS
from loopwise.kernels.problem import load_problem

COUNT, SEED = 200, 0
# Tiny tensors (hundreds to thousands of elements) so that 200 problems run in seconds on a CPU.
TINY = 1 / 2048


@pytest.fixture(scope="module")
def suite():
    return generate_suite(COUNT, SEED, TINY)


@pytest.fixture(scope="module")
def written(suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    return write_suite(out, COUNT, SEED, TINY)


def _is_odd(shape) -> bool:
    return any(size > 1 and size % 8 for size in shape)


def test_every_problem_loads_and_gives_finite_outputs_of_its_dtype(suite, written):
    torch.manual_seed(0)
    for problem, path in zip(suite, written):
        loaded = load_problem(str(path))
        assert loaded.name == f"level{problem.level}/{problem.name}"
        module = loaded.load_module()
        model = module.Model(*module.get_init_inputs())
        with torch.no_grad():
            out = model(*module.get_inputs())
        expected = problem.chain.out
        assert tuple(out.shape) == expected.shape, problem.name
        assert str(out.dtype).removeprefix("torch.") == expected.dtype, problem.name
        if out.is_floating_point():
            assert torch.isfinite(out).all(), problem.name


def test_same_seed_gives_identical_files(suite, written):
    again = generate_suite(COUNT, SEED, TINY)
    assert [p.source for p in again] == [p.source for p in suite]
    assert [path.read_text(encoding="utf-8") for path in written] == [p.source for p in suite]
    assert generate_suite(5, SEED + 1, TINY)[0].source != suite[0].source


def test_names_carry_index_seed_and_signature(suite):
    first = suite[0]
    assert first.name.startswith(f"001_s{SEED}_")
    assert first.ops[0] in first.name
    assert len({p.name for p in suite}) == COUNT


def test_suite_covers_the_grammar(suite):
    ops = {op for p in suite for op in p.ops}
    categories = collections.Counter(c for p in suite for c in p.categories)
    assert len(all_ops()) >= 40
    assert len(ops) >= 40
    assert set(categories) == set(CATEGORIES)
    assert {p.chain.dtype for p in suite} == {"float32", "bfloat16", "float16"}
    assert {len(p.ops) for p in suite} == set(range(1, MAX_OPS + 1))
    odd = [p for p in suite if any(_is_odd(s.type.shape) for s in _inputs(p))]
    assert len(odd) >= 0.15 * COUNT


def test_full_scale_problems_move_megabytes_to_hundreds_of_megabytes():
    for problem in generate_suite(COUNT, SEED):
        moved = [i.type for i in _inputs(problem)] + [problem.chain.out]
        size = sum(t.numel * _BYTES[t.dtype] for t in moved)
        assert 1 << 20 <= size <= 1 << 30, problem.name


_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8}


def _inputs(problem):
    from loopwise.kernels.generate.grammar import Input

    return [Input("x", problem.chain.main)] + [i for step in problem.chain.steps for i in step.inputs]


def test_generate_command_writes_a_folder_that_bench_selects(tmp_path):
    from typer.testing import CliRunner

    from loopwise.cli import app
    from loopwise.kernels.bench.run import select_problems

    result = CliRunner().invoke(app, ["kernels", "generate", "--out", str(tmp_path), "--count", "12",
                                      "--seed", "3", "--scale", str(TINY)])
    assert result.exit_code == 0, result.output
    assert "wrote 12 problems of seed 3" in result.output
    selected = select_problems(tmp_path, [1, 2], "all")
    assert sorted(pid for _, pid, _ in selected) == list(range(1, 13))
    assert [p.read_text(encoding="utf-8") for _, _, p in sorted(selected, key=lambda s: s[1])] == \
        [p.source for p in generate_suite(12, 3, TINY)]


def test_full_scale_weights_stay_within_what_a_judge_can_hold():
    """A flattened activation feeding a Linear once drew a weight of 8.6G elements (34 GB in fp32),
    which no judge can load; every weight stays within 2**27 elements (KernelBench's largest is
    102.8M)."""
    import types

    from loopwise.kernels.generate.ops_layers import WEIGHT_ELEMENTS

    assert WEIGHT_ELEMENTS == 1 << 27
    for problem in generate_suite(COUNT, SEED):
        module = types.ModuleType(problem.name)
        exec(compile(problem.source, problem.name, "exec"), module.__dict__)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
        largest = max((p.numel() for p in model.parameters()), default=0)
        assert largest <= WEIGHT_ELEMENTS, (problem.name, largest)
