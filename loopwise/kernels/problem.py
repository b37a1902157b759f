"""KernelBench-format problems: find them, load them, and check them before anything runs.

A problem is a Python file defining ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``. Every fault in such a file becomes a one-line :class:`ProblemError`
naming the file, never a traceback: the user wrote the file, so the user gets a sentence.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwise.errors import ProblemError, UserError

KERNELBENCH_ENV = "LOOPWISE_KERNELBENCH"
_DEFAULT_CHECKOUT = Path("third_party") / "KernelBench"
_SPEC_PREFIX = "kernelbench:"
_SPEC_RE = re.compile(r"^(?:level)?(\d+)/(\d+)$")
_PROBLEM_FILE_RE = re.compile(r"^(\d+)_.*\.py$")
_REPR_LIMIT = 200
# Words in the messages torch raises when an op cannot run on meta tensors (no data, no kernel).
_META_WORDS = ("meta", "fake tensor", "data pointer", "no data")

# torch.fx's symbolic trace patches torch.nn.Module.__call__ and __getattr__ (and the functions it
# wraps) for the whole process while it runs, so a module called on another thread meanwhile lands
# in that trace (fx raises "module is not installed as a submodule", or records the call). Whatever
# in this process traces, builds or runs a problem's Model holds this lock: a bench runs its
# problems on threads, each one's expert tracing while another's work is counted.
MODELS_IN_PROCESS = threading.RLock()


@dataclass(frozen=True)
class ProblemSignature:
    """What validation learned about a problem without allocating its tensors.

    Attributes:
        input_shapes: shape of each ``get_inputs()`` item, ``None`` for non-tensors.
        input_dtypes: dtype name of each item (``"float32"``), ``None`` for non-tensors.
        init_args: ``repr`` of ``get_init_inputs()``, shortened when long.
        skipped: sub-checks that could not run on the meta device, each with the reason.
        model_dtypes: the dtype names of the model's floating-point parameters and buffers, each
            once, in order (a bf16 table read by int64 indices computes in bf16).
    """

    input_shapes: tuple[tuple[int, ...] | None, ...] = ()
    input_dtypes: tuple[str | None, ...] = ()
    init_args: str = "[]"
    skipped: tuple[str, ...] = ()
    model_dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Problem:
    """One problem file, read once; its identity is its content hash.

    Attributes:
        name: ``level1/19_ReLU`` for KernelBench problems, else the file stem.
        path: where the source was read from.
        source: the file's text.
        sha256: hex digest of ``source`` (UTF-8).
        level: KernelBench level, when known.
        problem_id: KernelBench problem number, when known.
        signature: filled by :func:`load_problem` when it validated the problem.
    """

    name: str
    path: Path
    source: str
    sha256: str
    level: int | None = None
    problem_id: int | None = None
    signature: ProblemSignature | None = field(default=None, compare=False, repr=False)

    def load_module(self, module_name: str | None = None, register: bool = False) -> types.ModuleType:
        """Executes the source into a fresh module.

        Args:
            module_name: the module's ``__name__``; defaults to one derived from the hash.
            register: also put the module in ``sys.modules`` (needed for pickling, and by
                code that looks itself up there).

        Returns:
            The executed module, with ``__file__`` set to :attr:`path`.

        Raises:
            Whatever the source raises; :func:`validate_problem` turns that into a ``ProblemError``.
        """
        name = module_name or f"loopwise_problem_{self.sha256[:12]}"
        module = types.ModuleType(name)
        module.__file__ = str(self.path)
        code = compile(self.source, str(self.path), "exec")
        if register:
            sys.modules[name] = module
        exec(code, module.__dict__)
        return module

    def describe(self) -> str:
        """One line for people: name, short hash and, if validated, the input shapes."""
        text = f"{self.name} ({self.sha256[:12]})"
        if self.signature is not None:
            shapes = ", ".join(_shape_text(s, d) for s, d in
                               zip(self.signature.input_shapes, self.signature.input_dtypes))
            text += f" inputs: [{shapes}] init: {self.signature.init_args}"
        return text


def load_problem(spec: str, kernelbench: str | None = None, validate: bool = True) -> Problem:
    """Reads a problem from a file path or a ``kernelbench:LEVEL/ID`` spec.

    Args:
        spec: a path to a ``.py`` file, or ``kernelbench:1/19`` for level 1, problem 19.
        kernelbench: KernelBench checkout (repo root or its inner ``KernelBench`` folder);
            defaults to ``$LOOPWISE_KERNELBENCH``, then ``./third_party/KernelBench``.
        validate: run :func:`validate_problem` and attach its signature.

    Returns:
        The problem.

    Raises:
        UserError: bad spec syntax, or no usable checkout.
        ProblemError: the file is missing, unreadable, or fails validation.
    """
    if spec.startswith(_SPEC_PREFIX):
        path, level, problem_id = _resolve_kernelbench(spec, kernelbench)
    else:
        path = Path(spec)
        level, problem_id = _infer_level_and_id(path)
    problem = _read(path, level, problem_id)
    if validate:
        problem = _with_signature(problem, validate_problem(problem))
    return problem


def _with_signature(problem: Problem, signature: ProblemSignature) -> Problem:
    return Problem(problem.name, problem.path, problem.source, problem.sha256,
                   problem.level, problem.problem_id, signature)


def _read(path: Path, level: int | None, problem_id: int | None) -> Problem:
    if not path.exists():
        raise ProblemError(str(path), "no such file")
    if not path.is_file():
        raise ProblemError(str(path), "not a file (expected a Python problem file)")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ProblemError(str(path), f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise ProblemError(str(path), f"cannot read: {error.strerror}") from None
    name = f"level{level}/{path.stem}" if level is not None else path.stem
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return Problem(name, path, source, digest, level, problem_id)


def _infer_level_and_id(path: Path) -> tuple[int | None, int | None]:
    # A path into a checkout (…/level1/19_ReLU.py) names the same problem as kernelbench:1/19.
    level_match = re.fullmatch(r"level(\d+)", path.parent.name)
    id_match = _PROBLEM_FILE_RE.match(path.name)
    if level_match and id_match:
        return int(level_match.group(1)), int(id_match.group(1))
    return None, None


def _resolve_kernelbench(spec: str, kernelbench: str | None) -> tuple[Path, int, int]:
    match = _SPEC_RE.match(spec[len(_SPEC_PREFIX):].strip())
    if match is None:
        raise UserError(f"bad problem spec {spec!r}: expected kernelbench:LEVEL/ID, e.g. kernelbench:1/19")
    level, problem_id = int(match.group(1)), int(match.group(2))
    root = _find_checkout(kernelbench)
    level_dir = root / f"level{level}"
    if not level_dir.is_dir():
        levels = sorted(int(p.name[5:]) for p in root.glob("level*") if p.name[5:].isdigit())
        raise UserError(f"KernelBench level {level} not found in {root} (levels there: "
                        f"{', '.join(map(str, levels)) or 'none'})")
    found = sorted(p for p in level_dir.glob(f"{problem_id}_*.py") if _PROBLEM_FILE_RE.match(p.name))
    if len(found) != 1:
        count = sum(1 for p in level_dir.iterdir() if _PROBLEM_FILE_RE.match(p.name))
        what = "no problem" if not found else f"{len(found)} files for problem"
        raise UserError(f"{what} {problem_id} in KernelBench level {level} at {level_dir} "
                        f"(level {level} has {count} problems)")
    return found[0], level, problem_id


def _find_checkout(kernelbench: str | None) -> Path:
    if kernelbench:
        return _checkout_root(Path(kernelbench), "--kernelbench")
    env = os.environ.get(KERNELBENCH_ENV)
    if env:
        return _checkout_root(Path(env), KERNELBENCH_ENV)
    if _DEFAULT_CHECKOUT.is_dir():
        return _checkout_root(_DEFAULT_CHECKOUT, "the default ./third_party/KernelBench")
    raise UserError(f"no KernelBench checkout: pass --kernelbench PATH or set {KERNELBENCH_ENV} "
                    "(a clone of github.com/ScalingIntelligence/KernelBench)")


def _checkout_root(path: Path, given_by: str) -> Path:
    """The folder holding ``level1/``…, from either the repo root or its inner ``KernelBench``."""
    for candidate in (path / "KernelBench", path):
        if candidate.is_dir() and any(candidate.glob("level[0-9]*")):
            return candidate
    raise UserError(f"{path} (from {given_by}) is not a KernelBench checkout: "
                    "no level1/ or KernelBench/level1/ folder in it")


def validate_problem(problem: Problem) -> ProblemSignature:
    """Executes a problem and checks it against the KernelBench contract, cheaply.

    ``get_inputs()`` and ``Model(...)`` run under ``torch.device("meta")``, so KernelBench's
    multi-gigabyte inputs cost no memory. A sub-check that fails only because an op has no
    meta implementation is skipped and listed in ``skipped``, not reported as a fault.

    Args:
        problem: the problem to check.

    Returns:
        Input shapes and dtypes, and the constructor arguments.

    Raises:
        ProblemError: one line naming the file and the fault.
    """
    import torch

    path = str(problem.path)
    module = _import(problem)
    model_cls, get_inputs, get_init_inputs = _contract_names(module, path)
    skipped: list[str] = []
    model = None
    with MODELS_IN_PROCESS, torch.device("meta"):
        init_args = _call_listy(get_init_inputs, "get_init_inputs", path, skipped)
        inputs = _call_listy(get_inputs, "get_inputs", path, skipped)
        if init_args is not None:
            model = _construct(model_cls, init_args, path, skipped)
    shapes, dtypes = _describe_inputs(inputs or [])
    init_text = "?" if init_args is None else _short_repr(init_args)
    return ProblemSignature(shapes, dtypes, init_text, tuple(skipped), _model_dtypes(model))


def _model_dtypes(model) -> tuple[str, ...]:
    """The dtype names of ``model``'s floating-point parameters and buffers, each once, in order."""
    if model is None:
        return ()
    found = [str(t.dtype).removeprefix("torch.") for t in (*model.parameters(), *model.buffers())
             if t.is_floating_point()]
    return tuple(dict.fromkeys(found))


