"""The exchange proposer: a person or any coding agent answers prompts written to a folder.

How to use it with a coding agent (Claude Code, Codex, Cursor, aider, ...) or by hand:

1. Run the search with ``ExchangeProposer(folder)`` as its proposer.
2. For each wanted proposal it writes ``<folder>/prompt-<id>.md`` (the same prompt an LLM
   proposer would send; the ``n`` prompts of one step each ask for a different approach) and
   prints one line:
   ``answer by writing <folder>/answer-<id>.md.tmp containing a Move: line and one ```python block,
   then renaming it to answer-<id>.md``.
3. Tell the agent: "read <folder>/prompt-<id>.md, write your answer to
   <folder>/answer-<id>.md.tmp and rename it to answer-<id>.md". The prompt ends with the commands
   the engine offers (for kernels: code search over CUTLASS / CuTe, the static check, the judge,
   the profiler), exact command lines the agent may run on a draft of its file first.

The answer format is one for every engine, and the prompt, the printed line and the reader agree
on it: one line ``Move: <the change, in a few words>``, then exactly one fenced block, the block
the engine's replies carry (:func:`~loopwise.core.propose.reply_block`): ```python with the complete
file for kernels, ```json with ``{"changes": {KNOB: VALUE, ...}}`` for training. Another block
after it, prose around it and a missing ``Move:`` line (the first prose line is the note then)
are tolerated; a missing, unclosed or unparsable block is not.

4. Signal that the answer is complete by renaming it into place: write ``answer-<id>.md.tmp``,
   then rename it to ``answer-<id>.md``. The proposer reads an answer that ends in a closed code
   block once it is unchanged between two polls, and any other answer (no code block, an
   unclosed one) once it has been unchanged for ``settle_s``, so a file written in place in
   pieces is not read half-way. An ``answer-<id>.md.done`` marker also marks it complete at once.

An answer without usable code is a ``ProposalFailure`` naming what was wrong (no code block, an
unclosed one, a syntax error), which the search answers with a re-prompt. If no answer arrives
within ``timeout_s``, the result is a ``ProposalFailure`` with reason ``TIMEOUT`` whose detail is
the instruction line, so the run can record it and go on.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from loopwise.core.files import write_atomic
from loopwise.core.propose._base import (
    EXCHANGE_TIMEOUT_S,
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    ProposalResult,
    ProposalRole,
    Proposer,
)
from loopwise.core.propose._extract import ExtractFailure, extract_for, fenced_blocks, reply_block
from loopwise.core.propose._prompt import render_prompt
from loopwise.core.propose.commands import agent_commands, commands_section

_PROMPT_NAME = re.compile(r"^prompt-(\d+)\.md$")


def _print_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _complete(text: str) -> bool:
    """Whether an answer has a fenced block and does not end inside one."""
    blocks, _ = fenced_blocks(text)
    return bool(blocks) and blocks[-1].closed


class ExchangeProposer(Proposer):
    """Writes each prompt to a folder and waits for an answer file.

    Args:
        folder: where ``prompt-<id>.md`` and ``answer-<id>.md`` live; created if missing.
        timeout_s: how long to wait for all answers of one ``propose`` call.
        poll_s: seconds between looks at the folder.
        settle_s: how long an answer that does not end in a closed code block must stay unchanged
            before it is read as final.
        announce: shows the instruction line; defaults to printing it on stderr.
        sleep: how polls wait (tests may pass a faster one).
        clock: the monotonic clock the timeout and ``settle_s`` are read on (tests pass a fake one
            that ``sleep`` advances).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        timeout_s: float = EXCHANGE_TIMEOUT_S,
        poll_s: float = 2.0,
        settle_s: float = 10.0,
        *,
        announce: Callable[[str], None] = _print_line,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = Path(folder)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.settle_s = settle_s
        self._announce = announce
        self._sleep = sleep
        self._clock = clock

    def instruction(self, answer_id: str, kind: str = "", role: ProposalRole | None = None) -> str:
        """The one line that tells the user what to do for ``answer_id`` of an engine ``kind`` in
        ``role``: the block it answers with is the one that prompt asks for (``reply_block``)."""
        return (f"answer by writing {self.answer_path(answer_id)}.tmp containing a Move: line and one "
                f"{reply_block(kind, role)} block, then renaming it to {self.answer_path(answer_id).name} "
                f"(the prompt is {self.prompt_path(answer_id)})")

    def prompt_path(self, answer_id: str) -> Path:
        """Where the prompt of ``answer_id`` is written."""
        return self.folder / f"prompt-{answer_id}.md"

    def answer_path(self, answer_id: str) -> Path:
        """Where the answer of ``answer_id`` is expected."""
        return self.folder / f"answer-{answer_id}.md"

    def propose(self, request: ProposalRequest) -> list[ProposalResult]:
        """Writes ``request.n`` prompts, announces them, and waits for the answers."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ids = self._new_ids(request.n)
        for index, answer_id in enumerate(ids):  # each prompt asks for its own approach
            draft = self.folder / f"draft-{answer_id}.py"
            text = render_prompt(request, index).as_markdown()
            text += commands_section(agent_commands(request, self.folder, draft), draft)
            write_atomic(self.prompt_path(answer_id), text)  # readers never see half a prompt
            self._announce(self.instruction(answer_id, request.kind, request.role))
        answers = self._wait(ids)
        return [self._result(answer_id, answers.get(answer_id), request.kind, request.role) for answer_id in ids]

    def _new_ids(self, n: int) -> list[str]:
        numbers = [int(m[1]) for p in self.folder.iterdir() if (m := _PROMPT_NAME.match(p.name))]
        first = max(numbers, default=0) + 1
        return [f"{number:04d}" for number in range(first, first + n)]

    def _wait(self, ids: list[str]) -> dict[str, str]:
        """Polls until every answer is complete or the time is up; returns those that are."""
        deadline = self._clock() + self.timeout_s
        seen: dict[str, tuple[tuple[int, int], float]] = {}
        answers: dict[str, str] = {}
        while True:
            for answer_id in ids:
                if answer_id not in answers:
                    text = self._read_if_ready(answer_id, seen)
                    if text is not None:
                        answers[answer_id] = text
            left = deadline - self._clock()
            if len(answers) == len(ids) or left <= 0:
                return answers
            self._sleep(min(self.poll_s, left))

    def _read_if_ready(self, answer_id: str, seen: dict[str, tuple[tuple[int, int], float]]) -> str | None:
        """The answer once it is complete (see the module's docstring), else None. ``seen`` holds
        each answer's last (size, mtime) and since when it has not changed."""
        path = self.answer_path(answer_id)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        marker = path.with_name(path.name + ".done").exists()
        signature, now = (stat.st_size, stat.st_mtime_ns), self._clock()
        last, since = seen.get(answer_id, (None, now))
        stable = stat.st_size > 0 and last == signature
        seen[answer_id] = (signature, since if stable else now)
        if not (marker or stable):
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
        settled = now - since >= self.settle_s
        return text if marker or settled or _complete(text) else None

    def _result(self, answer_id: str, text: str | None, kind: str, role: ProposalRole) -> ProposalResult:
        origin = f"exchange:{self.answer_path(answer_id)}"
        if text is None:
            text = self._late_text(answer_id)
            if not text:
                detail = f"no answer within {self.timeout_s:g} s: {self.instruction(answer_id, kind, role)}"
                return ProposalFailure(reason=FailureReason.TIMEOUT, detail=detail, origin=origin)
        found = extract_for(kind, text, role=role)
        if isinstance(found, ExtractFailure):
            return ProposalFailure(
                reason=found.reason, detail=found.detail, origin=origin, raw=text
            )
        return Proposal(content=found.code, note=found.note, origin=origin)

    def _late_text(self, answer_id: str) -> str:
        """What an unfinished answer holds at the deadline, so its fault can be named."""
        try:
            return self.answer_path(answer_id).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
