"""JAX name stacks and HLO ``op_name``\\ s, parsed in time linear in their length.

A name stack is ``/``-joined scopes, each possibly wrapped in transforms
(``transpose(jvp(MLP))/Dense_0``); an HLO ``op_name`` is a name stack plus the primitive.
Both carry the user's own scope names (``jax.named_scope``, module names), which may be of any
length: a regex that can restart at every position of a long name (``re.findall(r"(\\w+)\\(",
...)`` on a 100 KB name without ``(``, ``\\)+$`` on a long run of ``)``) is quadratic in it and
stalled the analysis for minutes. Every parse here runs anchored matches or ``str`` methods
only, each character looked at a bounded number of times.

:func:`shown` caps what is kept (and so shown) of an absurdly long scope name, the same way
wherever a name is parsed (traced scopes, compiled op_names, call labels), so the traced and
compiled sides still agree on it and two long names that differ stay apart.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["LIMIT", "shown", "strip_transforms", "transform_names", "unrepeated"]

#: longest scope name kept whole (characters); longer ones are cut by :func:`shown`
LIMIT = 200

# anchored (``.match``) only: a repetition of ``NAME(`` at the start of a part
_LEAD_WORD = re.compile(r"(?:\w+\()+")
_LEAD_DOTTED = re.compile(r"(?:[\w.\-]+\()+")
_WORD_RUN = re.compile(r"\w+")


def transform_names(stack: str) -> frozenset[str]:
    """The transforms named in ``stack``: every run of word characters right before a ``(``
    (what ``re.findall(r"(\\w+)\\(", stack)`` finds, in linear time)."""
    if "(" not in stack:
        return frozenset()
    found = set()
    for piece in stack.split("(")[:-1]:
        # the word run at the end of the piece: an anchored match on the piece reversed (each
        # piece is reversed once: linear in all)
        tail = piece[-1:]
        if not tail or not _WORD_RUN.match(tail):
            continue
        run = _WORD_RUN.match(piece[::-1])
        if run is not None:
            found.add(run.group()[::-1])
    return frozenset(found)


def strip_transforms(part: str, dotted: bool = False) -> str:
    """One scope of a name stack without its transforms: leading ``NAME(`` (``NAME`` of word
    characters, also ``.`` and ``-`` with ``dotted``) and trailing ``)`` removed (what
    ``re.sub(r"^(?:\\w+\\()+|\\)+$", "", part)`` gives, in linear time), but only as many
    ``)`` as the transforms opened: a name of the user's may end in one (``layers_2 (relu)``,
    a function in a model's list: ``capture/_listitems.py``)."""
    opened = 0
    if "(" in part:
        lead = (_LEAD_DOTTED if dotted else _LEAD_WORD).match(part)
        if lead is not None:
            opened = lead.group().count("(")
            part = part[lead.end() :]
    if not part.endswith(")"):
        return part
    kept = part.rstrip(")")
    # a transform may be empty (``jvp()``) or wrap nothing left: the parentheses are its own
    return part[: len(part) - opened] if len(part) - len(kept) > opened else kept


def shown(name: str) -> str:
    """``name`` itself up to :data:`LIMIT` characters; a longer one cut to its start, its length
    and a digest of the whole (so names that differ past the cut stay apart)."""
    if len(name) <= LIMIT:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: LIMIT - 40]}…[{len(name):,} chars, {digest}]"


def unrepeated(stack: str) -> str:
    """``stack`` without a scope path JAX wrote twice. JAX 0.12.1 names the transposed body of a
    ``custom_jvp`` rule (``jax.nn.softmax``'s, say) with the enclosing path again:
    ``transpose(jvp(Outer))/attn/jvp(Outer)/attn/mul`` for what is ``transpose(jvp(Outer))/
    attn/mul``. A run of scopes that starts at a transformed scope and repeats, transforms
    aside, the run just before it, which starts at a ``transpose(`` scope, is dropped; the
    first run, which carries the ``transpose(`` (the backward), stays."""
    if "transpose(" not in stack or stack.count("(") < 3:
        return stack
    parts = stack.split("/")
    wrapped = [i for i, part in enumerate(parts) if _LEAD_WORD.match(part)]
    transposed = [i for i in wrapped if "transpose(" in parts[i]]
    bare: list[str] | None = None
    for k in wrapped:
        if "transpose(" in parts[k]:
            continue
        for s in transposed:
            if s >= k:
                break
            bare = bare or [strip_transforms(part) for part in parts]
            if bare[s:k] == bare[k : 2 * k - s]:
                return unrepeated("/".join(parts[:k] + parts[2 * k - s :]))
    return stack
