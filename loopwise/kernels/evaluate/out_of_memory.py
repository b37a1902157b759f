"""Out-of-memory verdicts in a user's words: who ran out (the sandbox or the judge), during what,
and what the failed allocation asked for, read from the allocator's own error text."""

from __future__ import annotations

import re

# What a failed allocation asked for, in CUDA's and in the CPU allocator's words.
_CUDA_ASK = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)(?:.*? of which ([\d.]+ [KMGT]?i?B) is free)?", re.S)
_CPU_ASK = re.compile(r"you tried to allocate (\d+) bytes")
# Where a sandbox request spends its memory, in a user's words.
REQUEST_PHASES = {"load": "loading the candidate", "trial": "a correctness trial", "stage": "staging the timing inputs",
                  "time": "the timed calls", "energy": "the energy measurement", "launches": "counting its kernel launches",
                  "capture": "the CUDA-graph probe", "probe_transfer": "the transfer probe"}


def is_out_of_memory(text: str) -> bool:
    lowered = text.lower()
    return "out of memory" in lowered or "can't allocate memory" in lowered or "cannot allocate memory" in lowered


def out_of_memory_message(who: str, where: str, text: str) -> str:
    """One line: who ran out of memory, in which phase, and what the failed allocation asked for
    (with what was free, where the allocator says), from an allocator's error ``text``."""
    found = _CUDA_ASK.search(text)
    if found:
        free = f", {found.group(2)} free" if found.group(2) else ""
        asked = f": asked the GPU for {found.group(1)}{free}"
    else:
        cpu = _CPU_ASK.search(text)
        asked = f": asked for {int(cpu.group(1)) / 2**30:.2f} GiB of host memory" if cpu else ""
    return f"{who} ran out of memory during {where}{asked}"


# What the judge was doing, in a user's words, by phase (judge.phase) or activity (Spent).
JUDGE_ACTIVITIES = {
    "reference": "the reference's own work (its outputs, float64 or stress references, or its timing)",
    "draw": "drawing the inputs", "compare": "comparing outputs", "receive": "receiving the candidate's outputs",
    "sandbox": "a correctness trial", "correctness": "the correctness trials", "timing": "the timed calls",
    "launches": "counting kernel launches", "floor": "the speed-of-light floor", "energy": "the energy measurement",
    "capture": "the CUDA-graph probe", "sandbox_wait": "starting a sandbox", "load": "loading the candidate",
}


def judge_out_of_memory(exc: BaseException) -> str | None:
    """The verdict's message when ``exc``, raised on the judge's own side, is an out-of-memory
    error (where: the innermost phase or activity it escaped from); None for any other error."""
    from loopwise.kernels.evaluate.spent import activity_of

    text = f"{type(exc).__name__}: {exc}"
    if not is_out_of_memory(text):
        return None
    where = JUDGE_ACTIVITIES.get(activity_of(exc) or "", activity_of(exc) or "the evaluation")
    return out_of_memory_message("the judge", where, text) + "; the candidate was not judged"
