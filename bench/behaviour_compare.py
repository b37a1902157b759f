"""What differs between two trees' outputs of ``bench/behaviour_smoke.sh`` (same jobs, same seeds).

    python3 bench/behaviour_compare.py OUT/before OUT/after

Every JSON file present in both folders is compared value by value. Ids, paths and wall-clock
seconds are skipped; so are measured times and speedups, which are noise between two runs of one
tree, and so are the judge's input seeds (drawn afresh each run) and the errors measured on those
inputs: their values are printed side by side instead. Exit 1 when anything else differs.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

SKIP = re.compile(r"(run_id|runs_dir|path|report|created|seconds|elapsed|wall_s|latency_s|.*_at)$")
TIMED = re.compile(r"(.*_ms|.*_us|.*_s|.*speedup.*|.*time.*|best|reward_speed|energy.*|.*energy_j.*|joules.*|ratio_to_eager|"
                   r"ratio_to_compile|capture|correctness|compare|receive|sandbox|floor|launches|load|reference|"
                   r"sandbox_wait|spare_wait|static|timing|slowest_trial|best_path)$")
# Drawn afresh on every run by design (the judge's input seeds) and what follows from them.
DRAWN = re.compile(r"(seed|max_abs_err|max_rel_err|norm_err|ref_norm_err)$")


def _measured(key: str) -> bool:
    last = key.rsplit(".", 1)[-1]  # phase names come as "correctness.sandbox"
    return bool(TIMED.fullmatch(last) or DRAWN.fullmatch(last))


def _walk(a, b, where: str, diffs: list[str], timed: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if SKIP.match(str(key)):
                continue
            if key not in a or key not in b:
                diffs.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            elif _measured(str(key)) and not isinstance(a[key], (dict, list)):
                if a[key] != b[key]:
                    timed.append(f"{where}.{key}: {a[key]} -> {b[key]}")
            else:
                _walk(a[key], b[key], f"{where}.{key}", diffs, timed)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diffs.append(f"{where}: {len(a)} items -> {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{where}[{i}]", diffs, timed)
    elif isinstance(a, float) and isinstance(b, float):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            diffs.append(f"{where}: {a} -> {b}")
    elif isinstance(a, str) and isinstance(b, str) and a.startswith("/") and b.startswith("/"):
        if Path(a).name != Path(b).name:  # each tree's own copy of a file: compared by name
            diffs.append(f"{where}: {a!r} -> {b!r}")
    elif a != b:
        diffs.append(f"{where}: {str(a)[:80]!r} -> {str(b)[:80]!r}")


def main(before: str, after: str) -> int:
    changed = 0
    for path in sorted(Path(before).glob("*.json")):
        other = Path(after) / path.name
        if not other.exists():
            print(f"{path.name}: missing in {after}")
            changed += 1
            continue
        diffs: list[str] = []
        timed: list[str] = []
        _walk(json.loads(path.read_text()), json.loads(other.read_text()), path.stem, diffs, timed)
        print(f"{path.name}: {'same' if not diffs else f'{len(diffs)} differences'}"
              f"{f' ({len(timed)} measured times differ, as noise does)' if timed else ''}")
        for line in diffs[:40] + timed[:20]:
            print("   ", line)
        changed += bool(diffs)
    return 1 if changed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
