"""Profiling findings flow into the search: each expanded candidate is profiled once (recorded in
the run store, replayed on resume), its findings reach the proposer, and the expert proposer tries
the moves the tools suggest before its own neighbours. A stand-in judge (on a pretend CUDA device)
and a stand-in profiler keep this on the CPU."""

from __future__ import annotations

from pathlib import Path

from judge_doubles import StandInJudge

from loopwise.config import load_config
from loopwise.core.propose import FindingNote, ProposalRequest
from loopwise.kernels.evaluate.result import Evaluation, Status
from loopwise.kernels.expert.proposer import ExpertProposer, suggested_moves
from loopwise.kernels.optimize import OptimizeRun, Settings
from loopwise.kernels.problem import load_problem
from loopwise.kernels.profile.findings import Finding
from loopwise.kernels.profile.run import KernelReport, ProfileReport

EXAMPLES = Path(__file__).resolve().parents[3] / "loopwise" / "kernels" / "examples"
# A 1x1 PNG: what the stand-in profiler leaves as its roofline plot.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


class FakeJudge(StandInJudge):
    """Judges by the warps the expert wrote: 16 warps is fastest."""

    device = device_name = "cuda:0"

    def __init__(self):
        self.judged = []

    def evaluate(self, source: str, name: str):
        self.judged.append(source)
        warps = int(source.split(" warps")[0].rsplit(" ", 1)[-1]) if " warps" in source else 4
        return Evaluation(status=Status.CORRECT, problem="p", candidate=name, candidate_key=name,
                          speedup=1.0 + warps / 10)


def fake_report(mode: str) -> ProfileReport:
    finding = Finding.make("low_occupancy", "Occupancy is 20%, limited by warps per block; use 16 warps.",
                           {"occupancy": 0.2}, 0.5, [{"warps": 16}, "fuse_kernels"])
    kernel = KernelReport(name="fused_kernel", duration_us=80.0, kernel_class="memory_bound",
                          fraction_of_sol=0.55, dram_mb=268.4)
    return ProfileReport(problem="p", candidate="c", device="cuda:0", mode=mode, kernels=[kernel],
                         findings=[] if mode == "raw" else [finding], costs_s={"ncu_s": 1.0}, notes=[],
                         artifacts={})


def _run(tmp_path, profiling: str, search: str = "greedy", budget: int = 4, within: float = 0.9):
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    settings = Settings(problem=str(EXAMPLES / "scaled_gelu_problem.py"), search=search, budget=budget,
                        profiling=profiling, profile_within=within)
    cfg = load_config(None, [])
    run = OptimizeRun.start(settings, cfg, str(tmp_path / "runs"), FakeJudge(), problem)
    calls = []

    def profiler(problem, candidate, out_dir, **kw):
        calls.append((candidate, kw["mode"]))
        (Path(out_dir) / "roofline.png").write_bytes(PNG)
        return fake_report(kw["mode"])

    run.profiler = profiler
    return run, calls


def test_suggested_moves_are_read_from_finding_evidence():
    notes = (FindingNote(text="a", evidence={"moves": "warps=16; fuse_kernels"}),
             FindingNote(text="b", evidence={"moves": "block=512, warps=8"}), FindingNote(text="c"))
    assert suggested_moves(notes) == [{"warps": 16}, {"block": 512, "warps": 8}]


def test_expert_tries_the_tools_moves_first():
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    expert = ExpertProposer(problem, seed=0)
    (first,) = expert.propose(ProposalRequest(task=problem.source, n=1))
    assert "block 1024, 4 warps" in first.content
    hint = FindingNote(text="[medium] low_occupancy: ...", evidence={"moves": "warps=16; block=256"})
    proposals = expert.propose(ProposalRequest(task=problem.source, candidate=first.content, findings=(hint,), n=2))
    assert "block 1024, 16 warps" in proposals[0].content and "block 256, 4 warps" in proposals[1].content
    # without findings the first neighbour is not the tool's move
    plain = ExpertProposer(problem, seed=0)
    (base,) = plain.propose(ProposalRequest(task=problem.source, n=1))
    assert "16 warps" not in plain.propose(ProposalRequest(task=problem.source, candidate=base.content, n=1))[0].content


def test_each_expanded_candidate_is_profiled_once_and_its_findings_reach_the_proposer(tmp_path):
    run, calls = _run(tmp_path, "proactive")
    seen = []
    propose = run.proposer.propose
    run.proposer.propose = lambda request: seen.append(request) or propose(request)
    run.run()
    assert calls and calls[0][0] is None  # the reference first
    assert len({c for c, _ in calls}) == len(calls)  # never the same candidate twice
    texts = [f.text for r in seen[1:] for f in r.findings]
    assert any(t.startswith("[medium] low_occupancy") for t in texts)
    assert any(t.startswith("kernel fused_kernel: memory-bound, 55% of its speed of light") for t in texts)
    assert any("16 warps" in s for s in run.judge.judged)  # the tool's move was tried
    events = list(run.store.events(kind="profile"))
    assert len(events) == len(calls) and events[0].payload["mode"] == "proactive"
    assert events[0].payload["notes"][1]["evidence"]["moves"] == "warps=16; fuse_kernels"


