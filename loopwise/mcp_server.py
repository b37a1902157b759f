"""``loopwise mcp``: the kernel lab as Model Context Protocol tools, for coding agents.

An agent that writes kernels gets the same judge, static check, profiler and run store as the
``loopwise kernels`` commands, over stdio: every tool answers a short text summary, the result as
JSON text, and the same result as structured content. A mistake in what the agent sent (an unknown
problem, a bad path, an unknown run) is an error result with a one-line message, never a crash.

Tools are plain functions: the SDK runs them on worker threads, so a judgement or a profile that
takes minutes never stalls the protocol. Judgements and profiles take turns on the device (a
lock), because two of them at once would disturb each other's timings.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from loopwise import __version__
from loopwise.errors import UserError

if TYPE_CHECKING:
    from loopwise.config import Config
    from loopwise.kernels.optimize import OptimizeStatus

__all__ = ["Answer", "KernelLab", "build_server", "serve"]

log = logging.getLogger(__name__)

LOG_TAIL = 4000  # characters of the sandbox log an eval answer carries; the whole log stays in the run
CANDIDATE = "candidate.py"  # the name a candidate sent as text is judged, stored and profiled under

Device = Annotated[Literal["auto", "cuda", "cpu"], Field(description="auto (a CUDA GPU when there is one), "
                                                                      "cuda, or cpu.")]
Problem = Annotated[str, Field(description="A KernelBench-format problem file (class Model, get_inputs, "
                                           "get_init_inputs), or kernelbench:LEVEL/ID, e.g. kernelbench:1/19.")]
Source = Annotated[str, Field(description="Python source of the candidate: it defines class ModelNew with the "
                                          "reference Model's constructor and forward signature.")]
Policy = Literal["fp32", "relaxed"]
PolicyArg = Annotated[Policy | None, Field(description="fp32 (the default: no TF32/fp16/bf16 math) or relaxed.")]
INSTRUCTIONS = ("loopwise's kernel lab. A typical loop: `check` a candidate ModelNew (instant, static), `eval` it "
                "against its problem (correctness over several trials, then speedup over eager PyTorch), "
                "`profile` it on a GPU to learn what limits it, and find CUTLASS / CuTe code to build on "
                "with `codesearch` and `read_source`. `optimize_status` reports on `loopwise kernels optimize` runs.")


@dataclass(frozen=True)
class Answer:
    """What a tool returns: a summary for a person, JSON-able data, and optionally the text to show
    instead of the data's JSON (e.g. source code)."""

    summary: str
    data: dict[str, Any]
    body: str | None = None


