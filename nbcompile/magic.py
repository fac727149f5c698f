"""The ``%%compile`` cell magic: parse options, run the cell, call the library, bind, display.

Deliberately thin: everything it does is :class:`nbcompile.session.Session` behaviour, which is
tested without a kernel. Misuse raises IPython's one-line ``UsageError``; every other failure is
one raised :class:`~nbcompile.errors.NbcompileError` naming the visible cell line. Each shell
has its own :class:`CompileMagics` (and so its own Session), found through IPython's magics
registry, never through module globals.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.process import arg_split

from ._compat import cell_files
from .errors import NbcompileError
from .history import RecompileWatcher
from .session import CellOptions, Session

_USAGE_CODES = {"NBC110", "NBC111", "NBC114"}


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _argnums(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(n) for n in _names(text)) or (0,)
    except ValueError:
        raise UsageError(f"--grad takes argument numbers like 0 or 0,1, not {text!r}") from None


def _shards(specs: list[str] | None) -> dict[str, str]:
    out = {}
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--shard takes ARG=SPEC (e.g. x=data,None), not {spec!r}")
        out[name.strip()] = value.strip()
    return out


def _calls(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"--profile takes a number of calls like 20, not {text!r}")
    return int(text)


class _Progress:
    """Shows the stage and elapsed time once a compile takes longer than half a second."""

    DELAY = 0.5

    def __init__(self, name: str) -> None:
        self.name = name
        self.start = time.perf_counter()
        self.handle: Any = None

    def __call__(self, stage: str) -> None:
        elapsed = time.perf_counter() - self.start
        if self.handle is None and elapsed < self.DELAY:
            return
        from IPython.display import display

        text = f"⏳ {self.name}: {stage}… ({elapsed:.1f} s)"
        bundle = {"text/plain": text}
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def done(self, what: str = "done") -> None:
        if self.handle is not None:
            elapsed = time.perf_counter() - self.start
            self.handle.update(
                {"text/plain": f"✓ {self.name}: {what} in {elapsed:.1f} s"}, raw=True
            )


@magics_class
class CompileMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.session = Session()
        self.bound: dict[str, Any] = {}
        self.watcher = RecompileWatcher()
        self.cell_id: str | None = None

    # IPython events: explain recompiles of functions this magic bound.
    def pre_run_cell(self, info: Any = None) -> None:
        self.cell_id = getattr(info, "cell_id", None)
        self.watcher.start()

    def post_run_cell(self, *_: Any) -> None:
        ns = self.shell.user_ns
        live = {n: fn for n, fn in self.bound.items() if ns.get(n) is fn}
        for note in self.watcher.stop(live):
            print(f"nbcompile: {note}", file=sys.stderr)

    @magic_arguments()
    @argument(
        "TARGET",
        nargs="?",
        default=None,
        help="the callable to compile (default: the one called on the last line)",
    )
    @argument(
        "-b",
        "--backend",
        choices=["cpu", "gpu", "tpu"],
        default=None,
        help="platform to compile for (default: JAX's default backend); absent devices "
        "are compiled deviceless where possible",
    )
    @argument(
        "-g",
        "--grad",
        nargs="?",
        const="0",
        default=None,
        metavar="ARGNUMS",
        help="also compile value_and_grad(TARGET, ARGNUMS) (default 0) and show the "
        "backward graph; TARGET must return a scalar",
    )
    @argument(
        "--freeze",
        metavar="PATH",
        default=None,
        help="write the frozen single-file model (.nbc) after compiling",
    )
    @argument(
        "--freeze-constants",
        action="store_true",
        help="with --freeze: bake the weights into the program as constants",
    )
    @argument(
        "--bench",
        action="store_true",
        help="measure eager vs compiled, compile time and break-even call count",
    )
    @argument(
        "--ablate",
        action="store_true",
        help="recompile with fusion / constant folding off and measure what each bought",
    )
    @argument(
        "--debug",
        action="store_true",
        help="run op by op keeping every intermediate; stop at the first NaN/Inf",
    )
    @argument(
        "--profile",
        nargs="?",
        const="20",
        default=None,
        metavar="N",
        help="measure N calls (default 20): time per kernel, per cell line, per module",
    )
    @argument(
        "--memory",
        action="store_true",
        help="map memory: what is live at the peak, line by line, and whether it fits",
    )
    @argument(
        "--passes",
        action="store_true",
        help="record XLA's pass pipeline and the kernels' code (XLA's dump of this compile)",
    )
    @argument(
        "--mesh",
        metavar="SHAPE",
        default=None,
        help="compile for a device mesh, e.g. 4x2 or 4x2:data,model",
    )
    @argument(
        "--shard",
        nargs="+",
        metavar="ARG=SPEC",
        default=None,
        help="shard an argument over mesh axes, e.g. x=data,None",
    )
    @argument("--topology", default=None, help="TPU topology for deviceless compiles, e.g. v5e:2x2")
    @argument(
        "--target", dest="gpu", default=None, help="GPU model for deviceless compiles, e.g. h100"
    )
    @argument(
        "--static",
        metavar="ARGNAMES",
        default=None,
        help="comma-separated argument names passed to jax.jit as static_argnames",
    )
    @argument(
        "--donate",
        metavar="ARGNAMES",
        default=None,
        help="comma-separated argument names passed to jax.jit as donate_argnames",
    )
    @argument(
        "--args",
        dest="args_expr",
        metavar="EXPR",
        default=None,
        help="the example arguments, when the last line is not a call of TARGET",
    )
    @argument("-f", "--force", action="store_true", help="recompile even if nothing changed")
    @argument("-q", "--quiet", action="store_true", help="compile and bind without display")
    @cell_magic("compile")
    def compile(self, line: str, cell: str) -> Any:
        """Compile the model in this cell with JAX/XLA and show what the compiler did.

        The cell runs like a normal cell; its last line is the example call, e.g.
        ``predict(params, x)``: that callable is traced with those arguments, lowered to
        StableHLO and compiled by XLA. A function defined in the cell is rebound to its compiled
        ``jax.jit`` version (with ``.compilation``); the cell's value is the ``Compilation``.
        Re-running an unchanged cell does not compile again (``-f`` forces it). Options are
        read as a shell would (quotes group words: ``--freeze 'my dir/m.nbc'``).

        Measurements (``--bench``, ``--ablate``, ``--debug``, ``--profile``, ``--memory``) use
        ``--static`` values as the compile did and never consume your arrays (a program that
        donates runs on copies). They are independent: one that fails is named in a warning
        (``c.failures``) and the others' results are kept; the cell fails only when all fail.
        """
        __tracebackhide__ = True
        # parse_argstring would keep quotes; a shell would not (--freeze '/p/m.nbc').
        args = self.compile.parser.parse_args(arg_split(line, posix=True))
        options = CellOptions(
            fn=args.TARGET,
            backend=args.backend,
            grad=_argnums(args.grad),
            freeze=args.freeze,
            freeze_constants=args.freeze_constants,
            bench=args.bench,
            ablate=args.ablate,
            debug=args.debug,
            profile=_calls(args.profile),
            memory=args.memory,
            passes=args.passes,
            mesh=args.mesh,
            shard=_shards(args.shard),
            topology=args.topology,
            gpu=args.gpu,
            static=_names(args.static),
            donate=_names(args.donate),
            args_expr=args.args_expr,
            force=args.force,
            quiet=args.quiet,
            line=line,
        )
        filename = self.shell.compile.cache("\n" + cell, self.shell.execution_count)
        progress = _Progress(options.fn or "%%compile")
        try:
            result = self.session.run_cell(
                cell,
                options,
                self.shell.user_ns,
                filename,
                progress=progress,
                cell_id=self.cell_id,
                cells=cell_files(self.shell),
            )
        except NbcompileError as err:
            progress.done("failed")
            if err.code in _USAGE_CODES:
                raise UsageError(str(err)) from None
            raise err.with_traceback(None) from err.__cause__  # shown by short_traceback
        for name in result.bound:
            self.bound[name] = self.shell.user_ns[name]
        quiet = options.quiet or result.captured.quiet
        if not quiet:
            # the view needs the analysis: do it under the progress line, so "done" is true
            result.compilation.report(progress=progress)
        progress.done(
            ("cache hit" if result.cache_hit else "compiled") + ("" if quiet else " and analysed")
        )
        for warning in result.warnings:
            print(f"nbcompile: {warning}", file=sys.stderr)
        return None if quiet else result.compilation


def short_traceback(value: BaseException) -> list[str]:
    """The error as the user sees it: the cause in one or two lines, then ours."""
    lines = []
    cause = value.__cause__
    if cause is not None and not isinstance(cause, NbcompileError):
        text = [ln for ln in str(cause).strip().splitlines() if ln.strip()][:2]
        origin = _origin(cause)
        lines.append(f"{type(cause).__name__} ({origin}): " + " ".join(text)[:400])
        lines.append("  (the full error is at `nbcompile.last_error().__cause__`)")
    lines.append(f"{type(value).__name__}: {value}")
    return ["\n".join(lines)]


def _origin(cause: BaseException) -> str:
    """Who raised the cause: the user's own code (a cell, their files) or a library — named
    after the package its innermost frame belongs to (jax, flax, equinox, keras...)."""
    import re

    from .capture.userfiles import is_user_file

    tb = cause.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    if last is None or is_user_file(last):
        return "raised by your code"
    match = re.search(r"[/\\](?:site|dist)-packages[/\\]([A-Za-z_]\w*)", last)
    package = match.group(1) if match else None
    if package in (None, "jax", "jaxlib"):
        return "raised by JAX/XLA"
    return f"raised by {package}"


def magics_of(shell: Any) -> CompileMagics | None:
    """The shell's CompileMagics instance, if the extension is loaded there."""
    return shell.magics_manager.registry.get(CompileMagics.__name__)


