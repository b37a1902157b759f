"""Inductor's record for a problem, made in a process of its own (:mod:`extract`'s command line).

torch.compile leaves compiler state, worker pools and caches in the process that calls it; the
proposer's process keeps none of that. The extraction needs the device the candidates run on
(Inductor autotunes there), so on a machine without one the seed is unavailable, with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor.extract import UNSUPPORTED_EXIT, InductorRecord

TIMEOUT_S = 600


def inductor_record(problem, device: str = "cuda", timeout_s: float = TIMEOUT_S) -> InductorRecord:
    """Runs the extraction for ``problem`` on ``device`` in a child process.

    Raises:
        Unsupported: no such device here, the problem cannot be seeded, or the child failed (the
            last line of its error output says why) or ran past ``timeout_s``.
    """
    if not device.startswith("cuda"):
        raise Unsupported(f"the compiler seed is extracted on a CUDA device; this run judges on {device}")
    import torch

    if not torch.cuda.is_available():
        raise Unsupported("the compiler seed is extracted on a CUDA device; none is visible to the proposer")
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
            raise Unsupported(json.loads(out.read_text())["unsupported"])
        if done.returncode != 0 or not out.exists():
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            raise Unsupported(f"extracting Inductor's code failed (exit {done.returncode}: "
                              f"{lines[-1][:300] if lines else 'no output'})")
        return InductorRecord.from_json(out.read_text())
