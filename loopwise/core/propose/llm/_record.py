"""Model calls in the run store: one ``llm_call`` event per call, prompt and reply as artifacts."""

from __future__ import annotations

from loopwise.core.propose.llm._proposer import CallRecord
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loopwise.core.store import RunStore


def record_llm_call(store: RunStore, rec: CallRecord) -> None:
    """One model call in the run store: tokens, dollars, latency, retries; prompt and reply as artifacts."""
    usage = rec.usage
    store.append("llm_call", {
        "origin": rec.origin, "outcome": str(rec.outcome), "detail": rec.detail, "attempts": rec.attempts,
        "waits_s": list(rec.waits), "latency_s": rec.latency_s, "finish_reason": rec.finish_reason,
        "input_tokens": usage.input_tokens if usage else 0, "output_tokens": usage.output_tokens if usage else 0,
        "cost_usd": usage.cost_usd if usage else None, "prompt_version": rec.prompt.version,
        "prompt_sha256": store.put_artifact(rec.prompt.as_markdown(), name="prompt.md", media_type="text/markdown"),
        "reply_sha256": store.put_artifact(rec.reply or "", name="reply.md", media_type="text/markdown"),
        # the pictures sent with the prompt (a model that accepts images), each an artifact
        "image_sha256": [store.put_artifact(image.data, name=f"image-{i}.png", media_type=image.media_type)
                         for i, image in enumerate(rec.prompt.images)]})
