"""The C++ glue of every compiled template formats the numbers and shapes in its messages as text
before TORCH_CHECK sees them: in an extension whose C++ runtime is linked in statically, a number
inserted into an ostream crashed the process (the GPU machine's builds) or cut the message short
(``-static-libstdc++`` here), turning a refusal into a segfault or a riddle."""

from __future__ import annotations

import ast
import itertools
import re
from importlib import resources

import pytest

from loopwise.kernels.expert import matmul_variants
from loopwise.kernels.expert.generate import render
from loopwise.kernels.expert.proposer import SPACE

from expert_judging import bmm_pattern, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path

#: What a message argument may be: a string literal, a ternary of literals, the glue's ``const
#: char* name`` parameter, or one call that formats as text (``lw_text``, ``std::to_string``,
#: ``c10::toString``) and nothing after it.
_LITERAL = re.compile(r'^("[^"]*"|\w+ \? "[^"]*" : "[^"]*")$', re.S)
_FORMATTERS = ("lw_text(", "std::to_string(", "c10::toString(")
#: Every way C++ may put a value into an ostream here: TORCH_CHECK and its kin (any spacing before
#: the parenthesis), other c10 message macros, and stream insertion itself.
_MESSAGE_MACRO = re.compile(r"\b(TORCH_\w+|AT_\w+|C10_\w+)\s*\(")
_STREAMS = re.compile(r"(?<!<)<<(?!<)|\bstd::(cout|cerr|clog|ostringstream|stringstream)\b|\bc10::str\s*\(|#define")


def _matching(text: str, opening: int) -> int:
    """The index of the parenthesis that closes the one at ``opening`` (string literals skipped)."""
    depth, quoted = 0, False
    for i in range(opening, len(text)):
        c = text[i]
        if c == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
            if depth == 0:
                return i
    raise AssertionError(f"unclosed: {text[opening:opening + 80]}")


def _arguments(call: str) -> list[str]:
    """The top-level comma-separated arguments of the macro call whose text starts at ``call``."""
    opening = call.index("(")
    body = call[opening + 1:_matching(call, opening)]
    depth, start, parts, quoted = 0, 0, [], False
    for i, c in enumerate(body):
        if c == '"' and (i == 0 or body[i - 1] != "\\"):
            quoted = not quoted
        if quoted:
            continue
        if c in "([{" or (c == "<" and body[i - 1:i] not in (" ", "<") and body[i + 1:i + 2] != " "):
            depth += 1
        elif c in ")]}" or (c == ">" and body[i - 1:i] not in (" ", ">", "-", "=") and depth > 0):
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    return parts + [body[start:].strip()]


def _is_text(argument: str, glue: str) -> bool:
    if _LITERAL.match(argument):
        return True
    if argument == "name":
        return bool(re.search(r"\bconst char\* name\b", glue))
    opening = next((len(f) - 1 for f in _FORMATTERS if argument.startswith(f)), None)
    return opening is not None and _matching(argument, opening) == len(argument) - 1


def _cpp(source: str) -> dict[str, str]:
    """The module-level C++ strings of a candidate (GLUE, KERNEL, ...), read without importing it."""
    strings = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    strings[target.id] = node.value.value
    assert "GLUE" in strings, "no GLUE string"
    return strings


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
    example = resources.files("loopwise.kernels.examples") / "cute_gemm" / "bf16_gemm_cutlass.py"
    yield "cute_gemm_example", example.read_text()


def _untextual(source: str) -> list[str]:
    """What in a candidate's C++ would put a value into an ostream: each macro argument that is not
    text, and each stream or macro of another kind."""
    found = []
    for label, cpp in _cpp(source).items():
        found += [f"{label}: {m.group(0)!r}" for m in _STREAMS.finditer(cpp)]
        for m in _MESSAGE_MACRO.finditer(cpp):
            if m.group(1) != "TORCH_CHECK":
                found.append(f"{label}: {m.group(1)}")
                continue
            condition, *message = _arguments(cpp[m.start():])
            found += [f"{label}: {a!r} goes through an ostream" for a in message if not _is_text(a, cpp)]
    return found


@pytest.mark.parametrize("kind,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_every_message_argument_is_text(kind, source):
    glue = _cpp(source)["GLUE"]
    assert len(re.findall(r"\bTORCH_CHECK\s*\(", glue)) >= 2, kind
    assert _untextual(source) == [], kind
    if kind != "cute_gemm_example":
        assert "static std::string lw_text(int64_t value)" in glue


@pytest.mark.parametrize("line", [
    'TORCH_CHECK(s == 0, "refused at step ", status, " for ", lw_text(m));',
    'TORCH_CHECK (s == 0, "refused at step ", status);',
    'TORCH_CHECK(\n    s == 0, "refused at step ", status);',
    'TORCH_CHECK(s == 0, "x ", lw_text(m).size());',
    'TORCH_CHECK(s == 0, "x ", std::to_string(m).length());',
    'TORCH_CHECK(s == 0, "x ", lw_text(m) == "8" ? (m) : (n));',
    'TORCH_CHECK(s == 0, "x ", c10::toString(t) + 0 * (m));',
    'TORCH_CHECK(s == 0, "x ", name);',
    'TORCH_CHECK_EQ(m, n) << m;',
    'TORCH_CHECK_VALUE(m == n, "x ", m);',
    'TORCH_INTERNAL_ASSERT(m == n, "x ", m);',
    'TORCH_WARN("x ", m);',
    'std::cerr << m;',
    '#define LW_CHECK TORCH_CHECK\nLW_CHECK(m == n, "x ", m);',
])
def test_the_rule_catches_a_number_however_it_is_written(line):
    for where in ("GLUE", "KERNEL"):
        source = f'KERNEL = r"""\n{line if where == "KERNEL" else ""}\n"""\nGLUE = r"""\n{line if where == "GLUE" else ""}\n"""\n'
        assert _untextual(source), (where, line)


def test_the_rule_passes_text():
    source = ('GLUE = r"""\nstatic int64_t f(const torch::Tensor& t, const char* name) {\n'
              '  TORCH_CHECK(t.size(0) < 8 && t.dim() > 1, "f: ", name, " has ", lw_text(t.size(0)), " rows, ",\n'
              '              lw_text(t.sizes()), " ", c10::toString(t.scalar_type()), ok ? "a" : "b");\n}\n"""\n')
    assert _untextual(source) == []


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
