"""A self-contained HTML page: the plotly library inlined once, figures as JSON, sections of
tables and code. Nothing is fetched when the file is opened."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources


@dataclass
class Figure:
    """One plotly figure (``plotly.graph_objects.Figure``) with a title for the page."""

    title: str
    figure: object


@dataclass
class Section:
    """A block of the page: a heading, key/value facts, an optional table and preformatted blocks."""

    heading: str
    facts: dict = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    blocks: list[tuple[str, str]] = field(default_factory=list)  # (label, text) shown as <pre>
    anchor: str = ""
    status: str = ""
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG bytes), inlined


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI, so the page keeps opening offline."""
    import base64

    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(title: str, subtitle: str, figures: list[Figure], sections: list[Section], banner: str = "") -> str:
    """The whole page as one string; ``banner``, when given, is a warning shown above everything
    (e.g. that the page's numbers do not mean what they seem to)."""
    import jinja2
    from plotly.offline import get_plotlyjs

    text = (resources.files("loopwise.core.report") / "templates" / "run.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True)
    plots = [{"title": f.title, "id": f"fig{i}", "json": f.figure.to_json()} for i, f in enumerate(figures)]
    env.filters["data_uri"] = data_uri
    template = env.from_string(text)
    return template.render(title=title, subtitle=subtitle, plots=plots, sections=sections, banner=banner,
                           plotlyjs=get_plotlyjs())