def _import(problem: Problem) -> types.ModuleType:
    path = str(problem.path)
    try:
        compile(problem.source, path, "exec")
    except SyntaxError as error:
        raise ProblemError(path, f"syntax error at line {error.lineno}: {error.msg}") from None
    except ValueError as error:  # e.g. null bytes in the source
        raise ProblemError(path, f"cannot compile: {error}") from None
    try:
        return problem.load_module()
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a problem file may raise anything
        raise ProblemError(path, f"import failed: {_one_line(error, path)}") from None


def _contract_names(module: types.ModuleType, path: str) -> tuple[type, Callable, Callable]:
    import torch

    names = ("Model", "get_inputs", "get_init_inputs")
    missing = [name for name in names if not hasattr(module, name)]
    if missing:
        raise ProblemError(path, f"missing {', '.join(missing)} (a problem defines class Model(nn.Module), "
                                 "get_inputs() and get_init_inputs())")
    model_cls = module.Model
    if not isinstance(model_cls, type):
        raise ProblemError(path, f"Model is {_kind(model_cls)}, not a torch.nn.Module subclass")
    if not issubclass(model_cls, torch.nn.Module):
        raise ProblemError(path, "Model is not a torch.nn.Module subclass (write class Model(nn.Module))")
    for name in names[1:]:
        if not callable(getattr(module, name)):
            raise ProblemError(path, f"{name} is not callable (it is {_kind(getattr(module, name))})")
    return model_cls, module.get_inputs, module.get_init_inputs


