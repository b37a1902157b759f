"""The proposer a run asks for: the engine's own LLM-free one, a model, or an exchange folder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopwise.core.engines import engine as registered_engine
from loopwise.errors import UserError

__all__ = ["CHOICES", "make_proposer"]

CHOICES = ("expert", "llm", "exchange")
TOOLS_FOLDER = "chat-tools"  # under the run's folder: what a model's tool calls wrote (e.g. profiles)


def make_proposer(choice: str, engine: str, *, store=None, exchange_dir: str = "",
                  exchange_timeout_s: float | None = None, llm: Mapping[str, Any] | None = None,
                  role_models: Mapping[str, str] | None = None, **context: Any) -> Any:
    """Builds the proposer ``choice`` names for an engine's run.

    Args:
        choice: ``expert`` (the engine's own LLM-free proposer), ``llm`` or ``exchange``.
        engine: the registered engine's name.
        store: the run store every model call is recorded in (``llm``); None records nothing.
        exchange_dir: the exchange folder (``exchange``).
        exchange_timeout_s: seconds the exchange proposer waits for answers; None: its default.
        llm: the fields of ``LLMConfig`` (``llm``).
        role_models: another model for some roles (``{"analyst": MODEL}``, role names as in
            ``roles.ROLE_NAMES``), on the same server and sharing one budget (``llm``).
        context: what the engine's own proposer factory takes (e.g. the problem and a seed); its
            ``device`` also goes to a model's tools, with the run store's folder.

    Returns:
        The proposer; for ``expert``, whatever the engine's factory returns.

    Raises:
        UserError: an unknown choice, or LLM settings the config rejects.
    """
    if choice == "expert":
        return registered_engine(engine).own_proposer()(**context)
    if choice == "exchange":
        from loopwise.core.propose.exchange import ExchangeProposer

        timeout = {} if exchange_timeout_s is None else {"timeout_s": exchange_timeout_s}
        return ExchangeProposer(exchange_dir, **timeout)
    if choice != "llm":
        raise UserError(f"unknown proposer {choice!r}: {', '.join(CHOICES)}")
    from loopwise.core.propose.llm import LLMProposer, record_llm_call

    call_log = (lambda rec: record_llm_call(store, rec)) if store is not None else None
    settings = dict(llm if llm is not None else {})
    run_dir = getattr(store, "run_dir", None)  # the tools write under the run's folder when it has one
    for_tools = {"device": str(context.get("device") or ""),
                 "tool_folder": run_dir / TOOLS_FOLDER if run_dir is not None else None}
    try:
        default = LLMProposer.from_config(settings, call_log=call_log, **for_tools)
        if not role_models:
            return default
        from loopwise.core.propose.roles import ROLE_NAMES, RoleRouter

        by_model = {settings.get("model"): default}
        for model in role_models.values():
            if model not in by_model:  # one proposer per model, all charged to the default's budget
                by_model[model] = LLMProposer.from_config({**settings, "model": model}, call_log=call_log,
                                                          budget=default.budget, **for_tools)
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"--proposer llm: {exc}") from None
    return RoleRouter(default, {ROLE_NAMES[role]: by_model[model] for role, model in role_models.items()})