def _show_nbcompile_error(
    shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None
) -> list[str]:
    magics = magics_of(shell)
    if magics is not None:
        magics.session.last_error = value
    stb = short_traceback(value)
    shell._showtraceback(etype, value, stb)
    return stb


def load_ipython_extension(ipython: Any) -> None:
    from ._compat import quiet_backend_start
    from .cache import enable_persistent_cache

    if magics_of(ipython) is not None:
        return  # loaded already in this shell
    quiet_backend_start()
    enable_persistent_cache()
    if not ipython.custom_exceptions:  # never replace a handler the user installed
        ipython.set_custom_exc((NbcompileError,), _show_nbcompile_error)
    magics = CompileMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)


def unload_ipython_extension(ipython: Any) -> None:
    magics = magics_of(ipython)
    if magics is None:
        return
    for event, fn in (
        ("pre_run_cell", magics.pre_run_cell),
        ("post_run_cell", magics.post_run_cell),
    ):
        if fn in ipython.events.callbacks[event]:
            ipython.events.unregister(event, fn)
    magics.watcher.close()
    if ipython.custom_exceptions == (NbcompileError,):
        ipython.set_custom_exc((), None)
    ipython.magics_manager.registry.pop(CompileMagics.__name__, None)
    ipython.magics_manager.magics["cell"].pop("compile", None)
