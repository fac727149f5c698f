"""XLA pass names for ``xla_disable_hlo_passes``, per platform: the one table.

XLA silently ignores names it does not know, so every name here says whether it was *verified*
(disabling it changed the optimised module of a test program, see tests/measure/test_passes.py)
or only read from public XLA sources. ``needs`` lists passes that must also be disabled for this
one to have a visible effect (``fusion-wrapper`` only wraps ops that ``fusion`` left unfused).
TPU pass names are not public (the TPU compiler ships closed-source in libtpu): none are listed,
and ablation on TPU reports that instead of guessing. docs/passes.md mirrors this table.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CHECKED_WITH",
    "PASS_NAMES",
    "VARIANTS",
    "PassName",
    "Variant",
    "passes_for",
    "variants_for",
]

#: The versions the CPU names were verified with (and the GPU sources read against).
CHECKED_WITH = "jax/jaxlib 0.10.2 and 0.12.0.1 (XLA:CPU); GPU names from openxla/xla sources, 2025"


@dataclass(frozen=True)
class PassName:
    platform: str
    name: str
    what: str
    verified: bool
    needs: tuple[str, ...] = ()
    #: the jaxlib version from which disabling this pass shows in the pass log only (its step
    #: is gone) and not in the optimised module: XLA redoes its work later, outside any dumped
    #: pass pipeline
    log_only_from: str | None = None


PASS_NAMES: tuple[PassName, ...] = (
    PassName("cpu", "fusion", "loop fusion of element-wise ops (CpuInstructionFusion)", True),
    PassName(
        "cpu",
        "fusion-wrapper",
        "wraps each op left unfused in its own kLoop fusion",
        True,
        ("fusion",),
        # jaxlib 0.12.0.1 wraps the ops left unfused again after copy insertion (no pass step
        # is dumped for it), so the optimised module is the same with it disabled
        log_only_from="0.12",
    ),
    PassName("cpu", "dot-library-rewriter", "dot/conv library fusions (kCustom ynn/onednn)", True),
    PassName("cpu", "constant_folding", "evaluates ops on constants at compile time", True),
    PassName("gpu", "fusion", "the whole fusion sub-pipeline (priority + multi-output)", False),
    PassName("gpu", "priority-fusion", "producer-consumer fusion by cost model", False),
    PassName("gpu", "multi_output_fusion", "sibling / producer multi-output fusion", False),
    PassName("gpu", "horizontal_loop_fusion", "fuses independent small loop kernels", False),
    PassName("gpu", "triton-gemm-rewriter", "dots (+ neighbours) into Triton GEMM fusions", False),
    PassName("gpu", "fusion-wrapper", "wraps each op left unfused in its own fusion", False),
    PassName("gpu", "constant_folding", "evaluates ops on constants at compile time", False),
)


@dataclass(frozen=True)
class Variant:
    """One ablation: a name, a label for the view and the passes it disables."""

    name: str
    label: str
    disabled: tuple[str, ...]


VARIANTS: dict[str, tuple[Variant, ...]] = {
    "cpu": (
        Variant("baseline", "all optimisations", ()),
        Variant("no_loop_fusion", "no loop fusion", ("fusion", "fusion-wrapper")),
        Variant(
            "no_fusion",
            "no fusion at all",
            ("fusion", "fusion-wrapper", "dot-library-rewriter"),
        ),
        Variant("no_constant_folding", "no constant folding", ("constant_folding",)),
    ),
    "gpu": (
        Variant("baseline", "all optimisations", ()),
        Variant(
            "no_loop_fusion",
            "no loop fusion",
            ("priority-fusion", "multi_output_fusion", "horizontal_loop_fusion"),
        ),
        Variant(
            "no_fusion",
            "no fusion at all",
            (
                "fusion",
                "priority-fusion",
                "multi_output_fusion",
                "horizontal_loop_fusion",
                "triton-gemm-rewriter",
            ),
        ),
        Variant("no_constant_folding", "no constant folding", ("constant_folding",)),
    ),
    "tpu": (Variant("baseline", "all optimisations", ()),),
}
_ALIASES = {"cuda": "gpu", "rocm": "gpu"}


def _platform(platform: str) -> str:
    return _ALIASES.get(platform.lower(), platform.lower())


def passes_for(platform: str) -> list[PassName]:
    """The table rows for ``platform`` (``cpu``, ``gpu``/``cuda``/``rocm``, ``tpu``)."""
    return [p for p in PASS_NAMES if p.platform == _platform(platform)]


def variants_for(platform: str) -> tuple[Variant, ...]:
    """Default ablation variants for ``platform`` (only the baseline where no names are known)."""
    return VARIANTS.get(_platform(platform), (VARIANTS["tpu"][0],))
