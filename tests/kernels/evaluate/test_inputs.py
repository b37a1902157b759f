

def test_a_device_draw_that_cannot_happen_falls_back_to_the_cpu_draw():
    """Drawing under a CUDA default device that is not there (or a get_inputs that needs CPU
    tensors) gives exactly the CPU draw of the same seed."""
    import types

    import torch

    from loopwise.kernels.evaluate.inputs import draw_inputs

    module = types.SimpleNamespace(get_inputs=lambda: [torch.rand(3, 5), torch.randint(0, 7, (4,))])
    cpu = draw_inputs(module, 11)
    if torch.cuda.is_available():  # on a GPU: the values come from the GPU's generator, reproducibly
        a, b = draw_inputs(module, 11, "cuda"), draw_inputs(module, 11, "cuda")
        assert a[0].is_cuda and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        return
    fallback = draw_inputs(module, 11, "cuda")
    assert all(not t.is_cuda for t in fallback)
    assert torch.equal(fallback[0], cpu[0]) and torch.equal(fallback[1], cpu[1])


def test_a_tensor_written_in_place_with_the_bits_it_held_counts_as_written_given_its_version():
    """Bits alone cannot see a write of the values a tensor already held; its version counter can.
    Without versions only the bits count; strides alone are no change either way."""
    import torch

    from loopwise.kernels.evaluate.inputs import changed_at, clone_args, version_counts

    x, out, idle, other = torch.randn(4, 3), torch.ones(4, 3), torch.randn(5), torch.randn(2, 3)
    args = [x, out, idle, other, 7]
    before, versions = clone_args(args), version_counts(args)
    torch.mul(out, 1.0, out=out)  # the same bits, written
    other.add_(1.0)  # other bits
    assert version_counts(args)[4] is None
    assert changed_at(args, before) == [3]
    assert changed_at(args, before, versions=versions) == [1, 3]
    with torch.inference_mode():
        frozen = torch.zeros(3)
    assert version_counts([frozen]) == [None] and changed_at([frozen], [frozen.clone()], versions=[None]) == []
