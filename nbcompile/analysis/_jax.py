"""Every reach into JAX/jaxlib internals the analysis layer makes, in one place.

Version notes (JAX 0.10.2): ``jax._src.core.Literal`` / ``Var`` / ``Jaxpr`` / ``ClosedJaxpr``;
``eqn.source_info.traceback`` is a ``jaxlib._jax.Traceback`` with ``raw_frames()`` and the
static ``code_addr2line`` (``jax._src.lib._jax.Traceback``); ``source_info_util.is_user_filename``
is JAX's test for frames outside JAX;
``jaxlib._jax.hlo_module_cost_analysis(client, module)`` and ``jaxlib._hlo.hlo_module_from_text``
run XLA's HLO cost analysis on any module text. Each helper degrades to None / [] when an
internal moved, so analysis loses a detail instead of failing.
"""

from __future__ import annotations

from typing import Any

from jax._src import core as _core
from jax._src import source_info_util as _siu
from jax._src.lib import _jax as _jaxlib

Literal = _core.Literal
Jaxpr = _core.Jaxpr
# JAX 0.12 merged ClosedJaxpr into Jaxpr (a Jaxpr carries its consts; ``.jaxpr`` is itself)
ClosedJaxpr = getattr(_core, "ClosedJaxpr", _core.Jaxpr)
_Traceback = _jaxlib.Traceback


def is_literal(atom: Any) -> bool:
    return isinstance(atom, Literal)


def is_dropvar(atom: Any) -> bool:
    return type(atom).__name__ == "DropVar"


def frames(traceback: Any) -> tuple[list[Any], list[int]] | None:
    """(code objects, bytecode offsets) of a ``jaxlib`` Traceback, innermost first (None when
    the traceback is missing or its API moved)."""
    if traceback is None:
        return None
    try:
        return traceback.raw_frames()
    except (AttributeError, TypeError):
        return None


def addr2line(code: Any, lasti: int) -> int:
    """The source line of bytecode offset ``lasti`` in ``code`` (as JAX computes it)."""
    return _Traceback.code_addr2line(code, lasti)


def outside_jax(file: str) -> bool:
    """Whether ``file`` is outside JAX itself (JAX's own test for user frames)."""
    return _siu.is_user_filename(file)


def arg_names(jaxpr: Any) -> list[str] | None:
    info = getattr(jaxpr, "debug_info", None)
    names = getattr(info, "arg_names", None)
    return list(names) if names is not None else None


_CLIENT: Any = None


def xla_cost(hlo_text: str) -> dict[str, float] | None:
    """XLA's HLO cost analysis (CPU cost model) of one module text, or None if unavailable."""
    global _CLIENT
    import jax

    try:
        from jaxlib import _hlo, _jax

        if _CLIENT is None:
            _CLIENT = jax.devices("cpu")[0].client
        module = _hlo.hlo_module_from_text(hlo_text)
        return dict(_jax.hlo_module_cost_analysis(_CLIENT, module))
    except (ImportError, AttributeError):  # the private API moved in this jaxlib: no figure
        return None
    except jax.errors.JaxRuntimeError:  # XLA rejected the module text: no figure for it
        return None


def scan_layout(params: dict[str, Any]) -> tuple[int, int]:
    """(constants, carries) among a ``scan`` equation's inputs, which are
    ``[*constants, *carries, *xs]`` (its outputs ``[*carries, *ys]``). JAX 0.10.2 names the
    counts (``num_consts``, ``num_carry``); JAX 0.12 describes the three parts as a flat tree
    (``ft_in``: constants, carries, xs)."""
    if "num_consts" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    consts, carry, _xs = params["ft_in"].unpack()
    return len(consts), len(carry)
