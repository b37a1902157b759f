"""Job handlers used by the executor tests (imported by the spawned workers)."""

import os
import time


def echo(payload):
    return {"value": payload["value"], "pid": os.getpid(), "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def sleep(payload):
    time.sleep(payload["seconds"])
    return {"slept": payload["seconds"], "pid": os.getpid()}


def die(payload):
    os._exit(9)


def fail(payload):
    raise ValueError("bad payload")
