"""The expert's capture: what a problem's forward is, in the terms of the templates.

One module per detector (each returns the pattern it recognizes, or None), and the driver that
offers them the traced forward in order (:mod:`.driver`)."""

from loopwise.kernels.expert.capture.driver import WHOLE_FORWARD_DETECTORS, capture

__all__ = ["WHOLE_FORWARD_DETECTORS", "capture"]
