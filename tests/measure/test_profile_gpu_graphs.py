"""Kernel events of an XLA:GPU program run as a CUDA graph (a command buffer, XLA's default),
as JAX 0.11.2's profiler recorded them on an H200 (2026-12-04, ``make gpu-check``): every
event's ``hlo_op`` stat is the buffer (``command_buffer_1``), a fusion's kernel is named after
the fusion with "." written "_", and cuBLAS's GEMM kernels name nothing of the program. Before,
no event matched a kernel and ``--profile`` refused the program (NBC600) on the real GPU."""

from __future__ import annotations

from types import SimpleNamespace as NS

from nbcompile.measure._xplane import MARKER, extract

NAMES = {
    "loop_multiply_fusion",
    "input_reduce_fusion",
    "input_reduce_fusion.1",
    "loop_multiply_fusion.1",
    "custom-call.1",
    "cublas-lt-matmul.1",
}
LIBRARY = ["cublas-lt-matmul.1", "custom-call.1"]  # schedule order
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x128x32_warpgroupsize1x1x1_cublas"


def _event(name, start, end, **stats):
    return NS(name=name, start_ns=start, end_ns=end, stats=list(stats.items()))


def _graph_call(t0, gemms=2):
    """One call's device events, in the order the H200 ran them."""
    k = {"hlo_op": "command_buffer_1", "hlo_module": "jit_mlp", "cuda_graph_id": 6}
    seq = [GEMM, "loop_multiply_fusion"] + [GEMM] * (gemms - 1)
    seq += ["input_reduce_fusion", "input_reduce_fusion_1", "loop_multiply_fusion_1"]
    return [_event(n, t0 + 10 * i, t0 + 10 * i + 8, **k) for i, n in enumerate(seq)]


def _space(calls):
    device, windows = [], []
    for i, gemms in enumerate(calls):
        t0 = 1_000 * (i + 1)
        device += _graph_call(t0 + 100, gemms)
        windows.append(_event(MARKER, t0, t0 + 900))
    return NS(
        planes=[
            NS(name="/device:GPU:0", lines=[NS(name="Stream #14(Compute)", events=device)]),
            NS(name="/host:CPU", lines=[NS(name="python3", events=windows)]),
        ]
    )


def test_kernels_inside_a_cuda_graph_are_named_by_their_functions_and_the_schedule():
    trace = extract(_space([2, 2, 2]), NAMES, "jit_mlp", LIBRARY)
    assert trace.where == "/device:GPU:0" and len(trace.calls) == 3
    for call in trace.calls:
        names = [s.name for s in sorted(call.spans, key=lambda s: s.start)]
        assert names == [
            "cublas-lt-matmul.1",
            "loop_multiply_fusion",
            "custom-call.1",
            "input_reduce_fusion",
            "input_reduce_fusion.1",
            "loop_multiply_fusion.1",
        ]
    assert trace.unnamed_in_graphs == 0


def test_a_call_whose_library_kernels_do_not_match_the_schedule_leaves_them_unnamed():
    trace = extract(_space([2, 3]), NAMES, "jit_mlp", LIBRARY)  # call 2: a GEMM split in two
    first, second = ([s.name for s in c.spans] for c in trace.calls)
    assert "custom-call.1" in first and "custom-call.1" not in second
    assert "input_reduce_fusion.1" in second  # the fusions are still named
    assert trace.unnamed_in_graphs == 3
    without = extract(_space([2]), NAMES, "jit_mlp", [])  # no library calls known: not guessed
    assert without.unnamed_in_graphs == 2
