"""One error family with stable codes.

Every error nbcompile raises is an :class:`NbcompileError` carrying a stable ``code``
(documented in ``docs/errors.md``), the visible cell ``line`` it concerns (when known) and a
``hint`` saying what to do. ``str(err)`` is one or two lines: ``[NBC201] line 4: ... — hint``.
"""

from __future__ import annotations

__all__ = [
    "CODES",
    "CaptureError",
    "CompileError",
    "FreezeError",
    "LowerError",
    "NbcompileError",
    "TargetError",
    "TraceError",
]

#: code -> one-line meaning. The docs table and the tests are generated from / checked against it.
CODES: dict[str, str] = {
    "NBC100": "the cell has a syntax error",
    "NBC101": "the cell raised while running (before compiling)",
    "NBC102": "a name the example call needs is not defined",
    "NBC110": "no callable to compile: the last line is not a call and no TARGET was given",
    "NBC111": "several candidate callables on the last line",
    "NBC112": "TARGET is not callable or not defined",
    "NBC113": "the example arguments could not be evaluated",
    "NBC114": "a magic option is invalid",
    "NBC200": "tracing failed",
    "NBC201": "Python control flow (if/while/bool) on a traced value",
    "NBC202": "a shape depends on array values (e.g. x[x > 0])",
    "NBC203": "an example argument is not an array (mark it static)",
    "NBC204": "a traced value leaked out of the function (stored in a global)",
    "NBC205": "a traced value was converted to a concrete Python/NumPy value",
    "NBC206": "TARGET must return a scalar for --grad",
    "NBC207": "TARGET returns something that is not an array (a string, a function, a model)",
    "NBC208": "TARGET is not a plain function (async def, generator)",
    "NBC209": "tracing or compiling was interrupted",
    "NBC210": "the compilation cannot run here (another device, or abstract example arguments)",
    "NBC211": "no device memory for the copies of donated arguments a measurement runs on",
    "NBC212": "an array the compilation was given is gone or no longer fits its program",
    "NBC215": "an array of the program is too large for XLA to represent",
    "NBC216": "the program has too long a chain of dependent operations for XLA",
    "NBC217": "an example argument is nested too deeply",
    "NBC300": "lowering to StableHLO failed",
    "NBC400": "XLA compilation failed",
    "NBC500": "the frozen-model file is malformed",
    "NBC501": "the frozen-model file failed an integrity check",
    "NBC502": "the frozen-model file was written by an incompatible version",
    "NBC503": "the frozen-model file needs a platform or devices that are not available",
    "NBC504": "the frozen-model weights do not match the program",
    "NBC505": "the frozen-model program uses a custom call that is not allowed",
    "NBC506": "freezing failed",
    "NBC507": "the input does not match the frozen model's signature",
    "NBC508": "the frozen model exceeds a stated limit (memory budget, program size, time)",
    "NBC509": "the frozen-model file cannot be opened (missing, not a regular file, unreadable)",
    "NBC520": "an input file of the nbcompile command is not a plain .npy array",
    "NBC521": "a command-line value of the nbcompile command is out of range",
    "NBC522": "the notebook given to nbcompile render is malformed",
    "NBC523": "the rendered page would fetch from the network (not viewable offline)",
    "NBC524": "an output file of the nbcompile command cannot be written",
    "NBC600": "the requested backend or target is not available",
    "NBC601": "the mesh or sharding specification is invalid",
    "NBC610": "XLA could not write its dump of a compile whole (a full disk under TMPDIR)",
    "NBC620": "one call runs more kernel executions than --profile can hold (a long loop)",
    "NBC700": "a NaN or Inf appeared while debugging",
    "NBC800": "the JAX processes compiled different programs (it would hang at a collective)",
    "NBC801": "another JAX process did not reach the %%compile in time (died, busy, other code)",
    "NBC802": "--freeze of a program sharded across JAX processes",
    "NBC803": "the local cluster of JAX processes could not be started",
    "NBC804": "another JAX process sent what this nbcompile cannot read (another nbcompile version?)",
}


class NbcompileError(Exception):
    """Base of every nbcompile error: ``code``, visible cell ``line`` (or None) and ``hint``."""

    default_code = "NBC200"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.code = code or self.default_code
        if self.code not in CODES:
            raise ValueError(f"unknown nbcompile error code {self.code!r}")
        self.message = message
        self.line = line
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        text = f"[{self.code}] {where}{self.message}"
        if self.hint:
            text += f"\n  → {self.hint}"
        return text


class CaptureError(NbcompileError):
    """The cell could not be run or its target / example arguments could not be found."""

    default_code = "NBC101"


class TraceError(NbcompileError):
    """JAX could not trace the target (control flow on tracers, dynamic shapes, ...)."""

    default_code = "NBC200"


class LowerError(NbcompileError):
    """The traced program could not be lowered to StableHLO."""

    default_code = "NBC300"


class CompileError(NbcompileError):
    """XLA rejected the program."""

    default_code = "NBC400"


class FreezeError(NbcompileError):
    """Writing, verifying or loading a frozen ``.nbc`` model failed."""

    default_code = "NBC500"


class TargetError(NbcompileError):
    """The backend, topology, target or mesh asked for is not available or invalid."""

    default_code = "NBC600"
