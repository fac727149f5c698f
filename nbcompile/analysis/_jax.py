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


# --- loops (analysis/loops.py) ---------------------------------------------------------------
# Checked on JAX 0.10.2 and 0.12.0.1: ``lax.fori_loop`` with static bounds and ``lax.map`` are
# ``scan`` equations, ``fori_loop`` with traced bounds and ``while_loop`` are ``while``; the
# function the user called is the outermost JAX frame of the equation's traceback
# (``scan`` / ``fori_loop`` / ``while_loop`` / ``map`` in ``jax/_src/lax/control_flow/loops.py``).
# A ``scan``'s ``length``, ``reverse`` and ``unroll`` are params on both versions (0.10.2 also
# has ``num_consts`` / ``num_carry`` / ``linear``, 0.12 ``ft_in`` / ``ft_out``: not read).
LOOP_APIS = ("scan", "fori_loop", "while_loop", "map")


def loop_api(traceback: Any) -> str | None:
    """The JAX loop function the user's code called to make an equation (``fori_loop`` for
    the ``scan`` a static ``fori_loop`` becomes), or None where the traceback does not say."""
    found = frames(traceback)
    if found is None:
        return None
    api = None
    for code in found[0]:
        file = getattr(code, "co_filename", "")
        if outside_jax(file):
            break  # the first frame outside JAX called it
        if code.co_name in LOOP_APIS:
            api = code.co_name
    return api


def scan_params(params: Any) -> tuple[int | None, bool, int]:
    """``(length, reverse, unroll)`` of a ``scan`` equation (``unroll=True``: the length)."""
    length = params.get("length")
    length = int(length) if isinstance(length, int) else None
    unroll = params.get("unroll", 1)
    if unroll is True:
        unroll = length or 1
    return length, bool(params.get("reverse", False)), max(int(unroll or 1), 1)
