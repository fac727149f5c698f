"""Every reach into JAX/jaxlib internals the analysis layer makes, in one place.

Version notes (JAX 0.10.2): ``jax._src.core.Literal`` / ``Var`` / ``Jaxpr`` / ``ClosedJaxpr``;
``eqn.source_info.traceback`` is a ``jaxlib._jax.Traceback`` with ``raw_frames()`` and the
static ``code_addr2line``; ``source_info_util.user_frame`` takes that traceback;
``jaxlib._jax.hlo_module_cost_analysis(client, module)`` and ``jaxlib._hlo.hlo_module_from_text``
run XLA's HLO cost analysis on any module text. Each helper degrades to None / [] when an
internal moved, so analysis loses a detail instead of failing.
"""

from __future__ import annotations

from typing import Any

from jax._src import core as _core
from jax._src import source_info_util as _siu

Literal = _core.Literal
Jaxpr = _core.Jaxpr
ClosedJaxpr = _core.ClosedJaxpr


def is_literal(atom: Any) -> bool:
    return isinstance(atom, Literal)


def is_dropvar(atom: Any) -> bool:
    return type(atom).__name__ == "DropVar"


def cell_frame(traceback: Any, cell_file: str | None) -> int | None:
    """The line of the innermost frame of ``traceback`` in ``cell_file`` (None if none)."""
    if traceback is None or cell_file is None:
        return None
    try:
        codes, lastis = traceback.raw_frames()
        for code, lasti in zip(codes, lastis, strict=False):
            if code.co_filename == cell_file:
                return type(traceback).code_addr2line(code, lasti)
    except (AttributeError, TypeError):
        return None
    return None


def user_frame(traceback: Any) -> tuple[str, int] | None:
    """JAX's idea of the innermost user frame (file, line), outside JAX itself."""
    if traceback is None:
        return None
    try:
        frame = _siu.user_frame(traceback)
    except (AttributeError, TypeError):
        return None
    return (frame.file_name, frame.start_line) if frame is not None else None


def arg_names(jaxpr: Any) -> list[str] | None:
    info = getattr(jaxpr, "debug_info", None)
    names = getattr(info, "arg_names", None)
    return list(names) if names is not None else None


_CLIENT: Any = None


def xla_cost(hlo_text: str) -> dict[str, float] | None:
    """XLA's HLO cost analysis (CPU cost model) of one module text, or None if unavailable."""
    global _CLIENT
    try:
        import jax
        from jaxlib import _hlo, _jax

        if _CLIENT is None:
            _CLIENT = jax.devices("cpu")[0].client
        module = _hlo.hlo_module_from_text(hlo_text)
        return dict(_jax.hlo_module_cost_analysis(_CLIENT, module))
    except Exception:  # XLA rejects the text or the API moved: lose the figure, not the analysis
        return None
