"""Runtime guards inside the sandbox: patched timers, injected threads, changed precision flags.

Snapshots are taken before the candidate's code is imported; any later difference is reported
by name. These guards cannot make a process safe against code that wants to escape them (the
process boundary does that); they make the common cheats visible with a named reason.
"""

from __future__ import annotations

import builtins
import os
import threading
import time


def _targets():
    import torch

    pairs = [
        (time, "perf_counter"), (time, "perf_counter_ns"), (time, "time"), (time, "monotonic"),
        (builtins, "type"), (builtins, "isinstance"), (threading, "enumerate"),
        (torch, "allclose"), (torch, "equal"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"),
        (torch.Tensor, "cpu"), (torch.Tensor, "to"), (torch.nn.Module, "__call__"),
    ]
    if torch.cuda.is_available():
        pairs += [
            (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
            (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
            (torch.cuda.Event, "__init__"), (torch.cuda.Stream, "synchronize"),
            (torch.cuda, "current_stream"),
        ]
    return pairs


def _label(owner, name: str) -> str:
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"


class IdentityGuard:
    """Remembers the identity of timing and comparison functions, and of our own sandbox code."""

    def __init__(self, *own_modules) -> None:
        self._snap = {}
        for owner, name in _targets():
            self._snap[_label(owner, name)] = (owner, name, owner.__dict__.get(name, getattr(owner, name, None)))
        for mod in own_modules:
            for name, value in list(vars(mod).items()):
                if callable(value) and not name.startswith("__"):
                    self._snap[f"{mod.__name__}.{name}"] = (mod, name, value)
                if isinstance(value, type) and value.__module__ == mod.__name__:
                    # Methods of our classes too (Clock.run): replacing a class attribute leaves the
                    # module-level names untouched.
                    for attr, member in list(vars(value).items()):
                        if not attr.startswith("__") or attr in ("__init__", "__call__"):
                            self._snap[f"{mod.__name__}.{name}.{attr}"] = (value, attr, member)

    def changed(self) -> list[str]:
        out = []
        for label, (owner, name, value) in self._snap.items():
            now = owner.__dict__.get(name, getattr(owner, name, None))
            if now is not value:
                out.append(label)
        return out


def precision_flags() -> dict[str, object]:
    """Every precision switch torch has; one that cannot be read is recorded as such (newer torch
    raises on the legacy flags once the ``fp32_precision`` API has been used)."""
    import torch

    readers = {
        "matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "matmul.allow_fp16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.allow_bf16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "matmul.fp32_precision": lambda: getattr(torch.backends.cuda.matmul, "fp32_precision", None),
        "cudnn.fp32_precision": lambda: getattr(torch.backends.cudnn, "fp32_precision", None),
    }
    flags: dict[str, object] = {}
    for name, read in readers.items():
        try:
            flags[name] = read()
        except Exception as exc:  # noqa: BLE001
            flags[name] = f"unreadable ({type(exc).__name__})"
    return flags


def pin_fp32_flags() -> None:
    """No TF32 anywhere, for the reference and the candidate alike (FACTS §4.3)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def native_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class ThreadWatch:
    """Python threads alive after a call that were not alive before it."""

    def __init__(self) -> None:
        self._enumerate = threading.enumerate

    def snapshot(self) -> set[int]:
        return {id(t) for t in self._enumerate()}

    def new_since(self, before: set[int]) -> list[str]:
        return [t.name for t in self._enumerate() if id(t) not in before and t.is_alive()]

    def split_by_origin(self, names: list[str]) -> tuple[list[str], list[str]]:
        """(threads running candidate code, threads of libraries such as torch.compile's pools)."""
        by_name = {t.name: t for t in self._enumerate()}
        own, library = [], []
        for name in names:
            (own if _runs_candidate_code(by_name.get(name)) else library).append(name)
        return own, library


CANDIDATE_MODULE = "candidate_module"


def _runs_candidate_code(thread) -> bool:
    if thread is None:
        return True  # gone already: count it against the candidate
    if type(thread).__module__ == CANDIDATE_MODULE:
        return True  # a Thread subclass written by the candidate
    target = getattr(thread, "_target", None)
    owner = getattr(target, "__self__", None)
    modules = {getattr(target, "__module__", None), type(owner).__module__ if owner is not None else None}
    return CANDIDATE_MODULE in modules
