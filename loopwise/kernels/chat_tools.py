"""The tools the LLM proposer offers a model writing kernels: the CUTLASS / CuTe code search, the
judge's static check of a draft (``check_candidate``), so a model can find what the judge would
reject before it answers, and a profile of a draft against the run's problem
(``profile_candidate``), the pipeline of ``loopwise kernels profile``. Each is made for one run
(a ``ToolContext``): its problem, its precision policy (read from its rules), its device and folder."""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from loopwise.core.files import write_atomic
from loopwise.core.propose.llm import ChatTool, ToolContext, ToolError

PROFILE_RESULT_CHARS = 4000  # a profile's guidance as the model reads it, cut to whole lines
PROFILE_TIMEOUT_S = 300.0  # per profiler child (the command allows 600): a tool call holds up a proposal


def run_policy(context: ToolContext) -> str:
    """The run's precision policy, as its rules state it (fp32, the judge's default, when they do not)."""
    from loopwise.kernels.optimize.prompt import judge_options

    options = judge_options(context.rules)
    return dict(zip(options[::2], options[1::2])).get("--precision", "fp32")


class CheckCandidate(ChatTool):
    """``check_candidate(source, policy)``: the judge's static exploit and precision scan of a draft."""

    name = "check_candidate"

    def __init__(self, policy: str = "fp32") -> None:
        self.policy = policy
        self.description = (
            "Check a draft ModelNew file statically, as the judge does before running it: exploits (a "
            "candidate that only calls PyTorch, side streams, timing tricks, ...) and, under the fp32 "
            "policy, reduced-precision math (TF32, fp16, bf16; a Triton tl.dot on fp32 inputs needs "
            "input_precision='ieee' or 'tf32x3'). Returns each reason with its line, or that the draft is "
            f"clean. It does not run the draft: correctness and speed are the judge's. This run's policy "
            f"is {policy}."
        )
        self.parameters: Mapping[str, Any] = {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "the whole Python file of the draft"},
                "policy": {"type": "string", "enum": ["fp32", "relaxed"],
                           "description": f"the precision policy to check against (default: the run's, {policy})"},
            },
            "required": ["source"],
            "additionalProperties": False,
        }

    def run(self, arguments: Mapping[str, Any]) -> str:
        from loopwise.kernels.check import scan

        policy = arguments.get("policy", self.policy)
        reasons = scan(arguments["source"], policy=policy, filename="draft.py")
        rejected = [r for r in reasons if r.severity == "reject"]
        head = (f"rejected under the {policy} policy ({len(rejected)} reason(s)):" if rejected else
                f"clean under the {policy} policy: nothing the static check rejects")
        lines = [f"- [{r.severity}] {r.code}: {r.message}" + (f" (line {r.evidence['line']})"
                                                             if r.evidence.get("line") is not None else "")
                 for r in reasons]
        return "\n".join([head, *lines])


class ProfileCandidate(ChatTool):
    """``profile_candidate(source)``: a draft through ``loopwise kernels profile`` against the run's
    problem, on the run's device; the guidance (kernels on the roofline, the tools' findings and
    their moves) cut to ``PROFILE_RESULT_CHARS``. The draft runs in the profiler's child processes,
    never in the process asking. Without CUDA it answers so, in one line.

    Args:
        context: the run: its problem (``task``), policy, device and folder (the files of each
            profile stay there, one folder per draft; a temporary folder when the run has none).
        profiler: ``profile(problem, candidate, out_dir, **options) -> ProfileReport``; None: the
            real one, :func:`loopwise.kernels.profile.run.profile`.
    """

    name = "profile_candidate"
    description = (
        "Profile a draft ModelNew file on this run's GPU against the run's problem, as `loopwise kernels "
        "profile` does: each kernel's time and roofline class (memory-, compute- or latency-bound, share "
        "of its speed of light) and the micro-profiling tools' findings with the moves they suggest. "
        "Use it on a draft you believe correct, to see where its time goes; it costs tens of seconds. "
        "It does not judge correctness. Needs an NVIDIA GPU."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"source": {"type": "string", "description": "the whole Python file of the draft"}},
        "required": ["source"],
        "additionalProperties": False,
    }

    def __init__(self, context: ToolContext, profiler: Callable[..., Any] | None = None) -> None:
        self.context = context
        self.policy = run_policy(context)
        self._profiler = profiler

    def device(self) -> str:
        """The device profiles run on: the run's, else the first CUDA GPU when one is visible."""
        if self.context.device:
            return self.context.device
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"

    def run(self, arguments: Mapping[str, Any]) -> str:
        device = self.device()
        if not device.startswith("cuda"):
            raise ToolError(f"no GPU: profiling needs CUDA, and this run judges on {device}; "
                            "check_candidate still works")
        from loopwise.kernels.problem import load_problem
        from loopwise.kernels.profile.guidance import guidance_text

        profiler = self._profiler
        if profiler is None:
            from loopwise.kernels.profile.run import profile as profiler
        source = arguments["source"]
        with self._workspace(source) as folder:
            problem_file = _write(folder / "problem.py", self.context.task)
            draft = _write(folder / "draft.py", source)
            problem = load_problem(str(problem_file))
            report = profiler(problem, draft, folder / "profile", device=device, mode="proactive", ncu="auto",
                              precision=self.policy, timeout_s=PROFILE_TIMEOUT_S)
            return guidance_text(report, PROFILE_RESULT_CHARS)

    @contextlib.contextmanager
    def _workspace(self, source: str) -> Iterator[Path]:
        """The folder of this draft's profile: under the run's folder (kept), else a temporary one."""
        if self.context.folder is None:
            with tempfile.TemporaryDirectory(prefix="lw-profile-") as tmp:
                yield Path(tmp)
            return
        folder = Path(self.context.folder) / f"profile-{hashlib.sha256(source.encode()).hexdigest()[:12]}"
        folder.mkdir(parents=True, exist_ok=True)
        yield folder


def _write(path: Path, text: str) -> Path:
    return write_atomic(path, text)


def kernel_tools(context: ToolContext) -> list[ChatTool]:
    """The code search's two tools (none without CUTLASS sources), the static check under the run's
    policy, and the profile of a draft when the run states its problem."""
    from loopwise.kernels.codesearch.tools import cutlass_tools

    tools: list[ChatTool] = [*cutlass_tools(), CheckCandidate(run_policy(context))]
    if context.task.strip():
        tools.append(ProfileCandidate(context))
    return tools
