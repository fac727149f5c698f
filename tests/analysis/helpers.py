"""Build analysis Artifacts from a function, the way the stages will."""

from __future__ import annotations

import jax

from nbcompile.analysis import Artifacts
from nbcompile.capture.source import SourceInfo


def make_artifacts(
    fn, *args, grad_argnums=None, source_file=None, compiler_options=None, name=None
):
    """trace -> lower -> compile ``fn`` (or ``value_and_grad(fn, grad_argnums)``)."""
    target = jax.value_and_grad(fn, argnums=grad_argnums) if grad_argnums is not None else fn
    traced = jax.jit(target).trace(*args)
    lowered = traced.lower()
    compiled = lowered.compile(compiler_options or {})
    if source_file is None:
        source_file = fn.__code__.co_filename
    with open(source_file) as fh:
        source = SourceInfo(filename=source_file, text=fh.read())
    argnums = None
    if grad_argnums is not None:
        argnums = tuple(grad_argnums) if isinstance(grad_argnums, tuple | list) else (grad_argnums,)
    return Artifacts(
        closed_jaxpr=traced.jaxpr,
        lowered=lowered,
        compiled=compiled,
        hlo_text=compiled.as_text(),
        source=source,
        grad_argnums=argnums,
        name=name or getattr(fn, "__name__", "f"),
        fn=fn,
    )
