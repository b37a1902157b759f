"""The tools the LLM proposer offers a model writing kernels: the CUTLASS / CuTe code search and
the judge's static check of a draft (``check_candidate``), so a model can find what the judge would
reject before it answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopwise.core.propose.llm import ChatTool


class CheckCandidate(ChatTool):
    """``check_candidate(source, policy)``: the judge's static exploit and precision scan of a draft."""

    name = "check_candidate"
    description = (
        "Check a draft ModelNew file statically, as the judge does before running it: exploits (a "
        "candidate that only calls PyTorch, side streams, timing tricks, ...) and, under the fp32 "
        "policy, reduced-precision math (TF32, fp16, bf16; a Triton tl.dot on fp32 inputs needs "
        "input_precision='ieee' or 'tf32x3'). Returns each reason with its line, or that the draft is "
        "clean. It does not run the draft: correctness and speed are the judge's."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "description": "the whole Python file of the draft"},
            "policy": {"type": "string", "enum": ["fp32", "relaxed"],
                       "description": "the run's precision policy (default fp32)"},
        },
        "required": ["source"],
        "additionalProperties": False,
    }

    def run(self, arguments: Mapping[str, Any]) -> str:
        from loopwise.kernels.check import scan

        policy = arguments.get("policy", "fp32")
        reasons = scan(arguments["source"], policy=policy, filename="draft.py")
        rejected = [r for r in reasons if r.severity == "reject"]
        head = (f"rejected under the {policy} policy ({len(rejected)} reason(s)):" if rejected else
                f"clean under the {policy} policy: nothing the static check rejects")
        lines = [f"- [{r.severity}] {r.code}: {r.message}" + (f" (line {r.evidence['line']})"
                                                             if r.evidence.get("line") is not None else "")
                 for r in reasons]
        return "\n".join([head, *lines])


def kernel_tools() -> list[ChatTool]:
    """The code search's two tools (none without CUTLASS sources) and the static check."""
    from loopwise.kernels.codesearch.tools import cutlass_tools

    return [*cutlass_tools(), CheckCandidate()]
