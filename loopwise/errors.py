"""User-facing errors: a mistake in the user's input is reported as one line, never a traceback."""


class UserError(Exception):
    """A problem with what the user gave us (a file, a flag, a config value).

    The CLI prints ``str(error)`` on one line and exits with status 2.
    """


class ProblemError(UserError):
    """A KernelBench-format problem file that cannot be used, with the file and the fault."""

    def __init__(self, path: str, fault: str) -> None:
        super().__init__(f"{path}: {fault}")
        self.path = path
        self.fault = fault


class CandidateError(UserError):
    """A candidate source file that cannot be read at all (missing, not UTF-8)."""
