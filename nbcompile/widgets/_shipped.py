"""The front end as shipped in an output: gzip'd, in base64, behind a few hundred bytes of loader.

Every first output of a page carries the view's bundle twice: as the widget's ``_esm`` (its
state) and inline in the ``text/html`` fallback (for trusted outputs and exported pages). The
minified bundle is ~110 KB; gzip'd in base64 it is ~53 KB, so each output is ~115 KB smaller
(docs/benchmarks.md, "displayed bytes"). The browser inflates it with ``DecompressionStream``
(Chromium 80, Firefox 113, Safari 16.4), then runs it as it ran before:

- :func:`esm_loader`: an ES module (anywidget's ``_esm``) that imports the inflated module from
  a ``blob:`` URL (as anywidget itself imports ``_esm``) and re-exports its default.
- :func:`script_loader`: a classic script for the static HTML that puts a stand-in
  ``window.nbcompileView`` on the page at once (it queues ``mount`` calls, so an output's mount
  script finds it without waiting), inflates the bundle, runs it as an inline script (which
  defines the real ``window.nbcompileView``) and replays the queued mounts. Where the browser
  has no ``DecompressionStream`` nothing is defined: the outputs keep their static picture.

:func:`inflate` is the exact inverse (tests read the shipped front end back with it).
"""

from __future__ import annotations

import base64
import gzip
import json
import re

__all__ = ["esm_loader", "inflate", "script_loader"]

# The gzip'd bundle as a string literal (base64 needs no escaping in JS, JSON or HTML).
_INFLATE = (
    "new Response(new Blob([Uint8Array.from(atob({b64}),c=>c.charCodeAt(0))]).stream()"
    '.pipeThrough(new DecompressionStream("gzip"))).text()'
)
_B64 = re.compile(r'atob\("([A-Za-z0-9+/=]*)"\)')


def _deflated(source: str) -> str:
    # mtime=0: the same bundle gives the same bytes (outputs diff cleanly, sizes are stable)
    return json.dumps(base64.b64encode(gzip.compress(source.encode(), 9, mtime=0)).decode())


def esm_loader(source: str) -> str:
    """An ES module equal to the ES module ``source`` (its default export), shipped gzip'd."""
    inflate = _INFLATE.replace("{b64}", _deflated(source))
    return (
        f"const t=await {inflate};"
        'const u=URL.createObjectURL(new Blob([t],{type:"text/javascript"}));'
        "let m;try{m=await import(u)}finally{URL.revokeObjectURL(u)}"
        "export default m.default;"
    )


def script_loader(source: str) -> str:
    """A classic script that runs the classic script ``source`` (which defines
    ``window.nbcompileView``), shipped gzip'd; ``mount`` calls made meanwhile are queued."""
    inflate = _INFLATE.replace("{b64}", _deflated(source))
    return (
        '(function(){if(typeof DecompressionStream==="undefined")return;'
        "var w=window,q=[],v={mount:function(r,d){q.push([r,d]);return null}};"
        "if(!w.nbcompileView)w.nbcompileView=v;"
        f"{inflate}.then(function(t){{"
        'var s=document.createElement("script");s.textContent=t;'
        "(document.head||document.documentElement).appendChild(s);s.remove();"
        "var n=w.nbcompileView;if(n&&n!==v)q.forEach(function(a){n.mount(a[0],a[1])});"
        '},function(e){console.error("nbcompile: the view did not load",e)});})();'
    )


def inflate(loader: str) -> str:
    """The front end's source inside a loader made by :func:`esm_loader` or
    :func:`script_loader`."""
    found = _B64.search(loader)
    if found is None:
        raise ValueError("not an nbcompile front-end loader (no gzip'd bundle in it)")
    return gzip.decompress(base64.b64decode(found[1])).decode()
