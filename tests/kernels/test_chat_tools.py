"""The kernels engine's chat tools: the static check a model may call on its draft, offered beside
the code search, answering through the same call path as every tool."""

from __future__ import annotations

import json
from pathlib import Path

from loopwise.core.propose.llm._tools import ToolCall, anthropic_spec, engine_tools, openai_spec, run_tool_call

CANDIDATES = Path(__file__).parent / "candidates"


def _call(tools, source: str, **extra) -> str:
    result = run_tool_call({t.name: t for t in tools}, ToolCall("c1", "check_candidate",
                                                                json.dumps({"source": source, **extra})))
    assert not result.is_error, result.content
    return result.content


def test_the_static_check_is_offered_and_judges_a_draft_as_the_judge_scans_it():
    tools = engine_tools("kernels")
    assert "check_candidate" in [t.name for t in tools]
    check = next(t for t in tools if t.name == "check_candidate")
    assert openai_spec(check)["function"]["parameters"]["required"] == ["source"]
    assert anthropic_spec(check)["input_schema"]["properties"]["policy"]["enum"] == ["fp32", "relaxed"]
    honest = (CANDIDATES / "triton_matmul_ieee.py").read_text()
    assert _call(tools, honest).startswith("clean under the fp32 policy")
    plain_dot = honest.replace('input_precision="ieee"', "").replace("input_precision='ieee'", "")
    assert plain_dot != honest
    verdict = _call(tools, plain_dot)
    assert verdict.startswith("rejected under the fp32 policy") and "precision_downgrade" in verdict and "(line " in verdict
    assert _call(tools, plain_dot, policy="relaxed").startswith("clean under the relaxed policy")
    only_torch = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    assert "rejected" in _call(tools, only_torch)


def test_a_bad_call_is_an_error_the_model_reads():
    tools = {t.name: t for t in engine_tools("kernels")}
    result = run_tool_call(tools, ToolCall("c2", "check_candidate", json.dumps({"policy": "fp32"})))
    assert result.is_error and "source" in result.content
