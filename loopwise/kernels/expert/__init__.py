"""The expert proposer's kernel writer: capture a problem's computation, pick a template, emit a
standalone ``ModelNew`` source. This module holds the capture and the first templates
(fused elementwise chains and an online row softmax)."""

from loopwise.kernels.expert.capture import Pattern, capture
from loopwise.kernels.expert.generate import generate

__all__ = ["Pattern", "capture", "generate"]
