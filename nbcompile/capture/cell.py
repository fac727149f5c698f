"""Cell source -> Captured: which callable to compile, with which example arguments.

The body is compiled with one blank line in front, so code-object line numbers are the
*visible* cell lines (line 1 is the ``%%compile`` line). Nothing here imports IPython: the
magic passes in the namespace and the file name its compiler registered with ``linecache``.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import CaptureError
from .source import CellFiles, Location, SourceInfo
from .userfiles import is_user_file

__all__ = [
    "Captured",
    "capture",
    "cell_line_of",
    "deepest_user_frame",
    "defined_in",
    "evaluate_call",
    "restore",
    "run_body",
    "snapshot",
    "store_line",
]


@dataclass
class Captured:
    """A parsed ``%%compile`` cell."""

    source: SourceInfo
    body: list[ast.stmt]  # statements run like a normal cell
    fn_expr: str  # source of the callable, e.g. "predict" or "model.apply"
    call: ast.Call | None  # the example call on the last line, if any
    args_expr: str | None = None  # --args EXPR
    quiet: bool = False  # trailing ';'
    call_line: int | None = None  # visible line of the example call
    defined: list[str] = field(default_factory=list)  # top-level functions/classes the cell defines

    @property
    def fn_name(self) -> str | None:
        return self.fn_expr if self.fn_expr.isidentifier() else None


def cell_line_of(exc: BaseException, source: SourceInfo) -> int | None:
    """The deepest traceback line of ``exc`` that lies in the cell (visible numbering)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        visible = source.visible_line(frame.filename, frame.lineno)
        if visible is not None:
            line = visible
    if line is None and isinstance(exc, SyntaxError):
        line = source.visible_line(exc.filename, exc.lineno)
    return line


def deepest_user_frame(exc: BaseException, source: SourceInfo) -> tuple[Location, str] | None:
    """(location, code text) of the deepest traceback frame of ``exc`` in the user's code: a
    cell of this kernel (the compiling one or an earlier one, ``In [3] line 6`` in its visible
    numbering) or a user file. None when every frame is library code."""
    cells = CellFiles(source.cells)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.lineno or not is_user_file(frame.filename):
            continue
        if source.visible_line(frame.filename, frame.lineno) is not None:
            cell = cells.count(frame.filename) if source.cells is not None else None
            where = Location(cell, frame.filename, frame.lineno)
            return where, source.line_text(frame.lineno)
        count, name = cells.resolve(frame.filename)
        text = linecache.getline(name, frame.lineno) or (frame.line or "")
        return Location(count, name, frame.lineno), text.strip()
    return None


_MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})


def _stores_into(node: ast.AST, name: str) -> bool:
    """Whether ``node`` stores a value into the global ``name`` (``name = v``, ``name[k] = v``,
    ``name.attr = v``, ``name.append(v)``)."""
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, ast.Store)
    if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store):
        return isinstance(node.value, ast.Name) and node.value.id == name
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        target = node.func.value
        return node.func.attr in _MUTATORS and isinstance(target, ast.Name) and target.id == name
    return False


def store_line(source: SourceInfo, name: str) -> int | None:
    """The visible cell line where a function of the cell stores a value into the global
    ``name`` (where a traced value leaks out), or None when no function of the cell does."""
    text = "\n" + "\n".join(source.lines[1:])
    try:
        module = ast.parse(text)
    except SyntaxError:
        return None
    for fn in ast.walk(module):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for node in ast.walk(fn):
                if _stores_into(node, name):
                    return node.lineno
    return None


def _syntax_error(exc: SyntaxError, source: SourceInfo) -> CaptureError:
    line = exc.lineno
    text = source.line_text(line) if line else ""
    caret = ""
    if text and exc.offset:
        caret = "\n      " + " " * (exc.offset - 1) + "^"
    return CaptureError(
        f"syntax error: {exc.msg}\n      {text}{caret}",
        code="NBC100",
        line=line,
        hint="fix the line and run the cell again",
    )


