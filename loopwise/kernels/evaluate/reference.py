"""The trusted side of correctness: the reference model, its inputs and outputs, in the judge.

The reference never runs in the candidate's process, so a candidate cannot reuse its freed output,
find it through the garbage collector, or read it from another module's globals.
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import NamedTuple

from loopwise.kernels.evaluate import inputs as inp
from loopwise.kernels.evaluate.compare import WRONG_NOT_IMPRECISE, same_function
from loopwise.kernels.evaluate.spent import Spent

# A judgement holds about this many input- or output-sized tensors at once (draws kept for later
# trials, reference outputs of two trials, candidate outputs and repeats, float64 inputs and
# outputs) ...
HOLD_COPIES = 12
# ... and they may take this share of the device's memory; beyond it they are kept on the host.
HOLD_SHARE = 0.4
# One trial of a problem held on the host still runs on the device (its reference outputs, the
# candidate's, float64 references, stress inputs, comparisons) when this many copies of all of one
# call's inputs and outputs take at most this share of the device; beyond it a trial works on the
# host too.
WORK_COPIES, WORK_SHARE = 6, 0.6
# With reuse on, what a judge keeps between candidates: draws and host-held results up to this
# share of the machine's memory (at most REUSE_HOST_BYTES), device-held reference outputs up to
# this share of the device's memory.
REUSE_HOST_SHARE = 0.2
REUSE_HOST_BYTES = 48 << 30
REUSE_DEVICE_SHARE = 0.1
# The judge empties its CUDA cache before each sandbox request when this many tensors of the
# largest input's size take at least this share of the device.
MAKE_ROOM_COPIES, MAKE_ROOM_SHARE = HOLD_COPIES, 0.05


def host_budget() -> int:
    from loopwise.kernels.evaluate.pool import machine_memory_gb

    gib = machine_memory_gb()
    total = 8 << 30 if gib is None else gib * 2**30  # unknown: a conservative 8 GiB machine
    return int(min(REUSE_HOST_SHARE * total, REUSE_HOST_BYTES))


class StressDraw(NamedTuple):
    """A stress trial's inputs, the fp32 and float64 references' outputs, and what each left in the
    inputs it writes in place (argument index -> value); made where :attr:`Reference.work` says,
    kept where :attr:`Reference.hold` says."""

    args: list
    out32: list
    out64: list
    written32: dict
    written64: dict


def upcast(a):
    """A floating tensor in float64 (itself where it is float64); anything else as it is."""
    import torch

    return a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a


def written_inputs(args: list, before: list, hold: str, versions: list | None = None) -> dict:
    """The tensors among ``args`` a call changed from ``before`` (bits, dtype or shape; see
    :func:`inputs.changed`) or wrote in place (``versions``: :func:`inputs.version_counts` of ``args``
    before the call), by argument index, copied to ``hold``. ``before`` may lie elsewhere than
    ``args`` (the judge's host copy of what it called on the device): only values count."""
    return {i: args[i].detach().to(hold, copy=True) for i in inp.changed_at(args, before, moved=False,
                                                                            versions=versions)}


def _changed64(a64, a) -> bool:
    """Whether a float64 run changed an input: ``a64``, what it was called with (``a`` upcast, on
    the device it ran on), against ``a`` upcast, slice by slice (no float64 copy of a whole
    multi-GiB input)."""
    import torch

    if not (isinstance(a, torch.Tensor) and a.is_floating_point()):
        return inp.changed(a64, a, moved=False)
    if a64.shape != a.shape or a64.dtype != torch.float64:
        return True
    return not all(inp.same_bits(x, y.to(x.device).double())
                   for x, y in zip(a64.reshape(-1).split(inp.SLICE), a.reshape(-1).split(inp.SLICE)))


def moved(value, device: str):
    """``value`` with its tensors on ``device`` (those already there as they are), inside lists,
    tuples (named ones too) and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: moved(v, device) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(moved(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(moved(v, device) for v in value)
    return value


def _largest_bytes(args: list) -> int:
    import torch

    return max((a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)), default=0)


class Reference:
    """Reference outputs on demand for (seed, distribution), on the judge's device."""

    def __init__(self, module: ModuleType, device: str, source: str = "") -> None:
        import torch

        self.torch = torch
        self.module = module
        self.source = source
        self.device = device
        self.model = inp.build_model(module.Model, inp.init_inputs(module, device), device)
        self._model64 = None
        self._model64_error: str | None = None
        # where float64 runs are computed: the device, unless one ran out of its memory (then the
        # place results are held, see ``hold``)
        self._where64: str = device
        self._hold: str | None = None
        self._work: str | None = None
        self._largest: int | None = None
        self._call_total: int | None = None
        self._outputs_bytes: tuple[int, int] | None = None
        self.spent = Spent()  # replaced per evaluation by the judge
        # Kept between evaluations when ``reuse`` is on (the judge's EvalConfig.reuse_inputs).
        self.reuse = False
        self.draw_device: str | None = None  # None: draws on the CPU; else on this device
        self._drop_kept()

    def _drop_kept(self) -> None:
        """No draw and no result kept (those of later calls are made again where they are needed)."""
        self._draws: dict[int, list] = {}
        self._kept_draws: set[int] = set()
        self._outputs: dict[int, tuple[list, list[int]]] = {}
        self._stress_kept: dict[tuple[int, str], tuple | None] = {}
        self._float64_kept: dict[int, list | None] = {}
        self._kept_bytes = {"host": 0, "device": 0}

    def _keep(self, values, at: str | None = None) -> bool:
        """Whether results this large may stay for later evaluations (and books them if so), where
        they lie or, with ``at``, once moved there."""
        if not self.reuse:
            return False
        tensors = inp.tensors_in(values)
        if at is None:
            host = inp.nbytes([t for t in tensors if t.device.type == "cpu"])
        else:
            host = inp.nbytes(tensors) if at == "cpu" else 0
        device = inp.nbytes(tensors) - host
        device_cap = 0
        if device:
            device_cap = REUSE_DEVICE_SHARE * self.torch.cuda.get_device_properties(self.device).total_memory
        if self._kept_bytes["host"] + host > host_budget():
            return False
        if device and self._kept_bytes["device"] + device > device_cap:
            return False
        self._kept_bytes["host"] += host
        self._kept_bytes["device"] += device
        return True

    @property
    def hold(self) -> str:
        """Where the judge keeps what outlives one call (the draws later trials and the timing reuse,
        reference and candidate outputs) and computes float64 references: the device, or the host
        when one call's tensors are so large that the dozen copies a judgement holds (plus float64
        versions) would take more than ``HOLD_SHARE`` of the device's memory, beside the sandbox's
        own. KernelBench's level-1 problems reach 7 GiB per tensor. On the host, what the judge has
        on the device at any time is one call's: the inputs it calls the reference with, the
        reference's outputs, the copies it sends the sandbox, and comparison slices."""
        if self._hold is None:
            hold = self.device
            if self.device.startswith("cuda"):
                total = self.torch.cuda.get_device_properties(self.device).total_memory
                if HOLD_COPIES * self._call_bytes() > HOLD_SHARE * total:
                    hold = "cpu"
            self._hold = hold
        return self._hold

    @property
    def work(self) -> str:
        """Where one trial's values are made and compared (the reference's and the candidate's
        outputs, float64 references, stress inputs): the device, also for a problem :attr:`hold`
        keeps on the host, unless ``WORK_COPIES`` copies of all of one call's inputs and outputs
        would take more than ``WORK_SHARE`` of it. What outlives the trial moves to :attr:`hold`
        (see :meth:`held`). On the host, a trial of a multi-GiB problem spends seconds per copy from
        the device and per comparison, and tens of seconds per stress draw."""
        if self._work is None:
            work = self.hold
            if work != self.device:
                total = self.torch.cuda.get_device_properties(self.device).total_memory
                if WORK_COPIES * self._all_call_bytes() <= WORK_SHARE * total:
                    work = self.device
            self._work = work
        return self._work

    def on_device(self) -> bool:
        """Whether a trial works on the device: then running out of its memory there (in the judge
        or in the sandbox beside it) is met by moving the judge's side to the host, not charged to
        the candidate."""
        return self.work != "cpu"

    def to_host(self) -> bool:
        """From now on each trial works on the host: working on the device ran out of its memory.
        Where what outlives a trial was held on the device too (the sizes of one call's tensors did
        not tell; a model that does not run on the meta device is sized by its inputs), it is held
        on the host from now on, and what was kept for later trials and evaluations is dropped, to
        be made again where it is needed. The judge's cached device memory goes back to the driver.
        Returns whether the hold moved."""
        moved_hold = self.hold != "cpu"
        if moved_hold:
            self._hold = "cpu"
            self._drop_kept()
        self._work = "cpu"
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
        return moved_hold

    def held(self, value):
        """``value`` (tensors, lists, dicts, a :class:`StressDraw`) where what outlives a trial is kept."""
        return moved(value, self.hold)

    def crowded(self) -> bool:
        """Whether this problem's tensors are large enough for the judge and the sandbox to give
        their cached but unused device memory back to the driver around every sandbox request
        (``MAKE_ROOM_COPIES`` of the largest input take ``MAKE_ROOM_SHARE`` of the device or more):
        each process's caching allocator keeps every block it freed, invisible to the other, and
        one trial of a multi-GB problem frees tens of GB. Small problems keep their caches: emptying
        them costs time and frees nothing that matters."""
        if not self.device.startswith("cuda"):
            return False
        total = self.torch.cuda.get_device_properties(self.device).total_memory
        return self._call_bytes() * MAKE_ROOM_COPIES >= MAKE_ROOM_SHARE * total

    def make_room(self) -> None:
        """Gives the judge's cached but unused device memory back to the driver, so the sandbox
        on the same GPU can have it (the blocks a reference, float64 or comparison pass freed),
        where the problem is :meth:`crowded`."""
        if self.crowded():
            self.torch.cuda.empty_cache()

    def _call_bytes(self) -> int:
        """Bytes of the largest tensor among one call's inputs and outputs (a meta-device draw and
        run: free), once. An output can dwarf the inputs (a convolution to eight times the
        channels, an outer product), and the judge holds as many output-sized tensors as
        input-sized ones."""
        if self._largest is None:
            inputs = self._meta_inputs()  # a get_inputs that needs real tensors: draw(0) sets it
            if self._largest is None:
                self._largest = max(_largest_bytes(inputs), self._output_bytes(inputs)[0])
        return self._largest

    def _all_call_bytes(self) -> int:
        """Bytes of all of one call's tensor inputs and outputs (a meta-device draw and run), once."""
        if self._call_total is None:
            inputs = self._meta_inputs()
            self._call_total = inp.nbytes(inputs) + self._output_bytes(inputs)[1]
        return self._call_total

    def _output_bytes(self, args: list) -> tuple[int, int]:
        """Bytes of the largest of one call's tensor outputs and of all of them, from the model
        built and run on the meta device on tensors of ``args``' shapes (no memory, no kernel),
        once; (0, 0) where the model does not run there (a forward that reads values, an operator
        with no meta kernel): then the inputs alone size the problem."""
        if self._outputs_bytes is None:
            torch = self.torch
            self._outputs_bytes = (0, 0)
            try:
                with torch.device("meta"), torch.no_grad():
                    shapes = [torch.empty_like(a, device="meta") if isinstance(a, torch.Tensor) else a for a in args]
                    model = inp.build_model(self.module.Model, inp.init_inputs(self.module, "meta"), "meta")
                    outs = inp.tensors_in(model(*shapes))
                self._outputs_bytes = (_largest_bytes(outs), inp.nbytes(outs))
            except Exception:  # noqa: BLE001 - the problem's own code, whatever it raises on meta tensors
                pass
        return self._outputs_bytes

    def _meta_inputs(self) -> list:
        torch = self.torch
        try:
            with torch.device("meta"):
                return inp.draw_inputs(self.module, 0)
        except Exception:  # noqa: BLE001 - a get_inputs that needs real tensors
            return self.draw(0)

    def draw(self, seed: int) -> list:
        """Inputs of the problem's own distribution for ``seed``, drawn on the CPU or on
        ``draw_device`` and kept where :attr:`hold` says (a device draw of a problem too large for
        the device goes to the host), memoized for one evaluation (until :meth:`forget`), and kept
        for later ones when ``reuse`` is on and they fit."""
        if seed not in self._draws:
            with self.spent("draw"):
                drawn = inp.draw_inputs(self.module, seed, self.draw_device)
                if self._largest is None:  # the sizes a meta-device draw would give, from this one
                    self._largest = max(_largest_bytes(drawn), self._output_bytes(drawn)[0])
                if self.draw_device is not None and self.hold == "cpu":
                    drawn = inp.to_device(drawn, "cpu")
                self._draws[seed] = drawn
            if self._keep(self._draws[seed]):
                self._kept_draws.add(seed)
        return self._draws[seed]

    def forget(self, seed: int) -> None:
        if seed not in self._kept_draws:
            self._draws.pop(seed, None)

    def drop(self, seed: int) -> None:
        """Drops the draw of ``seed`` even when it was kept (a draw used once, e.g. for timing)."""
        args = self._draws.pop(seed, None)
        if seed in self._kept_draws:
            self._kept_draws.discard(seed)
            self._kept_bytes["host"] -= inp.nbytes(args)

    def forget_all(self) -> None:
        """Drops the held draws (after each evaluation), except those kept for reuse."""
        for seed in list(self._draws):
            self.forget(seed)

    def outputs(self, seed: int) -> tuple[list, dict[int, object]]:
        """``run(draw(seed))``, kept (where :attr:`hold` says) for later evaluations when ``reuse``
        is on and it fits."""
        if seed in self._outputs:
            return self._outputs[seed]
        result = self.run(self.draw(seed))
        if self._keep(result[0], self.hold):
            self._outputs[seed] = self.held(result)
        return result

    def kept_outputs(self, seed: int) -> tuple[list, dict[int, object]] | None:
        """What :meth:`outputs` keeps for ``seed`` for later evaluations (where :attr:`hold` says), if any."""
        return self._outputs.get(seed)

    def float64(self, seed: int, args: list, ref_out: list) -> list | None:
        """``run64(args)`` for the draw of ``seed``, kept like :meth:`outputs`; None where it is
        not the function of ``ref_out`` (the reference's outputs for those inputs), see
        :func:`compare.same_function`: that judgement holds for the draw, so it is kept too (as
        :meth:`stress` keeps an unusable draw), and a later request makes no float64 run."""
        run = self._float64_run(seed, args, ref_out)
        return None if run is None else run[0]

    def float64_written(self, seed: int, args: list, ref_out: list) -> dict | None:
        """What the float64 run of :meth:`float64` left in the inputs it wrote in place (argument
        index -> float64 value; an input it left as it was is absent), None where that run is not
        used."""
        run = self._float64_run(seed, args, ref_out)
        return None if run is None else run[1]

    def _float64_run(self, seed: int, args: list, ref_out: list) -> tuple[list, dict] | None:
        if seed in self._float64_kept:
            return self._float64_kept[seed]
        ran = self.run64(args, written=True)
        out = None if ran is None or self._checked(ref_out, ran[0]) is None else ran
        if out is None and ran is not None and self.reuse:
            self._float64_kept[seed] = None
        elif out is not None and self._keep(out, self.hold):
            self._float64_kept[seed] = self.held(out)
        return out

    def _checked(self, ref_out: list, out64: list | None) -> list | None:
        if out64 is None or same_function(ref_out, out64):
            return out64
        self._model64_error = (f"the float64 run computes another function (the reference is more than "
                               f"{WRONG_NOT_IMPRECISE:g} normwise from it: its forward reads the default dtype?)")
        return None

    def run(self, args_cpu: list) -> tuple[list, dict[int, object]]:
        """Reference outputs for inputs held anywhere (a draw), and the inputs the reference writes
        in place: their indices, each with the value the reference left in it (what a candidate
        must leave too), both where a trial works (:attr:`work`). The reference is called on a
        private copy on the device; the inputs given, which nothing writes, are what that copy is
        compared with afterwards (no second copy)."""
        torch = self.torch
        with self.spent("reference"):
            args = inp.to_device(args_cpu, self.device)
            versions = inp.version_counts(args)
            with torch.no_grad():
                out = inp.flatten_outputs(self.model(*args))
            work = self.work
            mutated = written_inputs(args, args_cpu, work, versions)
        return [o.detach().to(work) if isinstance(o, torch.Tensor) else o for o in out], mutated

    def model64(self):
        """A float64 copy of the reference model where float64 runs are computed, or None when the
        model cannot run in float64."""
        if self._model64 is None and self._model64_error is None:
            try:
                self._model64 = copy.deepcopy(self.model).to(self._where64).double()
            except Exception as exc:  # noqa: BLE001 - some modules refuse float64; stress is skipped
                self._model64_error = f"{type(exc).__name__}: {exc}"
        return self._model64

    def stress(self, seed: int, distribution: str) -> StressDraw | None:
        """A stress distribution's inputs and references (:class:`StressDraw`, where a trial
        works), or None if unusable; kept where :attr:`hold` says when ``reuse`` is on and it fits."""
        key = (seed, distribution)
        if key in self._stress_kept:
            return self._stress_kept[key]
        with self.spent("reference"):
            data = self._stress(seed, distribution)
        if data is None and self.reuse:
            self._stress_kept[key] = None
        elif data is not None and self._keep(data, self.hold):
            self._stress_kept[key] = self.held(data)
        return data

    def _stress(self, seed: int, distribution: str) -> StressDraw | None:
        torch = self.torch
        work = self.work
        if distribution == "centered":
            base = inp.to_device(self.draw(seed), work)
        else:
            base = self._placeholders(seed, work)
        args = inp.stress_variant(base, seed, distribution, work)
        del base
        if self._outside_domain():
            return None
        called = inp.to_device(args, self.device)
        versions = inp.version_counts(called)
        try:
            with torch.no_grad():
                out32 = inp.flatten_outputs(self.model(*called))
        except Exception:  # noqa: BLE001 - the reference rejects these inputs: no stress trial
            return None
        out32 = [o.to(work) if isinstance(o, torch.Tensor) else o for o in out32]
        if not all(isinstance(o, torch.Tensor) and bool(torch.isfinite(o).all()) for o in out32):
            return None
        written32 = written_inputs(called, args, work, versions)
        del called
        ran = self.run64(args, written=True)
        if ran is None or self._checked(out32, ran[0]) is None:
            return None
        return StressDraw(args, out32, ran[0], written32, ran[1])

    def run64(self, args: list, written: bool = False) -> list | tuple[list, dict] | None:
        """Float64 reference outputs for inputs on the device (floating tensors upcast); with
        ``written``, (outputs, what the run left in the inputs it wrote in place: argument index ->
        value, an input it left as it was absent)."""
        with self.spent("reference"):
            ran = self._run64(args)
        return ran if ran is None or written else ran[0]

    def _run64(self, args: list) -> tuple[list, dict] | None:
        """The float64 run on the device, its results moved to where a trial works. A problem
        whose tensors are kept on the host (``hold``) still runs it on the device: on the host a
        multi-GiB float64 forward takes minutes a trial. Where it does not fit beside the rest, it
        runs where the results are held, from then on."""
        torch = self.torch
        if self._where64 != self.hold:
            try:
                return self._run64_at(args)
            except torch.cuda.OutOfMemoryError:
                pass
            self._where64, self._model64 = self.hold, None
            torch.cuda.empty_cache()  # what the failed run left, now that its frames are gone
        return self._run64_at(args)

    def _run64_at(self, args: list) -> tuple[list, dict] | None:
        torch = self.torch
        model64 = self.model64()
        if model64 is None:
            return None
        where, work = self._where64, self.work
        # Tensors the forward makes in the default dtype (a mask from torch.zeros) are float64 too:
        # a float32 one would mix precisions into the run whose error the fp32 rule scales. A
        # forward that casts to fp32 itself can meet such a tensor in a dtype-strict op
        # (index_add_, a product) and raise: then the run is made with the default dtype as it is.
        previous = torch.get_default_dtype()
        for default in dict.fromkeys((torch.float64, previous)):
            torch.set_default_dtype(default)
            try:  # (the copies inside: running out of memory for them must put the default back too)
                args64 = [upcast(a) for a in inp.to_device(args, where)]  # afresh: a failed attempt may write
                versions = inp.version_counts(args64)
                with torch.no_grad():
                    out = inp.flatten_outputs(model64(*args64))
                self._model64_error = None
                # each input against its original upcast, one at a time (no float64 copy of them all),
                # or written in place with the bits it held
                moved = inp.rewritten(args64, versions)
                written = {i: a64.to(work) for i, (a, a64) in enumerate(zip(args, args64))
                           if isinstance(a64, torch.Tensor) and (i in moved or _changed64(a64, a))}
                return [o.to(work) if isinstance(o, torch.Tensor) else o for o in out], written
            except torch.cuda.OutOfMemoryError:
                raise  # not the model's failure: the caller runs it elsewhere
            except Exception as exc:  # noqa: BLE001
                self._model64_error = f"{type(exc).__name__}: {exc}"
            finally:
                torch.set_default_dtype(previous)
        return None

    def _outside_domain(self) -> bool:
        # Inputs that must be probabilities: a CUDA device-side assert would kill the judge's own
        # context, so mixed-sign inputs are never sent to these losses.
        src = self.source
        return "binary_cross_entropy" in src or "BCELoss" in src

    def _placeholders(self, seed: int, device: str) -> list:
        """Inputs whose floating tensors are about to be redrawn: shapes come from a meta-device
        draw (free), real values only when the problem has integer tensors (indices, labels)."""
        torch = self.torch
        try:
            with torch.device("meta"):
                meta = inp.draw_inputs(self.module, seed)
        except Exception:  # noqa: BLE001 - a get_inputs that needs real tensors
            meta = None
        if meta is None or any(isinstance(t, torch.Tensor) and not t.is_floating_point() for t in meta):
            return inp.to_device(inp.draw_inputs(self.module, seed), device)
        return [torch.empty(t.shape, dtype=t.dtype, device=device) if isinstance(t, torch.Tensor) else t
                for t in meta]

    @property
    def model64_error(self) -> str | None:
        return self._model64_error

    def out_specs(self, outputs: list) -> list[tuple[list[int], str]]:
        torch = self.torch
        return [(list(o.shape), str(o.dtype)) for o in outputs if isinstance(o, torch.Tensor)]
