"""Cold build time and size of the code-search index of the nvidia-cutlass wheel, and query latency.

Each build goes to a fresh cache folder (nothing reused); queries run on the last index. Run::

    .venv/bin/python bench/codesearch_index.py [--builds 3] [--root PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

QUERIES = ("SM90_TMA_LOAD", "make_tiled_copy", "TMA warp specialized", "cute::gemm", "CollectiveMma",
           "KernelTmaWarpSpecializedCooperative", "tiled mma", "cp.async wait", "swizzle", "epilogue with bias")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=3, help="cold builds to time")
    parser.add_argument("--root", default=None, help="a CUTLASS checkout (default: the wheel's sources)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LOOPWISE_CACHE_DIR"] = cache
        from loopwise.kernels.codesearch import ensure_index, resolve_root, search

        root = resolve_root(args.root)
        walls, cpus = [], []
        for _ in range(args.builds):
            wall, cpu = time.perf_counter(), time.process_time()
            info = ensure_index(root, rebuild=True)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        wall = time.perf_counter()
        reused = ensure_index(root)
        check_s = time.perf_counter() - wall
        latencies = []
        for query in QUERIES:
            wall = time.perf_counter()
            search(query, limit=10, root=root)
            latencies.append(time.perf_counter() - wall)
    print(json.dumps({
        "root": str(root), "files": info.files, "chunks": info.chunks, "index_bytes": info.size_bytes,
        "build_wall_s": [round(x, 2) for x in walls], "build_cpu_s": [round(x, 2) for x in cpus],
        "up_to_date_check_s": round(check_s, 3), "reused": reused.reused,
        "query_median_ms": round(1000 * statistics.median(latencies), 1),
        "query_max_ms": round(1000 * max(latencies), 1), "cpus": os.cpu_count(),
    }, indent=2))


if __name__ == "__main__":
    main()
