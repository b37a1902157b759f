"""The sandbox process: the only process where candidate code runs.

One fresh process per candidate, started ahead of time by the pool: forked from a server process
that imported torch once and never initialized CUDA (so CUDA starts clean here), or spawned (see
pool.py). It never sees reference outputs: the judge sends inputs and output shapes, the
sandbox sends back what the candidate computed, plus what its guards saw. A crash, hang or CUDA
fault here costs one evaluation; the judge kills the process and the pool starts another.

Protocol: the judge sends ``(op, payload)``; the sandbox answers ``("ok", dict)`` or
``("error", {"status", "code", "message"})``. Tensors travel as CPU tensors in shared memory, or as
CUDA tensors (IPC handles) once the judge's transfer probe has shown that works.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tempfile
import traceback

from loopwise.kernels.evaluate import environment
from loopwise.kernels.evaluate.sandbox import CandidateFailure, Session, classify_exception

# What the sandbox process imports before it says it is ready, and what the pool's fork server
# imports once for every sandbox forked from it.
PRELOAD = ["torch", "torch.multiprocessing", "torch.utils._python_dispatch", "torch._dynamo",
           "torch.utils.cpp_extension", "triton", "triton.language", "loopwise.kernels.evaluate.sandbox_process"]


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


OPS = {"load", "trial", "stage", "time", "energy", "launches", "capture", "probe_transfer"}


def _preload() -> None:
    """Imports every candidate needs (PRELOAD), before the sandbox says it is ready (spares
    start in the background, so this costs the evaluation nothing): Triton, the C++ extension
    loader, and the dispatch-mode machinery the data-flow check uses, whose first use imports
    torch._dynamo (2-5 s). A sandbox forked from the preloaded server finds them imported."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional backend that is not installed
            pass


def _uncaught(exc: BaseException, op: str) -> CandidateFailure:
    """A failure outside the candidate's own calls (a check of the sandbox's, between them): logged
    with its traceback and classified like the candidate's."""
    traceback.print_exception(exc)
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    return classify_exception(exc, op)


def sandbox_main(conn, device: str, log_path: str, settings: dict) -> None:
    """Entry point of the sandbox process."""
    # Its own session, so a kill takes compilers it started (nvcc, ninja) down with it; and a cache
    # folder of its own, so nothing it writes is read by the judge or by another candidate.
    os.setsid()
    # A forked sandbox (LOOPWISE_SANDBOX_START=fork) would inherit the CLI's SIGTERM handler, which
    # a candidate hung in C code never returns to run: the judge's terminate must end it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Only the allow-listed environment, before any candidate code: no API key or token to read.
    environment.enter_sandbox(settings.get("environ"))
    os.environ["LOOPWISE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=settings.get("scratch"))
    _redirect_output(log_path)
    import torch
    import torch.multiprocessing  # noqa: F401 - registers tensor reductions for the pipe

    if device.startswith("cuda"):
        # a bare "cuda" means the current GPU (set_device needs an index)
        torch.cuda.set_device(torch.device(device) if ":" in device else torch.cuda.current_device())
        frac = settings.get("gpu_memory_fraction")
        if frac:
            torch.cuda.set_per_process_memory_fraction(float(frac))
    _preload()
    session = Session(device, settings)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    # What lives now (torch, Triton, this code: some 300,000 objects) lives until the process ends:
    # out of the cyclic collector's sight, the full collection before each timed pass (timing) walks
    # only what the candidate made, not all of it (a tenth of a second or more, each pass).
    gc.collect()
    gc.freeze()
    conn.send(("ready", {"pid": os.getpid(), "device_name": name, "torch": torch.__version__}))
    while True:
        try:
            op, payload = conn.recv()
        except EOFError:
            op = "exit"
        if op == "exit":
            gc.unfreeze()  # an orderly exit: extensions report objects still frozen as leaks
            return
        try:
            if op not in OPS:
                raise CandidateFailure("crash", "protocol", f"unknown request {op!r}")
            reply = getattr(session, op)(payload)
            # Let go of the request's tensors before waiting for the next one: device tensors sent
            # by the judge (CUDA IPC) stay allocated in the judge until every receiver drops them.
            payload = None
            conn.send(("ok", reply))
            reply = None
        except BaseException as exc:  # noqa: BLE001 - the judge's own checks in here can fail too (out of memory)
            payload = reply = None
            fail = exc if isinstance(exc, CandidateFailure) else _uncaught(exc, op)
            if fail.status == "oom":
                from loopwise.kernels.evaluate.out_of_memory import REQUEST_PHASES, out_of_memory_message

                fail.message = out_of_memory_message("the sandbox", REQUEST_PHASES.get(op, op), fail.message)
            conn.send(("error", {"status": fail.status, "code": fail.code, "message": fail.message}))
            if fail.code == "cuda_fault":
                sys.stdout.flush()
                os._exit(3)  # the CUDA context is dead; the pool starts a fresh process
