"""Job handlers used by the executor tests (imported by the spawned workers)."""

import os
import time


def echo(payload):
    return {"value": payload["value"], "pid": os.getpid(), "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "omp_threads": os.environ.get("OMP_NUM_THREADS")}


def sleep(payload):
    time.sleep(payload["seconds"])
    return {"slept": payload["seconds"], "pid": os.getpid()}


def die(payload):
    os._exit(9)


def fail(payload):
    raise ValueError("bad payload")


def interval(payload):
    start = time.time()
    time.sleep(payload["seconds"])
    return {"start": start, "end": time.time(), "pid": os.getpid()}


def die_once(payload):
    """Kills its worker the first time (leaving a marker file), succeeds when run again."""
    marker = payload["marker"]
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("died once\n")
        os._exit(1)
    return {"value": payload["value"], "pid": os.getpid()}


def chatty(payload):
    """Prints to stdout, stderr and from a child process, then ``repeat`` characters of filler."""
    import subprocess
    import sys

    print("hello from stdout")
    print("warning on stderr", file=sys.stderr)
    subprocess.run(["echo", "from a child process"], check=True)
    print("x" * payload.get("repeat", 0) + "END")
    return {"pid": os.getpid()}


def node_sleep(payload):
    """Says which Ray node runs it (a file per attempt in ``payload["marker"]``), then sleeps."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    attempt = len([n for n in os.listdir(payload["marker"]) if n.startswith("attempt-")]) + 1
    path = os.path.join(payload["marker"], f"attempt-{attempt}")
    with open(path + ".tmp", "w") as f:
        f.write(node)
    os.replace(path + ".tmp", path)  # whole when it appears
    time.sleep(payload["seconds"])
    return {"node": node, "pid": os.getpid()}
