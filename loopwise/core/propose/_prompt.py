"""Renders a request into a system and a user message from the package's jinja2 templates, and
names the templates' version (a hash of their text) so every recorded prompt says which it was."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from loopwise.core.engines import engines
from loopwise.core.propose._base import ProposalRequest, ProposalRole
from loopwise.errors import UserError

if TYPE_CHECKING:
    import jinja2

_TEMPLATES = "loopwise.core.propose"


@dataclass(frozen=True)
class Prompt:
    """The two messages sent to a model (or written for a person or agent to answer)."""

    system: str
    user: str
    version: str = ""
    images: tuple = ()  # the request's Image records, sent after the user text to a model that accepts images

    def as_markdown(self) -> str:
        """Both messages as one document, for the exchange folder."""
        return f"{self.system.rstrip()}\n\n---\n\n{self.user.rstrip()}\n"


@lru_cache(maxsize=None)
def _environment(folder: str) -> jinja2.Environment:
    import jinja2  # lazily: only proposing needs it

    core = str(resources.files(_TEMPLATES) / "templates")
    # an engine's templates may include core's shared pieces (``step.md.j2``: this request's approach)
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([folder] if folder == core else [folder, core]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are markdown for a model, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, **values: object) -> str:
    """Renders one of core's own templates (e.g. ``tools_system.md.j2``) with ``values``."""
    return _environment(str(resources.files(_TEMPLATES) / "templates")).get_template(name).render(**values)


def _folder(kind: str):
    registered = engines().get(kind)
    folder = registered.prompt_folder() if registered is not None else None
    if folder is None:
        raise UserError(f"no prompt templates for kind {kind!r} (no engine registers them)")
    return folder


def _version(folder: str) -> str:  # read each time: a few small files, and an edit shows at once
    digest = hashlib.sha256()
    core = Path(str(resources.files(_TEMPLATES) / "templates"))
    for label, base in (("engine", Path(folder)), ("core", core)):
        for path in sorted(base.glob("*.j2")):
            digest.update(f"{label}/{path.name}".encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def prompt_version(kind: str) -> str:
    """The version of ``kind``'s prompt templates: ``<kind>-<first 12 hex of a sha256 over every
    template's name and text>`` (the engine's and core's), so any edit to a template changes it.

    Raises:
        UserError: no engine registers templates as ``kind``.
    """
    return f"{kind}-{_version(str(_folder(kind)))}"


def render_prompt(request: ProposalRequest, index: int = 0) -> Prompt:
    """Renders the requesting engine's ``system.md.j2`` and the user template of the request's role
    (``user.md.j2`` to improve, ``repair.md.j2`` to repair), from the prompt folder the engine
    registered under ``request.kind``, for request ``index`` of the step's ``request.n`` (each is
    asked for its own approach, ``request.direction(index)``).

    Raises:
        UserError: no engine is registered as ``request.kind``, or it has no templates for the role.
    """
    import jinja2

    folder = _folder(request.kind)
    env = _environment(str(folder))
    user_name = "user" if request.role is ProposalRole.IMPROVE else request.role.value
    try:
        system = env.get_template("system.md.j2")
        user = env.get_template(f"{user_name}.md.j2")
    except jinja2.TemplateNotFound as exc:
        raise UserError(f"no prompt templates for kind {request.kind!r} ({exc.name})") from exc
    step = {"index": index, "number": index + 1, "direction": request.direction(index),
            "others": request.other_directions(index)}
    return Prompt(system=system.render(request=request, step=step), user=user.render(request=request, step=step),
                  version=prompt_version(request.kind), images=request.images)
