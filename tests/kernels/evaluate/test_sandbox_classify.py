"""How the sandbox names a candidate's exception: a compile error keeps its whole message (the
source line and caret Triton prints under its first line), so a repair request can show it."""

from loopwise.kernels.evaluate.sandbox import classify_exception


class CompilationError(Exception):
    """Named like Triton's, which the sandbox recognises by name."""


def test_a_compile_error_keeps_its_whole_message_within_a_bound():
    message = ("at 24:13:\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    acc = tl.dot(a, b)\n"
               "             ^\nAssertionError('Both inputs must be either 2D or 3D; (lhs: [32] vs rhs: [32])')")
    fail = classify_exception(CompilationError(message), "forward")
    assert fail.status == "compile_error" and fail.code == "compile_error"
    assert "Both inputs must be either 2D or 3D" in fail.message and "acc = tl.dot(a, b)" in fail.message
    assert len(classify_exception(CompilationError("x\n" * 10000), "forward").message) <= 4000


def test_a_runtime_error_is_still_one_line():
    fail = classify_exception(ValueError("bad shape\nmore detail"), "forward")
    assert fail.status == "crash" and fail.message == "ValueError: bad shape"


def test_a_compile_error_reads_on_one_line_with_its_place_and_cause():
    from loopwise.kernels.evaluate.result import Evaluation, Reason

    message = "at 24:13:\n    acc = tl.dot(a, b)\n             ^\nAssertionError('Both inputs must be 2D')"
    ev = Evaluation(status="compile_error", problem="p", candidate="c",
                    reasons=[Reason(code="compile_error", message=message, severity="reject")])
    assert ev.summary() == "compile_error (compile_error: at 24:13: ... AssertionError('Both inputs must be 2D'))"


BAD_DOT = '''import triton
import triton.language as tl


@triton.jit
def bad(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    acc = tl.dot(a, a)
    tl.store(out_ptr + offs, acc)
'''


def test_tritons_own_compile_error_keeps_the_failing_line_and_its_cause(tmp_path):
    """Triton's real CompilationError (its front end, compiling for sm_90 ahead of time on this
    machine): the repair request gets the line, the caret and the cause, not only "at 4:10:".
    Compiled in a process of its own: a test before it that ran a kernel in Triton's interpreter
    can leave this process's Triton patched, where a compile fails with a bare AssertionError."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "bad_dot.py").write_text(BAD_DOT)
    script = f"""
import importlib.util, json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from loopwise.kernels.evaluate.sandbox import classify_exception
spec = importlib.util.spec_from_file_location("bad_dot", {str(tmp_path / "bad_dot.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
source = ASTSource(module.bad, {{"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}}, {{"BLOCK": 32}})
try:
    triton.compile(source, target=GPUTarget("cuda", 90, 32))
except Exception as exc:
    fail = classify_exception(exc, "forward")
    print(json.dumps({{"type": type(exc).__name__, "status": fail.status, "message": fail.message}}))
else:
    print(json.dumps({{"type": "none"}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["type"] != "none", "a 1-D tl.dot compiled"
    assert got["status"] == "compile_error", got
    lines = got["message"].splitlines()
    assert lines[0].startswith("CompilationError: at ") and "acc = tl.dot(a, a)" in got["message"]
    assert any(line.strip() == "^" for line in lines) and lines[-1].strip() not in ("", "^")  # the cause
