"""The kernels engine as core knows it: its config section, prompts, chat tools, runs, expert
and the commands an exchange agent may run.

Kept cheap: it names modules, it imports none of them.
"""

from loopwise.core.engines import Engine

ENGINE = Engine(
    name="kernels",
    config_section="loopwise.kernels.config:KernelsConfig",
    prompts="loopwise.kernels:prompts",
    reply="python",
    chat_tools="loopwise.kernels.chat_tools:kernel_tools",
    run_kinds={
        "kernels.optimize": "loopwise.kernels.report.optimize_html:build_report",
        "kernels.bench": "loopwise.kernels.report.bench_html:build_report",
        "kernels.eval": "loopwise.kernels.report.eval_html:build_eval_report",
    },
    proposer="loopwise.kernels.expert.proposer:ExpertProposer",
    agent_commands="loopwise.kernels.agent_commands:agent_commands",
)