def _calls_in(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _outer_calls(expr: ast.expr) -> list[ast.Call]:
    """Calls in ``expr`` that are not inside another call's arguments."""
    if isinstance(expr, ast.Call):
        return [expr]
    found: list[ast.Call] = []
    for child in ast.iter_child_nodes(expr):
        if isinstance(child, ast.expr):
            found.extend(_outer_calls(child))
    return found


def capture(
    cell: str,
    filename: str,
    *,
    magic_line: str = "",
    fn: str | None = None,
    args_expr: str | None = None,
    cells: Mapping[str, int] | None = None,
) -> Captured:
    """Parse ``cell`` and decide the target and its example call (no code is run). ``cells``
    maps the kernel's cell files to execution counts (see ``SourceInfo``)."""
    __tracebackhide__ = True
    code_text = "\n" + cell
    source = SourceInfo(
        filename=filename, text=f"%%compile {magic_line}".rstrip() + code_text, cells=cells
    )
    linecache.cache[filename] = (len(code_text), None, code_text.splitlines(True), filename)
    try:
        module = ast.parse(code_text, filename=filename)
    except SyntaxError as exc:
        raise _syntax_error(exc, source) from exc
    body = list(module.body)
    quiet = cell.rstrip().endswith(";")
    defined = [
        s.name for s in body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    last = body[-1] if body else None
    last_expr = last.value if isinstance(last, ast.Expr) else None
    call: ast.Call | None = None

    if fn is not None:
        try:
            ast.parse(fn, mode="eval")
        except SyntaxError as exc:
            raise CaptureError(
                f"TARGET `{fn}` is not a Python expression",
                code="NBC114",
                hint="name the function, e.g. %%compile predict",
            ) from exc
        if last_expr is not None:
            matching = [c for c in _calls_in(last_expr) if ast.unparse(c.func) == fn]
            call = matching[0] if matching else None
        if call is None and args_expr is None:
            raise CaptureError(
                f"the last line does not call `{fn}`, so there are no example arguments",
                code="NBC110",
                line=last.lineno if last else None,
                hint=f'end the cell with a call such as `{fn}(x)`, or pass --args "(x,)"',
            )
        fn_expr = fn
    elif last_expr is not None and _outer_calls(last_expr):
        outer = _outer_calls(last_expr)
        if len(outer) > 1:
            names = ", ".join(f"`{ast.unparse(c.func)}`" for c in outer)
            raise CaptureError(
                f"the last line calls several functions ({names}): which one to compile?",
                code="NBC111",
                line=last.lineno,
                hint=f"name it: %%compile {ast.unparse(outer[0].func)}",
            )
        call = outer[0]
        fn_expr = ast.unparse(call.func)
    elif args_expr is not None and len([s for s in body if isinstance(s, ast.FunctionDef)]) == 1:
        fn_expr = next(s.name for s in body if isinstance(s, ast.FunctionDef))
    else:
        raise CaptureError(
            "no callable to compile: the last line is not a call",
            code="NBC110",
            line=last.lineno if last else None,
            hint="end the cell with the example call, e.g. `predict(params, x)`, "
            'or name it: %%compile predict --args "(params, x)"',
        )

    if call is not None and last_expr is not None:
        body = body[:-1]  # the example call is compiled, not run eagerly
    call_line = last.lineno if call is not None and last else None
    return Captured(
        source=source,
        body=body,
        fn_expr=fn_expr,
        call=call,
        args_expr=args_expr,
        quiet=quiet,
        call_line=call_line,
        defined=defined,
    )


def run_body(captured: Captured, namespace: dict[str, Any]) -> None:
    """Run the cell's statements in ``namespace`` like a normal cell."""
    __tracebackhide__ = True
    if not captured.body:
        return
    module = ast.Module(body=captured.body, type_ignores=[])
    code = compile(module, captured.source.filename or "<cell>", "exec")
    try:
        exec(code, namespace)
    except Exception as exc:
        line = cell_line_of(exc, captured.source)
        if isinstance(exc, NameError):
            raise CaptureError(
                f"NameError: {exc}",
                code="NBC102",
                line=line,
                hint="define it in this cell or run the cell that defines it first",
            ) from exc
        raise CaptureError(
            f"the cell raised {type(exc).__name__}: {exc}",
            code="NBC101",
            line=line,
            hint="fix the error; nothing was compiled and no names were changed",
        ) from exc


def _eval(expr: ast.expr | str, namespace: dict[str, Any], filename: str) -> Any:
    node = ast.Expression(body=expr) if isinstance(expr, ast.expr) else ast.parse(expr, mode="eval")
    return eval(compile(node, filename, "eval"), namespace)


def evaluate_call(
    captured: Captured, namespace: dict[str, Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """Evaluate the target and its example arguments in ``namespace``."""
    __tracebackhide__ = True
    filename = captured.source.filename or "<cell>"
    line = captured.call_line
    try:
        target = _eval(
            captured.call.func if captured.call else captured.fn_expr, namespace, filename
        )
    except NameError as exc:
        raise CaptureError(
            f"`{captured.fn_expr}` is not defined ({exc})",
            code="NBC112",
            line=line,
            hint="define it in this cell or in an earlier cell",
        ) from exc
    if not callable(target):
        raise CaptureError(
            f"`{captured.fn_expr}` is a {type(target).__name__}, not a callable",
            code="NBC112",
            line=line,
            hint="compile a function or model",
        )
    try:
        if captured.args_expr is not None:
            value = _eval(_unquote(captured.args_expr), namespace, filename)
            return target, (value if isinstance(value, tuple) else (value,)), {}
        assert captured.call is not None
        args: list[Any] = []
        for a in captured.call.args:
            if isinstance(a, ast.Starred):
                args.extend(_eval(a.value, namespace, filename))
            else:
                args.append(_eval(a, namespace, filename))
        kwargs: dict[str, Any] = {}
        for k in captured.call.keywords:
            if k.arg is None:
                kwargs.update(_eval(k.value, namespace, filename))
            else:
                kwargs[k.arg] = _eval(k.value, namespace, filename)
    except Exception as exc:
        code = "NBC102" if isinstance(exc, NameError) else "NBC113"
        raise CaptureError(
            f"the example arguments could not be evaluated: {type(exc).__name__}: {exc}",
            code=code,
            line=line,
            hint="define the arguments before the call (or give them with --args)",
        ) from exc
    if _library_code(target):
        captured.source = replace(captured.source, library_call=line)
    return target, tuple(args), kwargs


def _library_code(target: Any) -> bool:
    """Whether ``target`` runs library code only: a library model instance called directly
    (``eqx.nn.Linear``, ``nnx.Linear``, a Keras functional model), not the user's function."""
    fn = inspect.unwrap(target) if isinstance(target, types.FunctionType) else target
    code = getattr(fn, "__code__", None)
    for name in () if code is not None else ("call", "__call__"):
        method = getattr(type(fn), name, None)
        try:
            code = getattr(inspect.unwrap(method), "__code__", None) if method else None
        except ValueError:
            code = None
        if code is not None:
            break
    if not isinstance(code, types.CodeType) or code.co_filename.startswith("<"):
        return False  # no code, or code compiled from a string: not known to be a library's
    return not is_user_file(code.co_filename)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def snapshot(namespace: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of the namespace to restore if the cell fails."""
    return dict(namespace)


def restore(namespace: dict[str, Any], snap: dict[str, Any]) -> None:
    """Put every name back as it was in ``snap`` (added names removed, changed ones reset)."""
    for name in [k for k in namespace if k not in snap]:
        del namespace[name]
    for name, value in snap.items():
        if namespace.get(name, _MISSING) is not value:
            namespace[name] = value


_MISSING = object()


def defined_in(obj: Any, filename: str | None) -> bool:
    """Whether ``obj`` (a function, or a jit / partial wrapping one) was defined in the cell."""
    seen = 0
    while obj is not None and seen < 8:
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            return filename is not None and code.co_filename == filename
        obj = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)
        seen += 1
    return False