def test_raw_mode_passes_measurements_without_guidance_and_none_profiles_nothing(tmp_path):
    run, calls = _run(tmp_path / "raw", "raw")
    run.run()
    notes = [n for e in run.store.events(kind="profile") for n in e.payload["notes"]]
    assert notes and all(n["text"].startswith("kernel ") for n in notes)
    run, calls = _run(tmp_path / "none", "none")
    run.run()
    assert calls == [] and not list(run.store.events(kind="profile"))


def test_resume_replays_profiles_instead_of_profiling_again(tmp_path):
    run, calls = _run(tmp_path, "all")
    run.s.budget = 2
    run.search.max_evals = 2
    run.run()
    run_id, before = run.store.meta.run_id, len(calls)
    run.store.close()
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    again = OptimizeRun.resume(run_id, load_config(None, []), str(tmp_path / "runs"), lambda p: FakeJudge(),
                               lambda spec: problem)
    assert again.profiles and set(again.profiles) <= {0, *again.evaluations}
    again.profiler = lambda *a, **k: (_ for _ in ()).throw(AssertionError("profiled again"))
    for node in again.profiles:
        again._profile_notes(node)  # served from the replayed events
    assert before == len(calls)


def test_the_run_report_shows_each_profile_with_its_plot(tmp_path):
    import base64

    from loopwise.kernels.report.optimize_html import build_report

    run, calls = _run(tmp_path, "proactive")
    run.run()
    html = build_report(run.store).read_text()
    assert "[medium] low_occupancy: Occupancy is 20%" in html and "(try: warps=16; fuse_kernels)" in html
    assert "Node 0: the PyTorch reference" in html
    assert html.count("data:image/png;base64," + base64.b64encode(PNG).decode()) == len(calls)


def test_a_profiler_that_breaks_does_not_stop_the_search(tmp_path):
    run, calls = _run(tmp_path, "proactive")
    run.profiler = lambda *a, **k: (_ for _ in ()).throw(KeyError("a bug in the analysis"))
    run.run()
    assert run.tally.evaluations == 4
    errors = [e.payload["error"] for e in run.store.events(kind="profile")]
    assert errors and all("KeyError" in e for e in errors)


def test_only_contenders_are_profiled_and_the_skips_are_recorded(tmp_path):
    """A profile costs several judgements: a candidate well behind the best so far is expanded
    without one (the reason is in the store and the report); --profile-within 0 profiles all."""
    run, calls = _run(tmp_path / "some", "proactive", search="random", budget=10, within=0.95)
    run.run()
    events = [e.payload for e in run.store.events(kind="profile")]
    skipped = [e for e in events if e.get("skipped")]
    assert skipped and len(calls) == len(events) - len(skipped)
    for e in skipped:
        mine = run.evaluations[e["node"]]["speedup"]
        assert "below 0.95 x the best so far" in e["skipped"] and mine < 0.95 * max(
            v["speedup"] for v in run.evaluations.values() if v["speedup"])
    run_all, calls_all = _run(tmp_path / "all", "proactive", search="random", budget=10, within=0.0)
    run_all.run()
    assert not any(e.payload.get("skipped") for e in run_all.store.events(kind="profile"))
    assert len(calls_all) > len(calls)
    from loopwise.kernels.report.optimize_html import _profile_rows
    assert _profile_rows(skipped[0])[0][:2] == ["profile", "skipped"]


def test_profile_within_must_be_a_share():
    import pytest

    from loopwise.errors import UserError

    with pytest.raises(UserError, match="--profile-within 1.5"):
        Settings(problem="p.py", profile_within=1.5).check()


def test_structural_moves_become_steps_of_the_templates_knobs():
    """``reduce_registers`` (what low_occupancy and register_spills say when registers limit the
    kernel) is a smaller tile or a shorter K step for a matrix product; ``vectorize_loads`` a
    larger block for an elementwise kernel; names a template has no knob for are skipped."""
    regs = (FindingNote(text="[low] low_occupancy: ...", evidence={"moves": "reduce_registers"}),)
    current = {"block": 128, "warps": 8, "chunk": 32}
    assert suggested_moves(regs, "matmul", current) == [{"block": 64}, {"chunk": 16}]
    assert suggested_moves(regs, "matmul", {"block": 64, "warps": 8, "chunk": 16}) == []  # at the bottom already
    wide = (FindingNote(text="narrow", evidence={"moves": "vectorize_loads; coalesce_accesses; warps=8"}),)
    assert suggested_moves(wide, "elementwise", {"block": 1024, "warps": 4}) == [{"block": 2048}, {"warps": 8}]
    assert suggested_moves(wide) == [{"warps": 8}]  # without the template, only the knob moves

    problem = load_problem(str(Path(__file__).parents[1] / "expert_problems" / "matmul_plain.py"))
    expert = ExpertProposer(problem, seed=0)
    (first,) = expert.propose(ProposalRequest(task=problem.source, n=1))
    assert "block 128, 8 warps, chunk 32" in first.content
    (child,) = expert.propose(ProposalRequest(task=problem.source, candidate=first.content, findings=regs, n=1))
    assert "block 64, 8 warps, chunk 32" in child.content
