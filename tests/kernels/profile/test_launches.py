"""Launches seen by the trace and by ncu, paired by kernel name."""


def test_trace_launches_pair_with_ncus_across_demangling_styles():
    """The trace's names (``void at::native::k<...>``) and ncu's (``void k<...>(int, T3)``) differ;
    in-order pairing when the kernel sequences agree, else unique function names."""
    from types import SimpleNamespace as K

    from loopwise.kernels.profile.launches import base_name, pair_launches

    assert base_name("void at::native::vectorized_elementwise_kernel<4, at::native::X>(int)") == \
        "vectorized_elementwise_kernel" == base_name("void vectorized_elementwise_kernel<4, X>(int, T2, T3)")
    traced = [K(name="void at::native::a<1>()"), K(name="void at::native::b<2ul>()"), K(name="void at::native::a<3>()")]
    measured = [K(name="void a<1>()"), K(name="void b<2>()"), K(name="void a<3>()")]
    assert pair_launches(traced, measured) == measured
    # ncu saw fewer launches: only the name unique on both sides pairs
    assert pair_launches(traced, measured[:2]) == [None, measured[1], None]