def _call_listy(fn: Callable, name: str, path: str, skipped: list[str]) -> list | None:
    """Calls ``fn()`` and checks it returns a list or tuple; ``None`` if only meta got in the way."""
    try:
        result = fn()
    except Exception as error:  # noqa: BLE001 - any fault in user code is reported, not raised
        if _is_meta_failure(error):
            skipped.append(f"{name}() on the meta device ({_first_line(error)})")
            return None
        raise ProblemError(path, f"{name}() raised {_one_line(error, path)}") from None
    if not isinstance(result, (list, tuple)):
        raise ProblemError(path, f"{name}() returned {_kind(result)}, expected a list or tuple")
    return list(result)


def _construct(model_cls: type, init_args: list, path: str, skipped: list[str]):
    """The model built from ``init_args``, or None where only the meta device got in the way."""
    try:
        return model_cls(*init_args)
    except Exception as error:  # noqa: BLE001 - any fault in user code is reported, not raised
        if not _is_meta_failure(error):
            raise ProblemError(path, f"Model(*get_init_inputs()) raised {_one_line(error, path)}") from None
        skipped.append(f"Model(...) on the meta device ({_first_line(error)})")
        return None


def _is_meta_failure(error: BaseException) -> bool:
    text = str(error).lower()
    return any(word in text for word in _META_WORDS)


def _describe_inputs(inputs: list[Any]) -> tuple[tuple, tuple]:
    import torch

    shapes = tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs)
    dtypes = tuple(str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else None
                   for x in inputs)
    return shapes, dtypes


def _one_line(error: BaseException, path: str) -> str:
    """``ValueError: message (line 12)`` with the innermost line that is in the problem file."""
    text = f"{type(error).__name__}: {_first_line(error)}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path]
    return f"{text} (line {lines[-1]})" if lines else text


def _first_line(error: BaseException) -> str:
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no message)"


def _kind(value: object) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"a Tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _shape_text(shape: tuple[int, ...] | None, dtype: str | None) -> str:
    if shape is None:
        return "non-tensor"
    return f"{dtype}{list(shape)}"
