"""The engines registry and the proposer factory: engines found by name, core naming none."""

from __future__ import annotations

import pytest

from loopwise.core import engines as registry
from loopwise.core.engines import Engine, engine, engine_for_run, engines
from loopwise.core.propose import ExchangeProposer, extract_for, make_proposer
from loopwise.errors import UserError


def test_the_checkouts_engines_are_found_with_or_without_entry_points(monkeypatch):
    found = engines()
    assert {"kernels", "training"} <= set(found)
    registry.engines.cache_clear()
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    try:
        assert set(engines()) == set(found)
    finally:
        registry.engines.cache_clear()


def test_an_engine_is_looked_up_by_name_and_by_run_kind():
    assert engine("training").reply == "json"
    assert engine_for_run("kernels.optimize").name == "kernels"
    assert engine_for_run("training.search").name == "training"
    with pytest.raises(UserError, match="no engine 'nope'"):
        engine("nope")
    with pytest.raises(UserError, match="nope.search"):
        engine_for_run("nope.search")


def test_each_engine_names_its_prompts_and_report_builders_lazily():
    for item in engines().values():
        if item.prompts:
            assert (item.prompt_folder() / "system.md.j2").is_file()
        for kind in item.run_kinds or {}:
            assert callable(item.report_builder(kind))
    with pytest.raises(UserError):
        Engine(name="bare").own_proposer()


def test_the_reply_format_follows_the_engine():
    assert extract_for("training", '```\n{"a": 1}\n```\n').code == '{"a": 1}'
    assert extract_for("kernels", "```python\nx = 1\n```\n").code == "x = 1\n"
    assert extract_for("", "```python\nx = 1\n```\n").code == "x = 1\n"


def test_the_factory_builds_exchange_and_asks_the_engine_for_its_own(tmp_path):
    exchange = make_proposer("exchange", "training", exchange_dir=str(tmp_path), exchange_timeout_s=5.0)
    assert isinstance(exchange, ExchangeProposer) and exchange.timeout_s == 5.0
    assert make_proposer("expert", "training") is None  # its rules need no proposer object
    with pytest.raises(UserError, match="unknown proposer"):
        make_proposer("oracle", "training")
    with pytest.raises(UserError, match="--proposer llm"):
        make_proposer("llm", "training", llm={"no_such_field": 1})
