"""The C++ glue of every compiled template formats the numbers and shapes in its messages as text
before TORCH_CHECK sees them: an extension whose C++ runtime is linked in statically crashes when
an ostream of the process inserts a number, so a message that did so would turn a refusal into a
segfault."""

from __future__ import annotations

import ast
import itertools
import re

import pytest

from loopwise.kernels.expert import matmul_variants
from loopwise.kernels.expert.generate import render
from loopwise.kernels.expert.proposer import SPACE

from expert_judging import bmm_pattern, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path

#: What a message argument may be: a string literal, a ternary of literals, the glue's ``const
#: char*`` operand name, or text already formatted (``lw_text``, ``std::to_string``, ``c10::toString``).
_TEXT = re.compile(r'^("[^"]*"|\w+ \? "[^"]*" : "[^"]*"|name|(lw_text|std::to_string|c10::toString)\(.*\))$', re.S)


def _arguments(call: str) -> list[str]:
    """The top-level comma-separated arguments of ``TORCH_CHECK(...)`` whose text starts at ``call``."""
    depth, start, parts, quoted = 0, call.index("(") + 1, [], False
    for i in range(start, len(call)):
        c = call[i]
        if c == '"' and call[i - 1] != "\\":
            quoted = not quoted
        if quoted:
            continue
        if c in "([{<" and not (c == "<" and call[i - 1] in " <"):
            depth += 1
        elif c in ")]}>" and not (c == ">" and call[i - 1] in " >-="):
            if depth == 0:
                parts.append(call[start:i].strip())
                return parts
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(call[start:i].strip())
            start = i + 1
    raise AssertionError(f"unclosed TORCH_CHECK: {call[:80]}")


def _glue(source: str) -> str:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["GLUE"]:
            return ast.literal_eval(node.value)
    raise AssertionError("no GLUE string")


def _sources():
    for kind, pattern, precision in [("bmm_cutlass", bmm_pattern("float16"), "strict"),
                                     ("bmm_cutlass_tf32", bmm_pattern("float32"), "relaxed"),
                                     ("matmul_cutlass", matmul_pattern("bfloat16"), "strict"),
                                     ("matmul_cutlass_tf32", matmul_pattern("float32"), "relaxed"),
                                     ("matmul_3xtf32", matmul_pattern("float32"), "strict"),
                                     ("matmul_1xtf32", matmul_pattern("float32"), "relaxed")]:
        names = list(SPACE[kind])
        moves = next(dict(zip(names, values)) for values in itertools.product(*SPACE[kind].values())
                     if matmul_variants.valid(kind, dict(zip(names, values))))
        yield kind, render(pattern, {"template": kind, **moves}, precision)


@pytest.mark.parametrize("kind,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_every_message_argument_is_text(kind, source):
    glue = _glue(source)
    calls = [m.start() for m in re.finditer(r"\bTORCH_CHECK\(", glue)]
    assert len(calls) >= 5, kind
    for at in calls:
        condition, *message = _arguments(glue[at:])
        assert message, glue[at:at + 120]
        for argument in message:
            assert _TEXT.match(argument), f"{kind}: {argument!r} goes through an ostream"
    assert "static std::string lw_text(int64_t value)" in glue


def test_the_rule_catches_a_bare_number():
    call = 'TORCH_CHECK(s == 0, "refused at step ", status, " for ", lw_text(m));'
    condition, *message = _arguments(call)
    assert [bool(_TEXT.match(a)) for a in message] == [True, False, True, True]


_PROBE = r'''
import sys
import torch
from torch.utils.cpp_extension import load_inline

helpers, number, build = sys.argv[1], sys.argv[2], sys.argv[3]
source = "#include <torch/extension.h>\n#include <string>\n" + helpers + r"""
int64_t check(torch::Tensor t) {
  const int64_t batch = t.size(0) * 104 + 4;
  TORCH_CHECK(batch % 8 == 0, "lw_bmm: op(A)'s batch stride (", """ + number + r""",
              ") must be a multiple of 8 elements; got shape ", lw_text(t.sizes()));
  return batch;
}
"""
ext = load_inline(name=f"lw_glue_probe_{len(number)}", cpp_sources=source, functions=["check"],
                  extra_ldflags=["-static-libstdc++"], build_directory=build)
try:
    ext.check(torch.zeros(5005))
except RuntimeError as e:
    print(str(e).splitlines()[0])
'''


@pytest.mark.slow  # two C++ builds, about a minute
def test_a_statically_linked_runtime_keeps_the_whole_message(tmp_path):
    """The toolchain shape that crashed on the GPU machine (the C++ runtime linked into the
    extension: it needs no libstdc++.so and defines std:: itself), rebuilt on this machine with
    ``-static-libstdc++``: the glue's formatting keeps the whole message, while inserting the
    number into the process's ostream loses it (here everything after it; there, a crash)."""
    import subprocess
    import sys

    from loopwise.kernels.expert.generate import _templates

    helpers = _templates().from_string('{% from "_glue.j2" import message_text %}{{ message_text() }}').render()
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    said = {}
    for form, number in [("text", "lw_text(batch)"), ("ostream", "batch")]:
        build = tmp_path / form
        build.mkdir()
        done = subprocess.run([sys.executable, str(probe), helpers, number, str(build)], capture_output=True,
                              text=True, timeout=600)
        said[form] = (done.returncode, done.stdout.strip())
        if form == "text":
            assert done.returncode == 0, done.stderr[-2000:]
            (so,) = build.glob("*.so")
            linked = subprocess.run(["ldd", str(so)], capture_output=True, text=True).stdout
            assert "libstdc++" not in linked  # the shape of the GPU machine's builds
    assert said["text"] == (0, "lw_bmm: op(A)'s batch stride (520524) must be a multiple of 8 elements; "
                               "got shape [5005]")
    assert said["ostream"] != said["text"]  # truncated after "(" or a crash
