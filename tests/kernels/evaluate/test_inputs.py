

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
