"""The cudagraph move's wrapper (``_GraphReplay``, _common.j2) as a candidate file holds it: which
inputs a forward writes in place (copied back to the caller's tensors after each replay), and which
calls run the forward itself (arguments that share memory). The helpers run on the CPU as they do
on the GPU; the replay itself is a ``gpu`` test."""

import numpy as np
import pytest
import torch

from loopwise.kernels.expert.generate import _templates

from expert_judging import load_candidate  # noqa: E402 - tests/kernels/expert on sys.path


@pytest.fixture(scope="module")
def candidate(tmp_path_factory):
    """The macro as the templates emit it, with the imports a candidate file has."""
    text = '{% from "_common.j2" import graph_replay %}import torch\nimport torch.nn as nn\n\n{{ graph_replay() }}\n'
    source = _templates().from_string(text).render()
    return load_candidate(source, tmp_path_factory.mktemp("replay"), "cudagraph_helpers")


def _written(candidate, fn, *args):
    buffers = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    return candidate._inputs_written(fn, buffers, args)


def test_a_pytorch_write_that_changes_nothing_on_the_warm_up_data_is_still_found(candidate):
    """``x.clamp_(0, 1)`` on data already in [0, 1] and ``relu_`` on positive data leave the values
    as they were, but a later call's data may not be: the write is found by PyTorch's version counter."""
    x = torch.rand(8, 5)
    clamp, relu = (lambda x: x.clamp_(0, 1) * 2), (lambda a, x: a + x.relu_())
    unchanged = x.clone()
    clamp(unchanged)
    assert torch.equal(unchanged, x)  # the values alone do not show the write
    assert _written(candidate, clamp, x) == {0}
    assert _written(candidate, relu, torch.randn(5), x + 1.0) == {1}
    out = torch.empty(8, 5)
    assert _written(candidate, lambda x, out: torch.add(x, 0, out=out), x, out) == {1}


def test_a_store_through_the_pointer_that_changes_nothing_on_the_warm_up_data_is_still_found(candidate):
    """A kernel that stores into an input (here numpy through the tensor's memory, which PyTorch's
    version counter does not see) the values it already holds on the caller's data: rows sorted in
    place, the caller's already sorted. The second warm-up runs on the caller's values in another
    order, where the store changes them."""
    def sort_through_pointer(x, y):
        view = x.numpy()
        view[...] = np.sort(view, axis=-1)
        return x * 2 + y.sum()

    x = torch.rand(8, 5).sort(dim=-1).values
    unchanged = x.clone()
    sort_through_pointer(unchanged, x)
    assert torch.equal(unchanged, x)  # the values alone do not show the write
    assert _written(candidate, sort_through_pointer, x, torch.rand(3)) == {0}


def test_the_probe_call_meets_only_values_and_structure_the_caller_passed(candidate):
    """A forward that is legal only on its caller's domain (a BCE on probabilities, a float tensor
    used as an index; on a GPU either fault is a device-side assert that kills the process's CUDA
    context; a Cholesky factorization of a positive definite matrix) is legal on the probe too: it
    reads no input it does not write."""
    table = torch.randn(10, 4)

    def bce(pred, target):
        return torch.nn.functional.binary_cross_entropy(pred, target)

    def gather_by_float(x, pos):
        return table[(pos * 9).long()] * x.sum()  # pos in [0, 1): rows 0..8

    def cholesky(a, b):
        return torch.linalg.cholesky(a) @ b

    m = torch.randn(6, 6)
    spd = m @ m.T + 0.1 * torch.eye(6)
    spd[0, 0] += 50.0  # far from its reflection's entry: a matrix out of order would not be positive definite
    assert _written(candidate, bce, torch.rand(64), torch.rand(64)) == set()
    assert _written(candidate, gather_by_float, torch.randn(3), torch.rand(5)) == set()
    assert _written(candidate, cholesky, spd, torch.randn(6, 2)) == set()


def test_inputs_only_read_are_not_copied_back_and_integer_inputs_keep_their_values(candidate):
    """Only written inputs cost a copy back; an integer (index) input is never given other values
    than the caller's (an index out of range would fault the device)."""
    seen = []

    def gather(x, index):
        seen.append(index.clone())
        return x[index].sum()

    index = torch.tensor([0, 3, 4])
    assert _written(candidate, gather, torch.randn(5), index) == set()
    assert all(torch.equal(s, index) for s in seen) and len(seen) == 2


def test_an_inference_tensor_without_a_version_counter_counts_as_written(candidate):
    """Under inference_mode PyTorch keeps no version counter: the input is copied back (the extra
    copy costs time, a missed write a wrong answer)."""
    with torch.inference_mode():
        assert _written(candidate, lambda x: x * 2.0, torch.randn(6)) == {0}


