"""What the stages hand to analysis: plain JAX objects, no IPython, no widgets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..capture.source import SourceInfo


@dataclass
class Artifacts:
    """Everything one compile produced.

    ``closed_jaxpr`` is the traced program; ``lowered`` / ``compiled`` are ``jax.stages.Lowered``
    / ``jax.stages.Compiled`` (``compiled`` is None where the backend could not compile, e.g. a
    TPU target lowered without libtpu); ``hlo_text`` is ``compiled.as_text()`` (optimised HLO);
    ``grad_argnums`` is set when the program is a ``value_and_grad``; ``backend`` is the platform
    name (``cpu``, ``cuda``, ``tpu``); ``fn`` (optional) is the user's function, used only to name
    closed-over constants from its globals / closure; ``progress`` (optional) is told each
    analysis stage as it starts.
    """

    closed_jaxpr: Any
    lowered: Any
    compiled: Any | None
    hlo_text: str | None
    source: SourceInfo
    backend: str = "cpu"
    grad_argnums: tuple[int, ...] | None = None
    name: str = "f"
    fn: Any | None = None
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    #: the user's calls recorded while tracing (``capture.calls.CallLog``; None: not recorded)
    calls: Any | None = field(default=None, compare=False, repr=False)
    #: the analysis of the traced program if it was made while XLA compiled
    #: (:func:`~nbcompile.analysis.core.analyse_traced`; None: not)
    beside_compile: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    #: the pre-optimisation HLO text if it was converted while XLA compiled (None: not)
    pre_optimisation: Callable[[], str | None] | None = field(
        default=None, compare=False, repr=False
    )
    #: told the optimised module's text and its parse, where something keeps them for later
    #: (``--passes``: the program's dump, whose kernel look-ups would parse it again; the
    #: analysis itself keeps neither)
    keep_optimised: Callable[[str, Any], None] | None = field(
        default=None, compare=False, repr=False
    )
