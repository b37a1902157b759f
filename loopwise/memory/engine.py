"""The memory engine as core knows it: its runs and their report.

Kept cheap: it names modules, it imports none of them.
"""

from loopwise.core.engines import Engine

ENGINE = Engine(
    name="memory",
    run_kinds={"memory.plan": "loopwise.memory.report:build_report"},
)
