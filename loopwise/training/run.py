"""A training comparison kept in the run store: the base policy, every stage trained (weights as
artifacts, traces and rewards as events) and each method's result, so a killed run resumes where
it stopped: stages already trained are read back, not trained again (training is deterministic
for a given start, config and seed, see :func:`loopwise.training.session.stage_key`).

Events: ``settings``, ``base`` (warm start, base tuning reward, the weights' artifact), ``stage``
(key = the stage's key; its config, metric trace, diagnosis, rewards, weights' artifact, and where it sits:
``method`` with ``node`` / ``parent`` / ``depth`` in the tree, ``rep`` / ``stage`` in a baseline;
``zero_variance_share``: the share of its groups without reward variance), ``probe`` (key = the
probe's key: a signal probe the tree took before applying a transition, with its groups, its
samples (``first_samples``: its first step's), the bound on the stage's share of uniform groups and
whether it let the transition through; a rejected probe's samples count in the method's budget, an
admitted one's first step is its stage's and its top-up counts; ``node`` is the id the child would
take), ``result``
(key = the method).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from loopwise.core.propose import EXCHANGE_TIMEOUT_S
from loopwise.core.propose.factory import CHOICES
from loopwise.core.store import finite
from loopwise.errors import UserError
from loopwise.training.compute import Budget, stage_compute
from loopwise.training.config import StageConfig
from loopwise.training.learning_signal import SignalProbe, zero_variance_share
from loopwise.training.search import METHODS, run_method
from loopwise.training.session import Schedule, Session, StageResult

KIND = "training.search"


@dataclass(frozen=True)
class Settings:
    task: str
    methods: tuple[str, ...] = ("tree",)
    budget: int = 8
    depth: int = 4
    preset: str = "smoke"
    seed: int = 0
    difficulty: int | None = None
    proposer: str = "expert"  # the tree's transitions: expert rules, llm or exchange
    device: str = "auto"  # auto: cuda when torch sees a GPU
    exchange_dir: str = ""
    llm: dict = field(default_factory=dict)
    policy_path: str = ""  # a Hugging Face causal LM on disk; "": the preset's character transformer
    # the equal compute budget; neither set: ``budget`` default stages' worth of samples
    budget_samples: int | None = None
    budget_tokens: int | None = None
    kl_reference: str = "initial"  # every stage's KL anchor: the base policy (initial) or the stage's start
    exchange_timeout: float = EXCHANGE_TIMEOUT_S  # seconds the exchange proposer waits for the answers of one step

    def __post_init__(self) -> None:
        if self.proposer not in CHOICES:
            raise UserError(f"unknown proposer {self.proposer!r}: expert, llm or exchange")
        if self.proposer == "exchange" and not self.exchange_dir:
            raise UserError("--proposer exchange needs --exchange-dir FOLDER")
        if self.exchange_timeout <= 0:
            raise UserError(f"--exchange-timeout {self.exchange_timeout:g}: expected a positive number of seconds")
        if self.proposer == "llm" and not self.llm.get("model"):
            raise UserError("--proposer llm needs --llm-model (and --llm-base-url for a local server)")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise UserError(f"unknown method(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(METHODS)}")
        if self.depth < 1 or self.budget < self.depth:
            raise UserError(f"--budget-stages {self.budget} must be at least the depth {self.depth} (>= 1)")
        if self.budget_samples is not None and self.budget_tokens is not None:
            raise UserError("give --budget-samples or --budget-tokens, not both")
        for name, amount in (("samples", self.budget_samples), ("tokens", self.budget_tokens)):
            if amount is not None and amount < 1:
                raise UserError(f"--budget-{name} {amount} must be at least 1")

    def compute_budget(self, default: StageConfig) -> Budget:
        """Each method's budget: the samples or tokens asked for, else ``budget`` stages of the
        ``default`` config in samples."""
        if self.budget_tokens is not None:
            return Budget("tokens", self.budget_tokens)
        if self.budget_samples is not None:
            return Budget("samples", self.budget_samples)
        return Budget("samples", self.budget * Budget("samples", 1).stage_cost(default))

    @classmethod
    def from_dict(cls, data: dict) -> "Settings":
        return cls(data["task"], tuple(data["methods"]), data["budget"], data["depth"], data["preset"], data["seed"],
                   data["difficulty"], data.get("proposer", "expert"), data.get("device", "auto"),
                   data.get("exchange_dir", ""), data.get("llm", {}), data.get("policy_path", ""),
                   data.get("budget_samples"), data.get("budget_tokens"), data.get("kl_reference", "stage"),
                   data.get("exchange_timeout", EXCHANGE_TIMEOUT_S))

    def to_dict(self) -> dict:
        return {"task": self.task, "methods": list(self.methods), "budget": self.budget, "depth": self.depth,
                "preset": self.preset, "seed": self.seed, "difficulty": self.difficulty, "proposer": self.proposer,
                "device": self.device, "policy_path": self.policy_path,
                "exchange_dir": self.exchange_dir, "llm": dict(self.llm),
                "budget_samples": self.budget_samples, "budget_tokens": self.budget_tokens,
                "kl_reference": self.kl_reference, "exchange_timeout": self.exchange_timeout}


@dataclass
class TrainingRun:
    settings: Settings
    store: object
    session: Session
    results: dict[str, dict] = field(default_factory=dict)

    @property
    def budget(self) -> Budget:
        """What each method may spend."""
        return self.settings.compute_budget(self.session.default_config())

    @classmethod
    def start(cls, settings: Settings, runs_dir: str) -> TrainingRun:
        from loopwise.core.run import create_run

        session = Session(settings.task, settings.preset, settings.seed, settings.difficulty,
                          resolve_device(settings.device), settings.policy_path or None,
                          settings.kl_reference)  # validates first
        settings = replace(settings, difficulty=session.difficulty)  # recorded as trained, never "None"
        store = create_run(runs_dir, KIND, json.dumps(settings.to_dict(), indent=1), settings=settings.to_dict())
        return cls(settings, store, session)

    @classmethod
    def resume(cls, runs_dir: str, run_id: str) -> TrainingRun:
        from loopwise.core.run import open_run, recorded_settings

        store = open_run(runs_dir, run_id, KIND, noun="a training search")
        settings = Settings.from_dict(recorded_settings(store))
        run = cls(settings, store, Session(settings.task, settings.preset, settings.seed, settings.difficulty,
                                           resolve_device(settings.device), settings.policy_path or None,
                                           settings.kl_reference))
        base = store.latest_by_key("base").get("base")
        if base is not None:
            p = base.payload
            run.session.load_base(store.get_artifact(p["state"]), p["tune"], p["warm"])
        for ev in store.events(kind="stage"):
            p = ev.payload
            run.session.cache[p["key"]] = StageResult(StageConfig.model_validate(p["config"]),
                                                      store.get_artifact(p["state"]), p["trace"], p["tune"],
                                                      p["train"], p["seconds"])
        for ev in store.events(kind="probe"):
            run.session.probes[ev.payload["key"]] = SignalProbe.from_dict(ev.payload)
        run.results = {k: ev.payload for k, ev in store.latest_by_key("result").items()}
        return run

    def _record(self, key: str, result: StageResult, label: dict) -> None:
        from loopwise.training.diagnose import diagnose, diagnosis_status

        sha = self.store.put_artifact(result.state, name=f"stage-{key[:12]}.pt", media_type="application/octet-stream")
        found = diagnose(result.trace, result.config)
        findings = [{"kind": f.tool, "guidance": f.guidance, "severity": f.severity, "score": f.score,
                     "moves": {m.knob: m.direction for m in f.moves}, "evidence": dict(f.evidence)} for f in found]
        self.store.append("stage", {"key": key, "config": result.config.model_dump(), "trace": finite(result.trace),
                                    "tune": result.tune_reward, "train": result.train_reward,
                                    "seconds": result.seconds, "state": sha, "diagnosis": findings,
                                    "diagnosis_status": diagnosis_status(result.trace, found),
                                    "zero_variance_share": zero_variance_share(result.trace), **label}, key=key)

    def _record_probe(self, key: str, probe: SignalProbe, label: dict) -> None:
        self.store.append("probe", {"key": key, **probe.to_dict(), **label}, key=key)

    def run(self, on_stage: Callable[[str, int, StageResult | None], None] | None = None,
            on_warm: Callable[[int, float], None] | None = None, dispatcher=None) -> dict[str, dict]:
        """Warm start (once), then every method not finished yet; returns each method's result.

        With a ``dispatcher`` (an executor's workers, one per GPU) the methods run at once, one job
        each, from the same base; a method's stages are recorded when its job returns (a crash
        loses the stages of methods still running, never a finished method)."""
        s = self.session
        if not s.base_state:
            s.prepare(progress=on_warm)
            sha = self.store.put_artifact(s.base_state, name="base.pt", media_type="application/octet-stream")
            self.store.append("base", {"state": sha, "tune": s.base_tune, "warm": s.warm}, key="base")
        if dispatcher is not None:
            return self._run_on(dispatcher, on_stage)
        for method in self.settings.methods:
            if method in self.results:
                continue
            done = [0]

            def record(key: str, result: StageResult, label: dict, method=method, done=done) -> None:
                self._record(key, result, {"method": method, **label})
                done[0] += self.budget.of(stage_compute(result.trace, result.config.model_dump()))
                if on_stage is not None:
                    on_stage(method, done[0], result)

            s.record = record
            s.record_probe = lambda key, probe, label, method=method: self._record_probe(key, probe,
                                                                                        {"method": method, **label})
            t0 = time.perf_counter()
            schedule = run_method(method, s, self.budget, self.settings.depth, self.settings.seed,
                                  transitions=self._transitions() if method == "tree" else None)
            s.record = s.record_probe = None
            payload = result_payload(schedule, s, time.perf_counter() - t0, self.budget)
            self.store.append("result", payload, key=method)
            self.results[method] = payload
        return self.results

    def _run_on(self, dispatcher, on_stage) -> dict[str, dict]:
        import base64

        from loopwise.core.execute import Job

        if self.settings.proposer != "expert":
            raise UserError("--executor runs the tree's expert transitions only: a model's calls are recorded by "
                            "this process (run --proposer llm/exchange without --workers/--executor ray)")
        s = self.session
        base = {"settings": self.settings.to_dict(), "base": base64.b64encode(s.base_state).decode(),
                "base_tune": s.base_tune, "warm": s.warm}
        todo = [m for m in self.settings.methods if m not in self.results]
        futures = {m: dispatcher.submit(Job(f"{self.store.meta.run_id}:{m}", "loopwise.training.jobs:run_method",
                                            {**base, "method": m})) for m in todo}
        for method, future in futures.items():  # recorded in the settings' order, whatever finished first
            result = future.result()
            if not result.ok:
                raise RuntimeError(f"method {method} failed on {result.worker or 'a worker'}: {result.error}")
            done = 0
            for pr in result.result.get("probes", []):
                s.probes.setdefault(pr["key"], SignalProbe.from_dict(pr))
                self._record_probe(pr["key"], SignalProbe.from_dict(pr), {"method": method, **pr["label"]})
            for st in result.result["stages"]:
                stage = StageResult(StageConfig.model_validate(st["config"]), base64.b64decode(st["state"]),
                                    st["trace"], st["tune"], st["train"], st["seconds"])
                s.cache.setdefault(st["key"], stage)
                self._record(st["key"], stage, {"method": method, **st["label"]})
                done += self.budget.of(stage_compute(stage.trace, stage.config.model_dump()))
                if on_stage is not None:
                    on_stage(method, done, stage)
            payload = {**result.result["result"], "worker": result.worker}
            self.store.append("result", payload, key=method)
            self.results[method] = payload
        return self.results

    def _transitions(self):
        """None for the expert rules; else the model or exchange folder behind the shared interface."""
        from loopwise.core.propose.factory import make_proposer
        from loopwise.training.engine import ENGINE

        st = self.settings
        proposer = make_proposer(st.proposer, ENGINE.name, store=self.store, exchange_dir=st.exchange_dir,
                                 exchange_timeout_s=st.exchange_timeout, llm=st.llm)
        if proposer is None:  # the expert rules: the search applies them itself
            return None
        from loopwise.training.proposer import ModelTransitions

        self.model_transitions = ModelTransitions(proposer, self.session.describe(), name=st.proposer,
                                                  record=self.store.append,
                                                  images=st.proposer == "llm" and bool(st.llm.get("images")))
        return self.model_transitions

    def proposals(self) -> dict:
        """The model's transitions so far, counted (``report_data.decision_counts``)."""
        from loopwise.training.report_data import DECISIONS, decision_counts

        return decision_counts([(e.kind, e.payload) for e in self.store.events() if e.kind in DECISIONS])

    def close(self) -> None:
        self.store.close()


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda`` without one is a user error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: torch sees no CUDA GPU here")
    if not (device == "cpu" or device.startswith("cuda")):
        raise UserError(f"--device {device!r}: auto, cpu or cuda[:N]")
    return device


def result_payload(schedule: Schedule, session: Session, seconds: float, budget: Budget) -> dict:
    from loopwise.training.transitions import directions, path_directions

    base_test = session.test_reward(session.base_state)
    return {"method": schedule.method, "configs": [c.model_dump() for c in schedule.configs],
            "tune_reward": schedule.tune_reward, "test_reward": schedule.test_reward,
            "base_tune_reward": session.base_tune, "base_test_reward": base_test,
            "stages_used": schedule.stages_used, "trained": schedule.trained.to_dict(), "seconds": seconds,
            "samples": schedule.compute.samples, "tokens": schedule.compute.tokens, "budget": budget.to_dict(),
            # from the default config, where every method starts: the first stage's move counts
            "directions": directions([session.default_config()] + schedule.configs) if schedule.configs else {},
            **({"path_directions": path_directions(schedule.paths)} if schedule.paths else {}),
            "reasons": list(schedule.reasons), "notes": list(schedule.notes),
            # the share of groups without reward variance: each stage of the schedule's, and over
            # every stage the method trained
            "zero_variance": [zero_variance_share(t) for t in schedule.traces],
            "zero_variance_groups": schedule.groups.to_dict(), "traces": schedule.traces}

