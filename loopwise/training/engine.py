"""The training engine as core knows it: its prompts, the JSON replies it reads, its runs and rules.

Kept cheap: it names modules, it imports none of them (the training modules load torch).
"""

from loopwise.core.engines import Engine

ENGINE = Engine(
    name="training",
    prompts="loopwise.training:prompts",
    reply="json",
    run_kinds={"training.search": "loopwise.training.report_html:build_report"},
    proposer="loopwise.training.proposer:expert_rules",
)
