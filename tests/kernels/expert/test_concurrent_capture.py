"""Two problems captured at once in one process (a bench's problems run on threads): torch.fx's
symbolic trace patches torch.nn.Module.__call__ for the whole process while it runs, so a second
forward traced or run meanwhile must wait, or its module calls land in the first trace."""

import threading
import time

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.problem import load_problem, validate_problem
from loopwise.kernels.roofline.floor import count_work

from expert_judging import HERE  # noqa: E402 - tests/kernels/expert on sys.path

# A chain-like forward that, while fx traces it (its input is a Proxy), says so and waits for a file.
_SLOW = '''import pathlib
import time

import torch
import torch.nn as nn

ENTERED, RELEASE = pathlib.Path({entered!r}), pathlib.Path({release!r})


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU()

    def forward(self, x):
        if isinstance(x, torch.fx.Proxy):
            ENTERED.touch()
            deadline = time.monotonic() + 30
            while not RELEASE.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return torch.sigmoid(self.act(x * 2.0 + 1.0)) - 0.5


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''

# The chain fixture, its __init__ calling a submodule (as CNNs that size their Linear with a dummy
# forward do): building the model runs a module.
_INIT_RUNS = (HERE / "chain.py").read_text().replace(
    "        self.act = nn.GELU()\n", "        self.act = nn.GELU()\n        self.act(torch.zeros(2))\n", 1)


@pytest.mark.parametrize("work", [capture, count_work, validate_problem], ids=["capture", "count_work", "validate"])
def test_work_on_a_problem_while_another_is_traced_gets_what_it_gets_alone(tmp_path, work):
    """The second problem's capture, FLOP count (which runs its forward) or validation (which builds
    its model) while the first one's forward is being traced: each waits, and gets what it gets alone."""
    entered, release = tmp_path / "entered", tmp_path / "release"
    slow_file = tmp_path / "slow.py"
    slow_file.write_text(_SLOW.format(entered=str(entered), release=str(release)))
    (tmp_path / "init_runs.py").write_text(_INIT_RUNS)
    chain = load_problem(str(tmp_path / "init_runs.py" if work is validate_problem else HERE / "chain.py"))
    slow = load_problem(str(slow_file))
    release.touch()
    alone = work(chain), capture(slow)
    release.unlink()
    entered.unlink()

    got = {}
    first = threading.Thread(target=lambda: got.__setitem__("slow", capture(slow)))
    first.start()
    deadline = time.monotonic() + 30
    while not entered.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert entered.exists(), "the slow forward was never traced"
    second = threading.Thread(target=lambda: got.__setitem__("chain", work(chain)))
    second.start()
    second.join(timeout=2)  # the chain's capture, were it not waiting, has long finished
    release.touch()
    first.join(timeout=60)
    second.join(timeout=60)
    assert got["chain"] == alone[0]
    assert got["slow"] == alone[1]

