"""A scripted coding agent for the exchange folder: answers each new prompt with the next scripted
answer, the documented way (written to ``answer-<id>.md.tmp``, then renamed into place), and keeps
the prompts it read so a test can check what the loop told it."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

_PROMPT = re.compile(r"^prompt-(\d+)\.md$")


class ScriptedAgent:
    """Answers prompts in ``folder`` in order of their ids with ``answers`` (then stops)."""

    def __init__(self, folder: Path, answers: list[str], poll_s: float = 0.05) -> None:
        self.folder, self.answers, self.poll_s = Path(folder), list(answers), poll_s
        self.prompts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ScriptedAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.prompts) < len(self.answers):
            pending = sorted(m[1] for p in (self.folder.iterdir() if self.folder.is_dir() else ())
                             if (m := _PROMPT.match(p.name)) and not (self.folder / f"answer-{m[1]}.md").exists())
            for answer_id in pending:
                if len(self.prompts) == len(self.answers):
                    break
                self.prompts.append((self.folder / f"prompt-{answer_id}.md").read_text(encoding="utf-8"))
                tmp = self.folder / f"answer-{answer_id}.md.tmp"
                tmp.write_text(self.answers[len(self.prompts) - 1], encoding="utf-8")
                os.replace(tmp, self.folder / f"answer-{answer_id}.md")
            time.sleep(self.poll_s)
