"""Code search over the CUTLASS / CuTe sources, as a user meets it: the API on the real
``nvidia-cutlass`` wheel and on a small checkout, the CLI, and the tools the LLM proposer offers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.core.propose.llm import ToolCall, run_tool_call
from loopwise.errors import UserError
from loopwise.kernels.codesearch import (
    ensure_index,
    read_source,
    resolve_root,
    search,
    wheel_root,
)
from loopwise.kernels.codesearch.tools import cutlass_tools

WIDGET = """\
#pragma once
#define WIDGET_ENABLED 1

namespace cutlass {

/// A widget that frobs tiles.
template <class Element, class Layout = int>
struct Widget {
  using value_type = Element;
  static_assert(sizeof(Element) > 0, "no empty elements");

  CUTLASS_HOST_DEVICE
  int frob(int x) const {
    return helper_call(x) + 1;
  }
};

template <class T>
CUTLASS_HOST_DEVICE
auto
make_widget(T const& t)
{
  return Widget<T>{};
}

using DefaultWidget = Widget<float>;

} // namespace cutlass
"""

LONG_STRUCT = "namespace cute {\nstruct HugeAtom {\n" + "".join(
    f"  CUTE_DEVICE void step_{i}() {{ x += {i}; }}\n" for i in range(150)) + "};\n} // namespace cute\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel's sources, indexed once for this module into a fresh cache folder."""
    if wheel_root() is None:
        pytest.skip("nvidia-cutlass is not installed (pip install nvidia-cutlass)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOPWISE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("LOOPWISE_CUTLASS_ROOT", raising=False)
        yield ensure_index(resolve_root())


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A tiny CUTLASS checkout, and a cache folder of its own."""
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LOOPWISE_CUTLASS_ROOT", raising=False)
    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cute" / "atom").mkdir(parents=True)
    (root / "examples" / "00_demo").mkdir(parents=True)
    (root / "include" / "cutlass" / "widget.hpp").write_text(WIDGET)
    (root / "include" / "cute" / "atom" / "huge_atom.hpp").write_text(LONG_STRUCT)
    (root / "examples" / "00_demo" / "demo.cu").write_text(
        '#include "cutlass/widget.hpp"\nint main() {\n  auto w = cutlass::make_widget(1.0f);\n  return 0;\n}\n')
    (root / "examples" / "00_demo" / "notes.txt").write_text("make_widget is not indexed here\n")
    return root


def test_the_wheel_index_is_built_once_and_then_reused(wheel):
    assert not wheel.reused and wheel.files > 1000 and wheel.chunks > 10000
    assert wheel.size_bytes == wheel.path.stat().st_size > 0
    stamp = wheel.path.stat().st_mtime_ns
    again = ensure_index(resolve_root())
    assert again.reused and again.path == wheel.path and again.chunks == wheel.chunks
    assert wheel.path.stat().st_mtime_ns == stamp  # not written again


def test_sm90_tma_load_finds_the_tma_copy_atoms(wheel):
    hits = search("SM90_TMA_LOAD", limit=5)
    assert hits[0].path == "include/cute/arch/copy_sm90_tma.hpp" and "SM90_TMA_LOAD" in hits[0].symbols
    assert "include/cute/atom/copy_traits_sm90_tma.hpp" in [h.path for h in hits[:3]]


def test_tma_warp_specialized_finds_the_collectives(wheel):
    hits = search("TMA warp specialized", limit=10)
    assert len(hits) == 10
    assert any(h.path.startswith(("include/cutlass/gemm/collective/", "include/cute/atom/")) for h in hits)
    assert all("tma" in h.path.lower() or "tma" in h.snippet.lower() for h in hits)


@pytest.mark.parametrize(("query", "defining_file", "name"), [
    ("make_tiled_copy", "include/cute/atom/copy_atom.hpp", "make_tiled_copy"),
    ("TiledMMA", "include/cute/atom/mma_atom.hpp", "TiledMMA"),
    ("tiled mma", "include/cute/atom/mma_atom.hpp", "TiledMMA"),
    ("make_tma_copy", "include/cute/atom/copy_traits_sm90_tma.hpp", "make_tma_copy"),
    ("KernelTmaWarpSpecializedCooperative", "include/cutlass/gemm/dispatch_policy.hpp",
     "KernelTmaWarpSpecializedCooperative"),
    ("cute::gemm", "include/cute/algorithm/gemm.hpp", "gemm"),
    ("CUTE_HOST_DEVICE", "include/cute/config.hpp", "CUTE_HOST_DEVICE"),
])
def test_a_symbol_query_ranks_the_defining_file_first(wheel, query, defining_file, name):
    top = search(query, limit=3)[0]
    assert top.path == defining_file and name in top.symbols


def test_collective_mma_is_found_by_its_parts(wheel):
    hits = search("collective mma", limit=5)
    assert all(h.path.startswith("include/cutlass/gemm/collective/") and "CollectiveMma" in h.symbols for h in hits)


def test_hits_are_bounded_and_their_snippets_are_the_files_lines(wheel):
    hits = search("partition_S", limit=8)
    assert len({(h.path, h.start_line) for h in hits}) == len(hits) == 8
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:
        lines = hit.snippet.split("\n")
        assert 1 <= len(lines) <= 8 and all(len(line) <= 160 for line in lines)
        assert hit.start_line <= hit.snippet_line and hit.snippet_line + len(lines) - 1 <= hit.end_line
        source = read_source(hit.path, hit.snippet_line, hit.snippet_line + len(lines) - 1).split("\n")
        assert [line.rstrip()[:160] for line in source] == lines
    assert "partition_S" in hits[0].snippet


def test_read_source_is_bounded_to_the_root_and_to_200_lines(wheel):
    path = "include/cute/atom/copy_atom.hpp"
    full = (resolve_root() / path).read_text().split("\n")
    assert read_source(path, 490, 495) == "\n".join(full[489:495])
    assert read_source(path, 1, 10_000).count("\n") == 199
    assert read_source(path, len(full) - 2, len(full) + 50) == "\n".join(full[-3:])
    for bad, fault in [("../../../../../../etc/passwd", "outside"), ("/etc/passwd", "outside"),
                       ("include/cute/nope.hpp", "no such file"), ("include/cute", "no such file")]:
        with pytest.raises(UserError, match=fault):
            read_source(bad, 1, 5)
    with pytest.raises(UserError, match="past its end"):
        read_source(path, len(full) + 10, len(full) + 20)
    with pytest.raises(UserError, match="numbered from 1"):
        read_source(path, 0, 5)
    with pytest.raises(UserError, match="limit"):
        search("copy", limit=0)
    with pytest.raises(UserError, match="nothing to search"):
        search(":: ->")


def test_a_checkout_is_indexed_with_its_names_and_rebuilt_when_a_file_changes(checkout):
    [hit] = search("make_widget", limit=1, root=checkout)
    assert hit.path == "include/cutlass/widget.hpp" and hit.start_line == 1
    assert {"WIDGET_ENABLED", "Widget", "frob", "make_widget", "DefaultWidget"} <= set(hit.symbols)
    assert not {"Element", "Layout", "value_type", "static_assert", "helper_call"} & set(hit.symbols)
    assert ensure_index(checkout).reused
    header = checkout / "include" / "cutlass" / "widget.hpp"
    header.write_text(WIDGET.replace("using DefaultWidget", "inline int polish_widget() { return 1; }\n"
                                                           "using DefaultWidget"))
    assert not ensure_index(checkout).reused  # a changed file: built again
    assert search("polish_widget", limit=1, root=checkout)[0].symbols[-2:] == ("polish_widget", "DefaultWidget")
    assert ensure_index(checkout).reused
    header.unlink()
    assert [h.path for h in search("make_widget", limit=5, root=checkout)] == ["examples/00_demo/demo.cu"]


def test_a_long_declaration_is_cut_into_windows_that_still_answer_to_its_name(checkout):
    hits = [h for h in search("step", limit=10, root=checkout) if h.path.endswith("huge_atom.hpp")]
    assert len(hits) >= 2 and all(h.end_line - h.start_line + 1 <= 80 for h in hits)
    # line 142 defines step_140, far from the line naming HugeAtom: its window is found by both
    deep = search("HugeAtom step_140", limit=1, root=checkout)[0]
    assert deep.path.endswith("huge_atom.hpp") and 80 < deep.start_line <= 142 <= deep.end_line
    assert "step_140" in deep.symbols and "HugeAtom" not in deep.symbols


def test_the_root_comes_from_the_environment_and_bad_roots_are_user_errors(checkout, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWISE_CUTLASS_ROOT", str(checkout))
    assert search("frob", limit=1)[0].path == "include/cutlass/widget.hpp"
    (tmp_path / "plain" / "include").mkdir(parents=True)
    with pytest.raises(UserError, match="not a CUTLASS checkout"):
        search("x", root=tmp_path / "plain")
    with pytest.raises(UserError, match="not a folder"):
        search("x", root=tmp_path / "missing")


def test_without_the_wheel_and_without_a_root_the_error_names_the_pip_command(monkeypatch):
    monkeypatch.delenv("LOOPWISE_CUTLASS_ROOT", raising=False)
    monkeypatch.setitem(sys.modules, "cutlass_library", None)  # what find_spec reports for a missing package
    with pytest.raises(UserError, match="pip install nvidia-cutlass"):
        search("SM90_TMA_LOAD")
    assert cutlass_tools() == []  # no search tools (the static check is still offered)


def test_cli_prints_a_table_and_json(wheel):
    human = CliRunner().invoke(app, ["kernels", "codesearch", "SM90_TMA_LOAD", "--limit", "3"],
                               env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.output
    assert "include/cute/arch/copy_sm90_tma.hpp:" in human.output and "struct SM90_TMA_LOAD" in human.output
    assert "3 hits" in human.output and "index reused" in human.output
    data = json.loads(CliRunner().invoke(app, ["kernels", "codesearch", "make_tiled_copy", "-n", "2", "--json"]).output)
    assert data["query"] == "make_tiled_copy" and Path(data["root"]) == resolve_root()
    first = data["hits"][0]
    assert first["path"] == "include/cute/atom/copy_atom.hpp" and "make_tiled_copy" in first["symbols"]
    assert {"start_line", "end_line", "snippet", "snippet_line", "score"} <= set(first) and len(data["hits"]) == 2


def test_cli_with_a_root_and_its_clean_errors(checkout, tmp_path):
    result = CliRunner().invoke(app, ["kernels", "codesearch", "frob", "--root", str(checkout), "--json"])
    assert json.loads(result.output)["hits"][0]["path"] == "include/cutlass/widget.hpp"
    result = CliRunner().invoke(app, ["kernels", "codesearch", "frob", "--root", str(tmp_path / "nope")])
    assert result.exit_code != 0 and isinstance(result.exception, UserError)
    env = {**os.environ, "LOOPWISE_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "codesearch", "frob", "--root",
                          str(tmp_path / "nope")], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 2 and run.stderr.startswith("error: ") and "not a folder" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1


def test_the_proposer_tools_search_and_read_and_answer_faults_as_results(checkout):
    search_tool, read_tool = tools = cutlass_tools(checkout)
    by_name = {t.name: t for t in tools}
    assert (search_tool.name, read_tool.name) == ("cutlass_search", "cutlass_read")
    found = run_tool_call(by_name, ToolCall("1", "cutlass_search", json.dumps({"query": "make_widget", "limit": 2})))
    assert not found.is_error and "include/cutlass/widget.hpp:1-" in found.content and "make_widget" in found.content
    read = run_tool_call(by_name, ToolCall("2", "cutlass_read", json.dumps(
        {"path": "include/cutlass/widget.hpp", "start_line": 20, "end_line": 21})))
    assert read.content == "include/cutlass/widget.hpp lines 20-21:\n    20| auto\n    21| make_widget(T const& t)"
    for arguments, fault in [({"path": "../../etc/passwd", "start_line": 1}, "outside"),
                             ({"path": "include/cutlass/widget.hpp"}, "missing argument 'start_line'"),
                             ({"path": "include/cutlass/widget.hpp", "start_line": "1"}, "must be a integer")]:
        result = run_tool_call(by_name, ToolCall("3", "cutlass_read", json.dumps(arguments)))
        assert result.is_error and fault in result.content
    nothing = run_tool_call(by_name, ToolCall("4", "cutlass_search", '{"query": "zzzqqq"}'))
    assert not nothing.is_error and "no match" in nothing.content


def test_the_cutlass_tools_conform_to_the_chat_tool_contract(checkout, monkeypatch):
    from chat_tool_conformance import check_chat_tool

    search_tool, read_tool = cutlass_tools(checkout)
    assert "make_widget" in check_chat_tool(search_tool, {"query": "make_widget", "limit": 1})
    assert "struct Widget" in check_chat_tool(read_tool, {"path": "include/cutlass/widget.hpp", "start_line": 1})


def test_the_llm_proposer_calls_the_cutlass_tools_by_default_for_kernels(checkout, monkeypatch):
    from fake_llm_server import FakeLLMServer, call, good, tool_use

    from loopwise.core.propose import ProposalRequest
    from loopwise.core.propose.llm import LLMConfig, LLMProposer

    monkeypatch.setenv("LOOPWISE_CUTLASS_ROOT", str(checkout))
    server = FakeLLMServer().start()
    try:
        server.queue(tool_use(call("cutlass_search", {"query": "make_widget"})), good())
        config = LLMConfig(model="fake-model", base_url=server.base_url + "/v1", max_retries=0)
        [result] = LLMProposer(config).propose(ProposalRequest(kind="kernels", task="relu"))
        first, second = server.posts()
    finally:
        server.stop()
    assert result.ok
    assert [t["function"]["name"] for t in first.body["tools"]] == ["cutlass_search", "cutlass_read", "check_candidate",
                                                                  "profile_candidate"]
    answer = second.body["messages"][-1]
    assert answer["role"] == "tool" and "include/cutlass/widget.hpp:1-" in answer["content"]


def test_optimize_passes_llm_tool_rounds_to_the_proposer_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run folder goes here
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    problem = Path(__file__).parents[1] / "candidates" / "problems" / "relu.py"
    result = CliRunner().invoke(app, ["kernels", "optimize", str(problem), "--proposer", "llm", "--llm-model", "m",
                                      "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-tool-rounds", "-1",
                                      "--budget", "1", "--device", "cpu"])
    assert isinstance(result.exception, UserError) and "max_tool_rounds" in str(result.exception)
