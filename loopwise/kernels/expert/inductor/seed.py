"""Inductor's record for a problem, made in a process of its own (:mod:`extract`'s command line).

torch.compile leaves compiler state, worker pools and caches in the process that calls it; the
proposer's process keeps none of that. The extraction needs the device the candidates run on
(Inductor autotunes there), so on a machine without one the seed is unavailable, with the reason.

What the child writes (a record, or the reason a problem cannot be seeded) is kept in the cache
folder, keyed by the problem's source, the device's name, the torch and Triton versions and this
extraction's code, so that both precision tracks of a problem, and a resumed run, compile it once.
A child that failed or ran out of time leaves nothing there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from loopwise.core.files import write_atomic
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor.extract import UNSUPPORTED_EXIT, InductorRecord

TIMEOUT_S = 600


def inductor_record(problem, device: str = "cuda", timeout_s: float = TIMEOUT_S, cache: bool = True) -> InductorRecord:
    """Runs the extraction for ``problem`` on ``device`` in a child process, or reads what an
    earlier one wrote for the same problem, device and versions (``cache``).

    Raises:
        Unsupported: no such device here, the problem cannot be seeded, or the child failed (the
            last line of its error output says why) or ran past ``timeout_s``.
    """
    if not device.startswith("cuda"):
        raise Unsupported(f"the compiler seed is extracted on a CUDA device; this run judges on {device}")
    import torch

    if not torch.cuda.is_available():
        raise Unsupported("the compiler seed is extracted on a CUDA device; none is visible to the proposer")
    kept = _cache_path(problem, device) if cache else None
    if kept is not None and (found := _read_kept(kept)) is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="loopwise-seed-") as tmp:
        problem_file, out = Path(tmp) / "problem.py", Path(tmp) / "record.json"
        problem_file.write_text(problem.source)
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        try:
            done = subprocess.run([sys.executable, "-m", "loopwise.kernels.expert.inductor.extract",
                                   str(problem_file), str(out), "--device", device],
                                  capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise Unsupported(f"extracting Inductor's code ran past {timeout_s:g} s") from None
        if done.returncode == UNSUPPORTED_EXIT and out.exists():
            reason = json.loads(out.read_text())["unsupported"]
            _keep(kept, json.dumps({"unsupported": reason}))
            raise Unsupported(reason)
        if done.returncode != 0 or not out.exists():
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            raise Unsupported(f"extracting Inductor's code failed (exit {done.returncode}: "
                              f"{lines[-1][:300] if lines else 'no output'})")
        text = out.read_text()
        record = InductorRecord.from_json(text)
        _keep(kept, text)
        return record


def _cache_path(problem, device: str) -> Path:
    """Where the extraction's outcome for ``problem`` on ``device`` is kept."""
    import torch
    import triton

    from loopwise.core.cache import cache_root
    from loopwise.kernels.expert.inductor import extract

    index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
    code = hashlib.sha256(Path(extract.__file__).read_bytes()).hexdigest()
    parts = [problem.sha256[:16], torch.cuda.get_device_name(index), torch.__version__, triton.__version__, code[:12]]
    return cache_root() / "inductor_records" / (re.sub(r"[^A-Za-z0-9_.+-]", "_", "-".join(parts)) + ".json")


def _read_kept(path: Path) -> InductorRecord | None:
    """The kept record (None where there is none, or it cannot be read: then it is extracted again).

    Raises:
        Unsupported: the kept outcome is that the problem cannot be seeded.
    """
    try:
        data = json.loads(path.read_text())
        if set(data) == {"unsupported"}:
            reason = str(data["unsupported"])
        else:
            return InductorRecord.from_json(json.dumps(data))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    raise Unsupported(reason)


def _keep(path: Path | None, text: str) -> None:
    """Writes ``text`` to ``path`` whole or not at all (another run may read it meanwhile)."""
    if path is None:
        return
    try:
        write_atomic(path, text)
    except OSError:  # a cache that cannot be written costs the next run an extraction, nothing else
        pass
