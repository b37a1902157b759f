"""Whether the cudagraph move can pay: the launches it removes against the input copies it adds."""

import pytest

from loopwise.kernels.expert.cuda_graph import graph_pays
from loopwise.kernels.profile.tools.launch_bound import LAUNCH_COST_S

H200_COPY_GBS = 4247.0  # the copy rate recorded with the profile fixtures (bytes read plus written)


def test_a_small_problem_of_a_few_launches_pays_and_a_large_memory_bound_one_does_not():
    # a Linear + SiLU on an 80 x 40 fp32 input: two launches, 12.8 kB copied
    assert graph_pays(2, 80 * 40 * 4, H200_COPY_GBS)
    # an RMSNorm over 256 MiB: one launch, its input copied at 4.2 TB/s is over 100 us
    assert not graph_pays(1, 256 << 20, H200_COPY_GBS)


def test_the_balance_moves_with_the_launches_and_the_bandwidth():
    nbytes = 16 << 20  # 16 MiB: about 7.9 us of copies at 4247 GB/s (read and written)
    copy_s = 2 * nbytes / (H200_COPY_GBS * 1e9)
    needed = int(copy_s / LAUNCH_COST_S) + 1
    assert graph_pays(needed, nbytes, H200_COPY_GBS) and not graph_pays(needed - 1, nbytes, H200_COPY_GBS)
    assert graph_pays(needed - 1, nbytes, 2 * H200_COPY_GBS)  # a faster copy pays sooner
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        graph_pays(3, nbytes, 0.0)