def _tool(work: Callable[..., Answer]) -> Callable[..., CallToolResult]:
    """Turns a tool's ``Answer`` into a tool result, and a ``UserError`` into an error result.

    Anything else is a bug in loopwise: still an error result (with the exception's type and text),
    its traceback on the server's stderr, and the server keeps serving.
    """

    @functools.wraps(work)
    def run(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            answer = work(*args, **kwargs)
        except UserError as exc:
            return _error(" ".join(str(exc).split()))
        except Exception as exc:  # one broken call must not take the server down
            log.exception("tool %s failed", work.__name__)
            return _error(f"internal error: {type(exc).__name__}: {exc}")
        body = answer.body if answer.body is not None else json.dumps(answer.data, indent=1)
        return CallToolResult(content=[TextContent(type="text", text=answer.summary), TextContent(type="text", text=body)],
                              structured_content=answer.data)

    return run


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _plain(obj: Any) -> Any:
    """A JSON-able copy of a record (dataclass, pydantic model or plain object), non-finite floats as None."""
    from loopwise.kernels.eval_runs import finite

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    elif hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    elif hasattr(obj, "__dict__"):
        obj = dict(vars(obj))
    return finite(json.loads(json.dumps(obj, default=str)))


class KernelLab:
    """The tools ``loopwise mcp`` serves, bound to one runs folder and KernelBench checkout."""

    def __init__(self, runs_dir: str = "runs", kernelbench: str | None = None) -> None:
        self.runs_dir = runs_dir
        self.kernelbench = kernelbench
        self._device_turn = threading.Lock()  # one judgement or profile at a time

    def _config(self, device: str, settings: dict[str, Any]) -> Config:
        """The resolved config of one call: the server's folders, the device, and judge settings."""
        from loopwise.config import load_config
        from loopwise.kernels.config import EvalConfig

        unknown = sorted(set(settings) - set(EvalConfig.model_fields))
        if unknown:
            raise UserError(f"config: unknown judge setting {', '.join(map(repr, unknown))}; known: "
                            f"{', '.join(EvalConfig.model_fields)}")
        # JSON is YAML, so every value reads back exactly as it was sent
        overrides = [f"kernels.eval.{key}={json.dumps(value)}" for key, value in settings.items()]
        overrides += [f"kernels.device={device}", f"store.runs_dir={json.dumps(self.runs_dir)}"]
        if self.kernelbench:
            overrides.append(f"kernels.kernelbench={json.dumps(self.kernelbench)}")
        return load_config(None, overrides)

    @_tool
    def eval(self, problem: Problem, candidate_source: Source, device: Device = "auto",
             precision: PolicyArg = None,
             tolerance: Annotated[Literal["strict", "legacy"] | None,
                                  Field(description="strict (the default: 1e-4) or legacy (1e-2, KernelBench v0).")] = None,
             config: Annotated[dict[str, Any] | None,
                               Field(description="Other judge settings (kernels.eval.*), e.g. {\"perf_trials\": 20, "
                                                 "\"correct_trials\": 3, \"static_check\": false, "
                                                 "\"require_custom_kernel\": false}.")] = None) -> Answer:
        """Judge one candidate against its problem, exactly as `loopwise kernels eval` does: static
        exploit check, correctness over several seeded trials and stress inputs, then timing against
        eager PyTorch. Returns status (correct, compile_error, wrong_output, timeout, crash, oom,
        exploit), speedup (correct only), timing and reference_timing in ms, the reasons behind the
        verdict, the tail of the sandbox log, and the run_id it was recorded under. Takes seconds to
        minutes."""
        from loopwise.config import dump_config
        from loopwise.core.run import create_run
        from loopwise.kernels.evaluate.judge import LocalJudge
        from loopwise.kernels.problem import load_problem
        from loopwise.kernels.eval_runs import finite, record_evaluation

        explicit = {key: value for key, value in (("precision", precision), ("tolerance", tolerance)) if value}
        cfg = self._config(device, {**(config or {}), **explicit})
        prob = load_problem(problem, cfg.kernels.kernelbench)
        with self._device_turn, create_run(cfg.store.runs_dir, "kernels.eval", dump_config(cfg)) as store, \
                LocalJudge(prob, cfg.kernels.eval, device=cfg.kernels.device, log_dir=store.run_dir / "logs",
                      spares=0) as judge:
            store.append("problem", {"name": prob.name, "sha256": prob.sha256, "device": judge.device_name})
            ev = judge.evaluate(candidate_source, CANDIDATE)
            source_sha = store.put_artifact(candidate_source, name=CANDIDATE, media_type="text/x-python")
            record_evaluation(store, ev, judge.key(candidate_source), source_sha256=source_sha)
        data = finite(ev.to_json_dict())
        data.pop("log", None)
        data.update(log_tail=(ev.log or "")[-LOG_TAIL:], run_id=store.meta.run_id, run_dir=str(store.run_dir))
        return Answer(f"{ev.summary()} · {prob.name} on {judge.device_name} · run {store.meta.run_id}", data)

    @_tool
    def check(self, candidate_source: Source,
              precision: Annotated[Policy, Field(description="fp32 rejects TF32/fp16/bf16 math; relaxed "
                                                             "reports it as info.")] = "fp32") -> Answer:
        """Static exploit and precision scan of a candidate, without running it (instant, no GPU):
        plain PyTorch instead of a kernel, patched timers or libraries, threads, lazy outputs,
        reaching for the reference, silent fallbacks, precision downgrades. Returns rejected (true
        when any reason has severity reject), the kernel backends found, and the reasons (code,
        message, severity, evidence with the line)."""
        from loopwise.kernels.check import detect_backends, scan

        reasons = scan(candidate_source, policy=precision, filename=CANDIDATE)
        rejects = [r for r in reasons if r.severity == "reject"]
        data = {"rejected": bool(rejects), "policy": precision, "backends": sorted(detect_backends(candidate_source)),
                "reasons": [r.model_dump(mode="json") for r in reasons]}
        if rejects:
            summary = f"rejected: {rejects[0].code}: {rejects[0].message}"
            summary += f" (and {len(rejects) - 1} more)" if len(rejects) > 1 else ""
        else:
            flags = [r.code for r in reasons if r.severity == "flag"]
            summary = "passes the static check" + (f", flagged for review: {', '.join(flags)}" if flags else "")
        return Answer(summary, data)

    @_tool
    def profile(self, problem: Problem,
                candidate_source: Annotated[str | None, Field(description="Python source defining ModelNew; "
                                                                          "omit to profile the reference Model.")] = None,
                mode: Annotated[Literal["proactive", "all", "raw"],
                                Field(description="Which micro-profiling tools run: proactive (chosen by each "
                                                  "kernel's roofline class), all, or raw (measurements only).")] = "proactive",
                ncu: Annotated[Literal["auto", "on", "off"],
                               Field(description="Nsight Compute: auto (when found), on (required) or off.")] = "auto",
                device: Device = "auto", precision: PolicyArg = None,
                out_dir: Annotated[str | None, Field(description="Folder for the trace, ncu CSV, roofline PNG and "
                                                                 "profile.json (default: ./loopwise-profile/<problem>).")] = None,
                ) -> Answer:
        """Profile a candidate (or the reference) on a CUDA GPU, exactly as `loopwise kernels profile`
        does: system trace, SASS, Nsight Compute metrics, each kernel's roofline class, and the
        findings of the micro-profiling tools, highest score first, with the moves they suggest.
        Returns kernels (time, class, share of speed of light, DRAM MB, GFLOP, registers), findings,
        notes, costs and the folder of artifacts. Needs a CUDA GPU. Takes tens of seconds."""
        from loopwise.kernels.device import resolve_device
        from loopwise.kernels.problem import load_problem
        from loopwise.kernels.profile.run import profile

        cfg = self._config(device, {"precision": precision} if precision else {})
        if device == "cpu":
            raise UserError("profile needs a CUDA GPU: give device auto or cuda (eval and check run on the CPU)")
        if not _cuda_visible():
            raise UserError("profile needs a CUDA GPU and none is visible to this server "
                            "(torch.cuda.is_available() is False); eval and check work without one")
        prob = load_problem(problem, cfg.kernels.kernelbench)
        folder = Path(out_dir) if out_dir else Path("loopwise-profile") / Path(prob.name).name
        candidate = None
        if candidate_source is not None:
            folder.mkdir(parents=True, exist_ok=True)
            candidate = (folder / CANDIDATE).resolve()
            candidate.write_text(candidate_source, encoding="utf-8")
        with self._device_turn:
            report = profile(prob, candidate, folder, device=resolve_device(cfg.kernels.device), mode=mode, ncu=ncu,
                             precision=cfg.kernels.eval.precision)
        data = {**_plain(report), "folder": str(folder.resolve())}
        top = report.top_finding()
        summary = (f"{len(report.kernels)} kernels on {report.device}, {len(report.findings)} findings"
                   + (f"; top: {top.tool}: {top.guidance}" if top else "; nothing worth fixing found"))
        return Answer(summary, data)

    @_tool
    def tools(self) -> Answer:
        """The installed micro-profiling tools that `profile` runs: for each, its name, what it reads
        (sass, ncu, trace, launch...), the roofline classes for which the proactive mode runs it,
        and what it looks for."""
        from loopwise.kernels.profile.registry import load_tools

        rows = [{"name": t.name, "needs": sorted(t.needs), "runs_for": sorted(t.applies_to), "summary": t.summary,
                 "generic": t.generic, "module": type(t).__module__} for t in load_tools()]
        return Answer(f"{len(rows)} micro-profiling tools: {', '.join(r['name'] for r in rows)}", {"tools": rows})

    @_tool
    def codesearch(self, query: Annotated[str, Field(description="Names or words, e.g. 'make_tiled_copy', "
                                                                 "'TMA warp specialized', 'CollectiveMma'.")],
                   limit: Annotated[int, Field(ge=1, le=50, description="Most hits to return.")] = 10) -> Answer:
        """Search the CUTLASS / CuTe C++ sources (the nvidia-cutlass wheel's, or the checkout in
        $LOOPWISE_CUTLASS_ROOT) for the code a kernel can build on: names are matched by their parts.
        Returns hits, best first: path, start_line, end_line, the symbols defined there, a snippet
        and a score. Read a hit in full with read_source. The first search builds an index."""
        hits = [_plain(hit) for hit in _codesearch().search(query, limit=limit)]
        lines = [f"{h.get('path')}:{h.get('start_line')}-{h.get('end_line')}" for h in hits[:5]]
        return Answer(f"{len(hits)} hits for {query!r}" + (": " + ", ".join(lines) if lines else ""), {"hits": hits})

    @_tool
    def read_source(self, path: Annotated[str, Field(description="A path as codesearch returns it.")],
                    start_line: Annotated[int, Field(ge=1, description="First line, 1-based.")],
                    end_line: Annotated[int, Field(ge=1, description="Last line, included.")]) -> Answer:
        """Lines start_line..end_line of a file of the sources codesearch searches (at most 200
        lines; a range past the end of the file stops at its last line). Returns the text and the
        lines it spans."""
        text = _codesearch().read_source(path, start_line, end_line)
        last = start_line + text.count("\n")
        data = {"path": path, "start_line": start_line, "end_line": last, "text": text}
        return Answer(f"{path}:{start_line}-{last}", data, body=text)

    @_tool
    def optimize_status(self, run_id: Annotated[str | None, Field(description="One run's id; omit to list every "
                                                                              "optimize run, latest first.")] = None,
                        ) -> Answer:
        """Where `loopwise kernels optimize` runs stand, read from the runs folder: for each run its
        problem, proposer and search, candidates judged out of the budget, the best speedup so far,
        failures by status, whether it ended, and the file its best candidate was written to. With
        run_id: that run alone, with every verdict (node, status, speedup, first rejection)."""
        from loopwise.kernels.optimize import optimize_run, optimize_runs

        if run_id is not None:
            status = optimize_run(self.runs_dir, run_id)
            return Answer(_status_line(status), _plain(status))
        runs = optimize_runs(self.runs_dir)
        summary = f"{len(runs)} optimize runs in {self.runs_dir}" + "".join(f"\n{_status_line(s)}" for s in runs)
        return Answer(summary, {"runs_dir": self.runs_dir, "runs": [_plain(s) for s in runs]})


def _status_line(s: OptimizeStatus) -> str:
    best = f"best {s.best_speedup:.3f}x" if s.best_speedup is not None else "no correct candidate yet"
    fails = ", ".join(f"{k} {v}" for k, v in s.failures.items()) or "none"
    end = f"best written to {s.best_path}" if s.best_path else ("ended" if s.complete else "not ended")
    return f"{s.run_id} {s.problem}: {s.evaluations}/{s.budget} judged, {best}, failures: {fails}; {end}"


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def _codesearch():
    """The code search module, imported on first use: a loopwise without it still serves the other tools."""
    try:
        from loopwise.kernels import codesearch
    except ImportError as exc:
        raise UserError(f"code search is not available in this loopwise (loopwise.kernels.codesearch: {exc})") from None
    missing = [name for name in ("search", "read_source") if not hasattr(codesearch, name)]
    if missing:
        raise UserError(f"code search is not available in this loopwise (loopwise.kernels.codesearch has no "
                        f"{' or '.join(missing)})")
    return codesearch


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# eval records each verdict in the runs folder and profile writes its artifacts: neither changes what was there
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
TOOLS: dict[str, ToolAnnotations] = {"eval": WRITES, "check": READ_ONLY, "profile": WRITES, "tools": READ_ONLY,
                                     "codesearch": READ_ONLY, "read_source": READ_ONLY, "optimize_status": READ_ONLY}


def build_server(runs_dir: str = "runs", kernelbench: str | None = None) -> MCPServer:
    """The MCP server with every tool of a ``KernelLab`` on these folders."""
    lab = KernelLab(runs_dir, kernelbench)
    server = MCPServer("loopwise", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    for name, hints in TOOLS.items():
        fn = getattr(lab, name)
        server.add_tool(fn, name=name, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints,
                        structured_output=False)
    return server


def serve(runs_dir: str = "runs", kernelbench: str | None = None) -> None:
    """Serves the tools over stdio until the client closes the connection."""
    build_server(runs_dir, kernelbench).run("stdio")
