"""Job handlers of the training engine, run by an executor's worker (one per GPU)."""

from __future__ import annotations

import base64
import time


def run_method(payload: dict) -> dict:
    """One method of a comparison from the run's base policy, on this worker's device: its result
    (as ``run.result_payload``) and every stage it trained (weights base64-encoded, so the
    driver records them in the run store as if it had trained them itself). ``payload`` holds the
    run's settings, the base (weights, tune reward, warm-start facts) and the method. The signal
    probes it took come back too (``probes``), to be recorded with the stages."""
    from loopwise.training.run import Settings, resolve_device, result_payload
    from loopwise.training.search import run_method as run_one
    from loopwise.training.session import Session

    st = Settings.from_dict(payload["settings"])
    device = resolve_device("cpu" if st.device == "cpu" else "auto")  # a worker is pinned to its GPU
    session = Session(st.task, st.preset, st.seed, st.difficulty, device, st.policy_path or None, st.kl_reference)
    session.load_base(base64.b64decode(payload["base"]), payload["base_tune"], payload["warm"])
    stages: list[dict] = []

    def record(key: str, result, label: dict) -> None:
        stages.append({"key": key, "config": result.config.model_dump(), "trace": result.trace,
                       "tune": result.tune_reward, "train": result.train_reward, "seconds": result.seconds,
                       "state": base64.b64encode(result.state).decode(), "label": label})

    session.record = record
    probes: list[dict] = []
    session.record_probe = lambda key, probe, label: probes.append({"key": key, **probe.to_dict(), "label": label})
    t0 = time.perf_counter()
    budget = st.compute_budget(session.default_config())
    schedule = run_one(payload["method"], session, budget, st.depth, st.seed)
    return {"result": result_payload(schedule, session, time.perf_counter() - t0, budget), "stages": stages,
            "probes": probes}
