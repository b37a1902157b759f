"""A profile folder read back: the recorded hints."""


def test_recorded_hints_stay_unless_the_caller_overrides_them(tmp_path):
    from loopwise.kernels.profile.findings import ProblemHints
    from loopwise.kernels.profile.folder import folder_hints

    (tmp_path / "hints.json").write_text(ProblemHints(min_dram_bytes=5e8, input_dtype="fp32").model_dump_json())
    merged = folder_hints(tmp_path, ProblemHints(precision="relaxed"), [])
    assert merged.min_dram_bytes == 5e8 and merged.precision == "relaxed" and merged.input_dtype == "fp32"
    assert folder_hints(tmp_path, None, []).precision == "fp32"
    notes: list[str] = []
    (tmp_path / "hints.json").write_text("{not json")
    assert folder_hints(tmp_path, None, notes) == ProblemHints() and "unreadable" in notes[0]