def test_arguments_that_share_memory_run_the_forward_itself(candidate):
    """The same tensor twice, two views of one storage, a broadcast view: aliased (the replay's
    clones would separate them); distinct tensors are not."""
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    assert candidate._aliased((x, x)) and candidate._aliased((x[:2], x[2:], 3))
    assert candidate._aliased((torch.randn(6).expand(4, 6),))
    assert not candidate._aliased((x, y, 2.0)) and not candidate._aliased((x.clone(),))


def test_only_plain_values_beside_the_tensors_key_a_graph(candidate):
    """A graph is keyed by its non-tensor arguments' text: numbers, strings, dtypes, devices and
    tuples of them say all they hold. A list of tensors (which the graph would read at its first
    call's addresses), a numpy array (whose text elides long arrays) or any other object does not:
    such calls run the forward itself."""
    assert all(candidate._plain(v) for v in (None, True, 3, 2.5, "mean", torch.float16, torch.device("cpu"),
                                            (1, 2, (3, "x")), [4, 5], torch.Size([2, 3])))
    assert not any(candidate._plain(v) for v in ([torch.ones(2)], (1, torch.ones(2)), {"k": 1},
                                                np.arange(2000), object()))


def test_every_submodules_mode_keys_a_graph_not_only_the_owners(candidate):
    """A graph holds what each submodule's mode made of the forward (a BatchNorm's batch statistics
    or running ones, a Dropout's mask or none): ``model.eval()`` then ``model.norm.train()`` leaves
    the owner in eval mode but is not the graph captured under ``model.eval()``."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    x = torch.ones(2, 4)
    model.eval()
    evaluated = candidate._graph_key((x, 3), tuple(model.modules()))
    model[1].train()
    assert model.training is False and candidate._graph_key((x, 3), tuple(model.modules())) != evaluated
    model.eval()
    assert candidate._graph_key((x, 3), tuple(model.modules())) == evaluated
    assert candidate._graph_key((x, 4), tuple(model.modules())) != evaluated
    assert candidate._graph_key((x.t(),), None) != candidate._graph_key((x,), None)


def _warm(candidate, module, *args):
    buffers = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    return candidate._warm_up(module.forward, module, buffers, args)


class _Running(torch.nn.Module):
    """A running state rebound on every call, beside a None buffer slot, a plain tensor written in
    place, a list entry and a BatchNorm-like counter."""
    def __init__(self, rebind=True):
        super().__init__()
        self.rebind = rebind
        self.state = torch.ones(4)
        self.calls = torch.zeros(())
        self.history = [torch.zeros(4)]
        self.register_buffer("mask", None)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        self.count.add_(1)
        if self.rebind:
            self.state = self.state * 0.5 + x
        return x * self.calls


def test_a_forward_that_keeps_a_running_state_is_put_back_whole_and_not_captured(candidate):
    """``self.state = self.state * 0.5 + x`` on every call: no graph (a replay would skip the
    rebinding), and the module is as it was before the warm-up calls: the same tensors bound to the
    same names, None slots kept, values written in place put back. A forward that only writes in
    place (the counters) is captured, its values put back as well."""
    m = _Running()
    state, mask_slot = m.state, dict(m._buffers)
    assert _warm(candidate, m, torch.randn(4)) is None
    assert m.state is state and m.state.eq(1).all() and dict(m._buffers).keys() == mask_slot.keys()
    assert m.mask is None and float(m.calls) == 0 and float(m.count) == 0
    assert float(m(torch.ones(4))[0]) == 1.0  # the first real call is the first forward

    steady = _Running(rebind=False)
    written, kept = _warm(candidate, steady, torch.randn(4))
    assert float(steady.calls) == 0 and float(steady.count) == 0
    assert {id(t) for t, _ in kept} >= {id(steady.calls), id(steady.count), id(steady.state)}


def test_a_state_kept_in_a_list_is_a_running_state(candidate):
    """``self.history[0] = self.history[0] + x``: the list is the same object, its entry is not."""
    class Listed(_Running):
        def forward(self, x):
            self.history[0] = self.history[0] + x
            return x * 2

    m = Listed(rebind=False)
    entry = m.history[0]
    assert _warm(candidate, m, torch.randn(4)) is None
    assert m.history[0] is entry and entry.eq(0).all()


def test_what_only_the_first_call_binds_stays_and_the_forward_is_captured(candidate):
    """A cache filled once (a None buffer slot, a plain attribute, a lazily made submodule) is what
    an eager first call leaves too: the capture goes ahead and keeps them. A first call that binds
    the input's own memory (``self.first = x``) would bind the graph's input buffer: no graph."""
    class Lazy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 4))
            self.register_buffer("mask", None)
            self._wt = None

        def forward(self, x):
            if self.mask is None:
                self.mask = torch.ones(4)
            if self._wt is None:
                self._wt = self.weight.t().contiguous()
            if not hasattr(self, "proj"):
                self.proj = torch.nn.Linear(4, 4)
            return self.proj(x @ self._wt * self.mask)

    m = Lazy()
    assert _warm(candidate, m, torch.randn(2, 4)) is not None
    assert m.mask is not None and m._wt is not None and isinstance(m.proj, torch.nn.Linear)

    class KeepsFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = None

        def forward(self, x):
            if self.first is None:
                self.first = x
            return x - self.first

    k = KeepsFirst()
    assert _warm(candidate, k, torch.randn(4)) is None and k.first is None


def test_a_forward_that_writes_its_parameters_in_place_is_refused(candidate):
    """The warm-up calls' writes into a parameter cannot be undone (parameters are not copied):
    the capture raises rather than replay a forward the warm-ups have moved."""
    class Decays(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            with torch.no_grad():
                self.w.mul_(0.9)
            return x * self.w

    with pytest.raises(RuntimeError, match="parameters in place"):
        _warm(candidate, Decays(), torch.randn(4))


@pytest.mark.gpu
def test_on_the_gpu_a_list_of_tensors_or_a_stateful_forward_runs_the_forward_itself(candidate):
    """Each call's own list of tensors is what the forward reads, and a forward that rebinds its
    module's state keeps doing so: neither is replayed from a graph."""
    replay = candidate._GraphReplay(lambda x, parts: x + parts[0] * parts[1])
    with torch.no_grad():
        x = torch.randn(8, device="cuda")
        for _ in range(3):
            parts = [torch.randn(8, device="cuda"), torch.randn(8, device="cuda")]
            torch.testing.assert_close(replay(x, parts), x + parts[0] * parts[1])
    assert not replay.graphs

    class Accumulate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.total = torch.zeros(8, device="cuda")

        def forward(self, x):
            self.total = self.total + x
            return self.total * 1.0

    module = Accumulate()
    replay = candidate._GraphReplay(module.forward)
    with torch.no_grad():
        outs = [replay(torch.ones(8, device="cuda")) for _ in range(4)]
    assert [float(o[0]) for o in outs] == [1.0, 2.0, 3.0, 4.0]
    assert float(module.total[0]) == 4.0


