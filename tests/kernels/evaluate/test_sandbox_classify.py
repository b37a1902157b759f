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
