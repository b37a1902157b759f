"""Reports: one self-contained HTML file per run (plots that open offline)."""

from loopwise.core.report.html import Figure, Section, render_html

__all__ = ["Figure", "Section", "render_html"]