@pytest.mark.gpu
@pytest.mark.parametrize("write", ["pytorch", "pointer"])
def test_on_the_gpu_a_write_the_first_call_does_not_show_reaches_a_later_callers_tensor(candidate, write):
    """The forward clamps its input in place (``pytorch``), or sorts its rows in place past
    PyTorch's version counter (``pointer``: through ``.data``, as a Triton kernel storing into the
    input does); the first call's input is already in range and sorted (the write changes
    nothing), the later ones' are not: after each replay the caller's tensor holds what eager
    leaves in it."""
    def forward(x, w):
        if write == "pytorch":
            x.clamp_(0.0, 1.0)
        else:  # rows sorted in place, past the version counter
            x.data.copy_(x.sort(dim=-1).values)
        return x @ w

    replay = candidate._GraphReplay(forward)
    w = torch.randn(16, 8, device="cuda")
    with torch.no_grad():
        for scale in (0.0, 3.0, 5.0):
            x = torch.rand(32, 16, device="cuda").sort(dim=-1).values if scale == 0.0 else \
                torch.randn(32, 16, device="cuda") * scale
            expected_x = x.clone()
            expected = forward(expected_x, w)
            out = replay(x, w)
            torch.testing.assert_close(x, expected_x)
            torch.testing.assert_close(out, expected)
    assert len(replay.graphs) == 1 and next(iter(replay.graphs.values())) is not None  # it replayed


@pytest.mark.gpu
def test_on_the_gpu_a_tensor_passed_twice_sees_its_own_write(candidate):
    """forward(x, x) with a write through the first: the read through the second sees it, as in
    eager; the call runs the forward itself (no graph is captured for it)."""
    def forward(a, b):
        a.add_(1.0)
        return b * 2.0

    replay = candidate._GraphReplay(forward)
    with torch.no_grad():
        x = torch.randn(64, device="cuda")
        before = x.clone()
        out = replay(x, x)
        torch.testing.assert_close(out, (before + 1.0) * 2.0)
        torch.testing.assert_close(x, before + 1.0)
        y = torch.randn(64, device="cuda")
        base = torch.randn(128, device="cuda")
        torch.testing.assert_close(replay(base[:64], base[64:]), base[64:] * 2.0)
    assert not replay.graphs
    with torch.no_grad():
        replay(torch.randn(64, device="cuda"), y)
    assert len(replay.graphs) == 1
