"""The sandbox's session: what runs candidate code, in the only process where it runs.

A :class:`Session` holds one sandbox's state (the problem's inputs, the loaded model, the guards)
and answers the judge's requests: load, correctness trials, timing, energy, launches, CUDA-graph
capture, the transfer probe. It never sees reference outputs: the judge sends inputs and output
shapes, the sandbox sends back what the candidate computed, plus what its guards saw. The process
around it (its entry point and request loop) is ``sandbox_process``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
import traceback
from types import ModuleType

from loopwise.kernels.evaluate import guards, inputs, timing

_type = type  # captured before candidate code can touch builtins


def _dense(t) -> bool:
    """Whether ``t``'s elements fill its storage span exactly once (any order of dimensions)."""
    expected = 1
    for size, stride in sorted((d for d in zip(t.size(), t.stride()) if d[0] != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _reversed_copy(t):
    flat = t.reshape(-1)
    return flat.flip(0) if flat.numel() > 1 else flat.clone()


COMPILE_MESSAGE_MAX = 4000  # characters of a compile error's message kept in its reason


class CandidateFailure(Exception):
    def __init__(self, status: str, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _exec_problem(source: str, strip_models: bool) -> ModuleType:
    """The problem's inputs without its reference: nn.Module classes are removed when asked."""
    import torch

    module = ModuleType("loopwise_problem")
    module.__file__ = "<problem>"
    exec(compile(source, "<problem>", "exec"), module.__dict__)
    if strip_models:
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and issubclass(value, torch.nn.Module):
                delattr(module, name)
    return module


def _import_candidate(source: str, workdir: str) -> ModuleType:
    # A real file, because Triton reads kernel source through inspect.
    path = os.path.join(workdir, "candidate_module.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("candidate_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate_module"] = module
    spec.loader.exec_module(module)
    return module


def classify_exception(exc: BaseException, phase: str) -> CandidateFailure:
    """Maps an exception raised by candidate code to an evaluation status."""
    import torch

    text = f"{_type(exc).__name__}: {exc}"
    first = text.strip().splitlines()[0][:500] if text.strip() else _type(exc).__name__
    from loopwise.kernels.evaluate.out_of_memory import is_out_of_memory

    if isinstance(exc, torch.cuda.OutOfMemoryError) or is_out_of_memory(text):
        return CandidateFailure("oom", "out_of_memory", text[:2000])  # the allocator's figures follow the first line
    lowered = text.lower()
    if "illegal memory access" in lowered or "cuda error" in lowered or "misaligned address" in lowered \
            or "device-side assert" in lowered or "unspecified launch failure" in lowered:
        return CandidateFailure("crash", "cuda_fault", first)
    mod = _type(exc).__module__ or ""
    if phase == "load" or "CompilationError" in _type(exc).__name__ or mod.startswith("triton.compiler") \
            or "Error building extension" in text or "ninja" in lowered:
        # the whole message: Triton puts the failing source line, a caret and the cause under "at L:C:"
        return CandidateFailure("compile_error", "compile_error", text.strip()[:COMPILE_MESSAGE_MAX])
    return CandidateFailure("crash", "runtime_error", first)


class Session:
    """State of one sandbox: the problem inputs, the loaded model, the guards."""

    def __init__(self, device: str, settings: dict) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.settings = settings
        self.workdir = tempfile.mkdtemp(prefix="work-", dir=settings.get("scratch"))
        self.clock = timing.Clock(device)
        self.watch = guards.ThreadWatch()
        self.guard: guards.IdentityGuard | None = None
        self.flags_before: dict = {}
        self.model = None
        self.problem: ModuleType | None = None
        self.not_ready = 0
        self.staged: dict = {}

    # -- load -------------------------------------------------------------------------------
    def load(self, req: dict) -> dict:
        torch = self.torch
        kind = req["kind"]
        guards.pin_fp32_flags()
        if kind == "eager-tf32":  # the reference with TF32 allowed: what "just allow TF32" buys (not fp32 math)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
            torch.set_float32_matmul_precision("high")
        self.flags_before = guards.precision_flags()
        self.guard = guards.IdentityGuard(sys.modules[__name__], timing, guards, inputs)
        t0 = time.perf_counter()
        try:
            self.problem = _exec_problem(req["problem_source"], strip_models=(kind == "candidate"))
            if kind == "candidate":
                ext_dir = req.get("extensions_dir")
                if ext_dir:
                    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
                from loopwise.kernels import backends
                from loopwise.kernels.evaluate import launches

                backends.prepare_environment(req.get("backend_hints", {}), self.device)
                launches.install()
                module = _import_candidate(req["candidate_source"], self.workdir)
                cls = getattr(module, "ModelNew", None)
                if cls is None:
                    raise CandidateFailure("compile_error", "missing_modelnew", "the candidate defines no ModelNew")
            else:
                ref = _exec_problem(req["problem_source"], strip_models=False)
                cls = ref.Model
            model = inputs.build_model(cls, inputs.init_inputs(self.problem, self.device), self.device)
            if kind in ("compile", "max-autotune"):
                mode = None if kind == "compile" else "max-autotune-no-cudagraphs"
                model = torch.compile(model, mode=mode)
        except CandidateFailure:
            raise
        except BaseException as exc:  # candidate code may raise anything, SystemExit included
            traceback.print_exc()
            raise classify_exception(exc, "load") from None
        self.model = model
        return {"load_s": time.perf_counter() - t0, **self._violations()}

    def _violations(self) -> dict:
        flags = guards.precision_flags()
        changed = {k: (self.flags_before[k], v) for k, v in flags.items() if self.flags_before.get(k) != v}
        return {"patched": self.guard.changed() if self.guard else [],
                "flags_changed": {k: f"{a} -> {b}" for k, (a, b) in changed.items()}}

    # -- one correctness trial -------------------------------------------------------------
    def _poison_allocator(self, out_specs: list, phase: int = 0) -> None:
        """Leaves freed blocks of each output's size filled with the poison pattern (for a dtype
        without one, the fill of ``phase``: 0 for a call, 1 for its repeat)."""
        from loopwise.kernels.evaluate.compare import poison

        torch = self.torch
        blocks = []
        for shape, dtype in out_specs:
            t = torch.empty(shape, dtype=getattr(torch, dtype.split(".", 1)[1]), device=self.device)
            poison(t, phase)
            blocks.append(t)
        del blocks

    def _call(self, args: list) -> tuple[list, list[str]]:
        torch = self.torch
        before = self.watch.snapshot()
        try:
            with torch.no_grad():
                outs = inputs.flatten_outputs(self.model(*args))
                # Copies queued on the current stream the moment forward returns: an output still
                # being written by a side stream or a thread differs from its final value. The copy
                # reads back to front, so it reaches the elements a kernel writes last first.
                ready = [_reversed_copy(o) if _type(o) is torch.Tensor else None for o in outs]
            self.clock.sync()
        except BaseException as exc:
            traceback.print_exc()
            raise classify_exception(exc, "run") from None
        self.not_ready += sum(1 for o, r in zip(outs, ready)
                              if r is not None and not inputs.same_bits(_reversed_copy(o), r))
        return outs, self.watch.new_since(before)

    def _copy_out(self, t, on_device: bool):
        """A private copy of one output tensor for the judge, on the device or in host memory."""
        torch = self.torch
        return torch.Tensor.clone(t.detach()) if on_device else torch.Tensor.to(t.detach(), "cpu", copy=True)

    def _keep_slots(self, result, keep, on_device: bool) -> dict[int, list]:
        """Buffers for the kept outputs, made before the timed loop (untimed): a copy allocated
        between trials would take a block from the caching allocator, and the next timed call
        would then allocate its output afresh (cudaMalloc inside the timed window)."""
        torch = self.torch
        where = self.device if on_device else "cpu"
        slots = {}
        for i in keep:
            slots[i] = [torch.empty_strided(o.size(), o.stride(), dtype=o.dtype, device=where)
                        if _type(o) is torch.Tensor and _dense(o) else None
                        for o in inputs.flatten_outputs(result)]
        return slots

    def _keep_copy(self, t, slot, on_device: bool):
        """``t`` copied into its pre-made buffer when that matches it exactly, else a fresh copy."""
        if (slot is not None and slot.size() == t.size() and slot.stride() == t.stride()
                and slot.dtype == t.dtype):
            return self.torch.Tensor.copy_(slot, t.detach())
        return self._copy_out(t, on_device)

    def _on_device(self, req: dict) -> bool:
        """Whether the judge asked for device tensors back (see LocalJudge._probe_transfer)."""
        return bool(req.get("device_outputs")) and self.device.startswith("cuda")

    def _export(self, outs: list, on_device: bool = False) -> tuple[list, list[str]]:
        """Private copies of the outputs for the judge: on the device (sent as CUDA IPC handles)
        when the judge asked for it, else in host memory."""
        torch = self.torch
        kinds = [_type(o).__name__ for o in outs]
        exported = []
        for o in outs:
            if _type(o) is torch.Tensor:
                exported.append(self._copy_out(o, on_device))
            elif _type(o) in (int, float, bool):
                exported.append(o)  # plain numbers cannot defer work
            else:
                exported.append(None)
        return exported, kinds

    def trial(self, req: dict) -> dict:
        """One correctness trial. With ``make_room`` (a problem whose tensors take GBs: see
        ``Reference.crowded``), the cached device memory of this process goes back to the driver
        before the trial (what the last trial's outputs left, once the judge let go of them) and
        after it (everything the trial made but the outputs it sends), so the judge on the same GPU
        can run the reference between trials."""
        if req.get("make_room"):
            self._make_room()
        reply = self._trial(req)
        if req.get("make_room"):
            self._make_room()
        return reply

    def _make_room(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.ipc_collect()  # outputs sent before that the judge has let go of
            self.torch.cuda.empty_cache()

    def _trial(self, req: dict) -> dict:
        torch = self.torch
        args = inputs.to_device(req["inputs"], self.device)
        pristine = inputs.clone_args(args)
        self._poison_allocator(req["out_specs"])
        outs, threads = self._call(args)
        # every input the call changed (bits, dtype, shape, device; see inputs.changed), with the
        # value it left there: the judge holds it to what the reference leaves in that input
        mutated = inputs.changed_at(args, pristine)
        reply = {"threads": threads, "mutated": mutated,
                 "moved": [i for i in mutated if args[i].device != pristine[i].device]}
        on_device = self._on_device(req)
        reply["outputs"], reply["types"] = self._export(outs, on_device)
        reply["mutated_values"], _ = self._export([args[i] for i in mutated], on_device)
        del outs
        if req.get("repeat"):
            self._poison_allocator(req["out_specs"], phase=1)
            outs, more = self._call(inputs.clone_args(pristine))
            reply["repeat_outputs"], _ = self._export(outs, on_device)
            reply["threads"] += more
        if req.get("refill") is not None:
            # Same buffers, new values: a cache keyed on pointers or shapes returns stale results.
            fresh = inputs.to_device(req["refill"], self.device)
            for a, f in zip(args, fresh):
                if isinstance(a, torch.Tensor):
                    a.copy_(f)
            self._poison_allocator(req["out_specs"])
            outs, more = self._call(args)
            reply["refill_outputs"], _ = self._export(outs, on_device)
            reply["threads"] += more
        reply["not_ready"], self.not_ready = self.not_ready, 0
        reply["threads"], reply["library_threads"] = self.watch.split_by_origin(reply["threads"])
        reply.update(self._violations())
        return reply

    # -- timing ----------------------------------------------------------------------------
    def stage(self, req: dict) -> dict:
        """Puts the timing input sets on the device, so the timed request carries no data."""
        sets = [inputs.to_device(s, self.device) for s in req["sets"]]
        self.staged = {"sets": sets, "bufs": inputs.clone_args(sets[0])}
        return {"sets": len(sets)}

    def _refill(self, i: int) -> None:
        # The same buffers every call, refilled with another set's values (untimed): a cache keyed
        # on pointers, shapes or tensor versions returns stale results, which the judge checks.
        timing.refill(self.staged["bufs"], self.staged["sets"][i % len(self.staged["sets"])])

    def time(self, req: dict) -> dict:
        model, torch = self.model, self.torch
        bufs, keep, kept = self.staged["bufs"], set(req.get("keep", [])), {}

        def call():  # grad mode is set once, around the whole loop: nothing but the call is timed
            return model(*bufs)

        on_device = self._on_device(req)
        slots: dict[int, list] = {}

        def after(i: int, result) -> None:
            if i in keep:
                outs = inputs.flatten_outputs(result)
                kept[i] = [self._keep_copy(o, slot, on_device) if _type(o) is torch.Tensor else None
                           for o, slot in zip(outs, slots.get(i, [None] * len(outs)))]

        threads_before, native_before = self.watch.snapshot(), guards.native_thread_count()
        try:
            self._refill(0)
            with torch.no_grad():
                if keep:
                    slots = self._keep_slots(call(), keep, on_device)
                reply = timing.measure(self.clock, call, req["trials"], req["warmup"], self._refill, after)
        except BaseException as exc:
            traceback.print_exc()
            raise classify_exception(exc, "run") from None
        reply.update(kept=kept, sets=len(self.staged["sets"]),
                     native_threads_added=guards.native_thread_count() - native_before)
        reply["threads"], reply["library_threads"] = self.watch.split_by_origin(
            self.watch.new_since(threads_before))
        reply.update(self._violations())
        return reply

    # -- energy and launched kernels -------------------------------------------------------
    def energy(self, req: dict) -> dict:
        from loopwise.kernels.evaluate.energy import measure_energy

        args = self.staged["bufs"]
        model, torch = self.model, self.torch

        def call() -> None:
            with torch.no_grad():
                model(*args)

        index = torch.cuda.current_device() if self.device.startswith("cuda") else 0
        result = measure_energy(call, device_index=index, min_seconds=req.get("min_seconds", 0.2),
                                sync=self.clock.sync)
        return {"energy": None if result is None else result.__dict__ if hasattr(result, "__dict__")
                else dict(result)}

    def launches(self, req: dict) -> dict:
        """How many of its own kernels (Triton launches, extension calls) one forward call makes.
        With ``make_room`` (a problem whose tensors take GBs), the timing input sets, done with
        once timed, go first, and the device memory they and the timed calls cached goes back to
        the driver: the staged buffers the later probes call with stay."""
        from loopwise.kernels.evaluate import launches

        if req.get("make_room"):
            self.staged["sets"] = []
            self._make_room()
        args = inputs.to_device(req["inputs"], self.device)
        launches.reset()
        self._call(args)
        counted = launches.snapshot()
        kernels = self._profiled_kernels(args) if not counted and self.device.startswith("cuda") else {}
        return {"launches": counted, "kernels": kernels, **self._contribution(args, req.get("written", []))}

    def _contribution(self, args: list, written: list[int]) -> dict:
        """One more forward call with the data flow followed (see dataflow.py); the inputs at
        ``written`` (those the reference writes in place) count as outputs: the caller reads them."""
        from loopwise.kernels.evaluate import dataflow

        torch = self.torch
        try:
            with torch.no_grad():
                result, flow = dataflow.trace(lambda: self.model(*args))
            self.clock.sync()
            read_after = inputs.flatten_outputs(result) + [args[i] for i in written if i < len(args)]
            verdict = dataflow.contributes(read_after, flow)
        except Exception as exc:  # noqa: BLE001 - a forward the dispatch mode cannot follow proves nothing
            return {"contributes": None, "flow_error": f"{_type(exc).__name__}: {exc}"[:300]}
        return {"contributes": verdict, "flow_launches": flow.launches}

    def probe_transfer(self, req: dict) -> dict:
        """Runs before any candidate code: a CUDA tensor in, its sum and a doubled copy back, so the
        judge can tell whether device tensors cross the pipe intact (CUDA IPC) on this machine."""
        t = req["t"]
        return {"sum": float(t.double().sum()), "back": t * 2}

    def capture(self, req: dict) -> dict:
        """Captures one forward call into a CUDA graph on a capture stream, then replays it with the
        outputs poisoned. Work forked to a side stream and never joined fails the capture
        ("unjoined"); work on a stream that never joined (or from a thread) is not in the graph,
        so the replay leaves the poison in place. Any other capture failure proves nothing."""
        from loopwise.kernels.evaluate.compare import count_poisoned, poison

        torch = self.torch
        bufs = self.staged["bufs"]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.no_grad(), torch.cuda.graph(graph):
                outs = inputs.flatten_outputs(self.model(*bufs))
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - most capture failures are benign (host syncs, ...)
            text = f"{_type(exc).__name__}: {exc}"
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            return {"captured": False, "unjoined": capture_unjoined(text), "message": text[:300]}
        input_storages = {b.untyped_storage().data_ptr() for b in bufs if isinstance(b, torch.Tensor)}
        checked = [o for o in outs if _type(o) is torch.Tensor and o.is_contiguous()
                   and o.untyped_storage().data_ptr() not in input_storages]
        for o in checked:
            poison(o)
        graph.replay()
        torch.cuda.synchronize()
        return {"captured": True, "unjoined": False,
                "left_unwritten": sum(count_poisoned(o) for o in checked), "checked": len(checked)}

    def _profiled_kernels(self, args: list) -> dict[str, float]:
        """GPU kernels of one call by name, from the CUDA profiler (only when nothing was counted)."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                with torch.no_grad():
                    self.model(*args)
                self.clock.sync()
        except Exception:  # noqa: BLE001 - no profiler (e.g. no counter access): nothing to add
            traceback.print_exc()
            return {}
        found: dict[str, float] = {}
        for evt in prof.events():
            if str(getattr(evt, "device_type", "")).endswith("CUDA"):
                found[evt.name] = found.get(evt.name, 0.0) + float(getattr(evt, "device_time", 0.0) or 0.0)
        return found


def capture_unjoined(text: str) -> bool:
    """Whether a capture error is cudaErrorStreamCaptureUnjoined (904): "the capture sequence
    contains a fork that was not joined to the primary stream"."""
    low = text.lower()
    return "unjoined" in low or "not joined" in low or "fork that was not" in low
