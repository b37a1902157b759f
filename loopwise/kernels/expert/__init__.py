"""The expert proposer's kernel writer: capture a problem's computation, pick a template, emit a
standalone ``ModelNew`` source."""

from loopwise.kernels.expert.capture import capture
from loopwise.kernels.expert.generate import generate
from loopwise.kernels.expert.pattern import Pattern

__all__ = ["Pattern", "capture", "generate"]
