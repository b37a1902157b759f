"""Renders a request into a system and a user message from the package's jinja2 templates."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
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

    def as_markdown(self) -> str:
        """Both messages as one document, for the exchange folder."""
        return f"{self.system.rstrip()}\n\n---\n\n{self.user.rstrip()}\n"


@lru_cache(maxsize=None)
def _environment(folder: str) -> jinja2.Environment:
    import jinja2  # lazily: only proposing needs it

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are markdown for a model, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, **values: object) -> str:
    """Renders one of core's own templates (e.g. ``tools_system.md.j2``) with ``values``."""
    return _environment(str(resources.files(_TEMPLATES) / "templates")).get_template(name).render(**values)


def render_prompt(request: ProposalRequest) -> Prompt:
    """Renders the requesting engine's ``system.md.j2`` and the user template of the request's role
    (``user.md.j2`` to improve, ``repair.md.j2`` to repair), from the prompt folder the engine
    registered under ``request.kind``.

    Raises:
        UserError: no engine is registered as ``request.kind``, or it has no templates for the role.
    """
    import jinja2

    registered = engines().get(request.kind)
    folder = registered.prompt_folder() if registered is not None else None
    if folder is None:
        raise UserError(f"no prompt templates for kind {request.kind!r} (no engine registers them)")
    env = _environment(str(folder))
    user_name = "user" if request.role is ProposalRole.IMPROVE else request.role.value
    try:
        system = env.get_template("system.md.j2")
        user = env.get_template(f"{user_name}.md.j2")
    except jinja2.TemplateNotFound as exc:
        raise UserError(f"no prompt templates for kind {request.kind!r} ({exc.name})") from exc
    return Prompt(system=system.render(request=request), user=user.render(request=request))
