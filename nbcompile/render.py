"""Execute a notebook and export it as one HTML file whose graphs are visible offline.

nbconvert's default HTML loads require.js, MathJax and the widget manager from CDNs, and prefers
stored widget state over a ``text/html`` fallback, so offline the view would be blank. Here the
widget outputs are dropped in favour of nbcompile's self-contained fallback (graph as an SVG
image plus the interactive renderer) and every CDN URL is blanked.

Trust rule (Jupyter's): a notebook's HTML, markdown and script are trusted only when it was
executed here (the user chose to run its code) or it carries this user's Jupyter signature.
Otherwise (``--no-execute`` of a downloaded notebook) every stored output and markdown cell is
sanitised before export: script, event handlers, styles, frames, forms and remote URLs are
removed, ``application/javascript`` outputs dropped, images kept only as ``data:`` or relative
URLs. nbcompile's own views then show their static picture without the interactive renderer.
``remote_references`` parses the finished page (HTML, attributes, inline CSS) and lists every
URL that a browser would fetch from another machine; the page is written only when there is
none. The page is written through a fresh temporary file in the target folder (``mkstemp``,
which never follows a link) and moved into place.
"""

from __future__ import annotations

import contextlib
import html.parser
import json
import os
import re
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

from nbcompile.errors import NbcompileError

WIDGET_MIMES = (
    "application/vnd.jupyter.widget-view+json",
    "application/vnd.jupyter.widget-state+json",
)
_CDN_TRAITS = (
    "jquery_url",
    "mathjax_url",
    "mermaid_js_url",
    "mermaid_layout_elk_js_url",
    "require_js_url",
    "widget_renderer_url",
    "jupyter_widgets_base_url",
)
#: largest notebook file read (bytes); nesting depth of its JSON
MAX_NOTEBOOK_BYTES = 1 << 30
MAX_JSON_DEPTH = 64

# ------------------------------------------------------------------ reading a notebook safely


def _malformed(path: object, why: str) -> NbcompileError:
    return NbcompileError(
        f"{path} is not a notebook nbcompile can render: {why}",
        code="NBC522",
        hint="render a Jupyter notebook file (nbformat 4) as Jupyter saves it",
    )


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def parse_notebook(data: bytes, name: object = "the notebook") -> Any:
    """The notebook in ``data`` (nbformat 4, validated), or NbcompileError NBC522 saying why."""
    import nbformat

    try:
        raw = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise _malformed(name, f"not JSON ({type(err).__name__})") from None
    if not isinstance(raw, dict):
        raise _malformed(name, "its JSON is not an object")
    if _depth(raw) > MAX_JSON_DEPTH:
        raise _malformed(name, f"its JSON is nested more than {MAX_JSON_DEPTH} levels deep")
    major = raw.get("nbformat")
    if type(major) is not int or major not in (3, 4):
        raise _malformed(name, f"nbformat {str(major)[:20]!r} (nbcompile reads 3 and 4)")
    minor = raw.get("nbformat_minor", 0)
    if type(minor) is not int or minor < 0:
        raise _malformed(name, f"nbformat_minor {str(minor)[:20]!r} is not a whole number")
    try:
        with warnings.catch_warnings():  # e.g. cells without ids: nbformat adds them
            warnings.simplefilter("ignore")
            nb = nbformat.reads(json.dumps(raw), as_version=4)
            nbformat.validate(nb)
    except (
        nbformat.ValidationError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        AssertionError,  # nbformat checks some fields' types with assert
        RecursionError,
    ) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise _malformed(name, first) from None
    return nb


def read_notebook(path: str | os.PathLike[str]) -> Any:
    """Read and validate the notebook at ``path`` (a regular file of at most 1 GiB)."""
    src = Path(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise _malformed(src, err.strerror or type(err).__name__) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _malformed(src, "not a regular file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > MAX_NOTEBOOK_BYTES:
            raise _malformed(src, f"{info.st_size} bytes (the limit is {MAX_NOTEBOOK_BYTES})")
        try:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
        except OSError as err:
            raise _malformed(src, err.strerror or type(err).__name__) from None
    return parse_notebook(data, src)


# ------------------------------------------------------------------------ trust and sanitising


def is_signed(nb: Any) -> bool:
    """Whether ``nb`` carries this user's Jupyter signature (``jupyter trust``)."""
    try:
        from nbformat.sign import NotebookNotary

        notary = NotebookNotary()
    except Exception:  # no signature database, unreadable secret: not trusted
        return False
    try:
        return bool(notary.check_signature(nb))
    except Exception:  # an unreadable signature database: not trusted
        return False
    finally:
        notary.close()  # its SQLite connection (Python 3.13 warns about one left open)


_ALLOWED_TAGS = frozenset(
    [
        "a",
        "abbr",
        "b",
        "blockquote",
        "br",
        "caption",
        "code",
        "col",
        "colgroup",
        "dd",
        "del",
        "details",
        "div",
        "dl",
        "dt",
        "em",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "img",
        "ins",
        "kbd",
        "li",
        "mark",
        "ol",
        "p",
        "pre",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "u",
        "ul",
        "var",
    ]
)
_ALLOWED_ATTRIBUTES = {
    "*": {"class", "id", "title", "align"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan", "scope"},
    "ol": {"start"},
    "details": {"open"},
}
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml)[;,]", re.IGNORECASE)
_INERT_BLOCKS = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
#: output MIME types kept as they are: the lab template escapes or base64-encodes them
_SAFE_MIMES = {"text/plain", "text/latex", "image/png", "image/jpeg", "image/svg+xml"}


def _allowed(tag: str, name: str, value: str) -> bool:
    if name not in _ALLOWED_ATTRIBUTES["*"] | _ALLOWED_ATTRIBUTES.get(tag, set()):
        return False
    if name == "src":  # images: inline data or a file beside the page
        url = _normal(value)
        return bool(_DATA_IMAGE.match(url)) or (_scheme(url) is None and not _remote(url))
    if name == "href":  # links: a page to open on click, never script or data
        return _scheme(_normal(value)) in (None, "http", "https", "mailto")
    if name in ("width", "height", "colspan", "rowspan", "start"):
        return value.strip().isdigit()
    return True


def sanitize_html(text: str) -> str:
    """``text`` with only inert HTML left: no script, handler, style, frame, form or remote
    resource (bleach, as nbconvert's sanitiser, with a fixed allow-list)."""
    import bleach

    return bleach.clean(
        _INERT_BLOCKS.sub("", text),
        tags=_ALLOWED_TAGS,
        attributes=_allowed,
        protocols={"http", "https", "mailto", "data"},
        strip=True,
        strip_comments=True,
    )


def sanitize_outputs(nb: Any) -> int:
    """Make the stored outputs of an untrusted notebook inert; returns the outputs changed."""
    changed = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data, before = out.get("data"), json.dumps(out, sort_keys=True, default=str)
            if isinstance(data, dict):
                for mime in list(data):
                    if mime == "text/html":
                        data[mime] = sanitize_html(_text(data[mime]))
                    elif mime != "text/markdown" and mime not in _SAFE_MIMES:
                        del data[mime]  # script, widget state, unknown renderers
            if "metadata" in out:  # the template writes width/height unquoted
                out["metadata"] = {}
            changed += json.dumps(out, sort_keys=True, default=str) != before
    return changed


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def strip_widgets(nb: Any) -> int:
    """Remove widget views/state so exporters show the HTML fallback; returns outputs changed."""
    changed = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and any(m in data for m in WIDGET_MIMES):
                for mime in WIDGET_MIMES:
                    data.pop(mime, None)
                changed += 1
    nb.metadata.pop("widgets", None)
    return changed


def execute(nb: Any, cwd: str | os.PathLike[str], timeout: int = 600) -> Any:
    from nbclient import NotebookClient

    NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    return nb


def to_html(nb: Any, *, trusted: bool = True) -> str:
    """Export with nbconvert's lab template, no CDN (no require.js, MathJax or widget manager).

    ``trusted=False`` also sanitises the HTML that markdown (cells and outputs) turns into.
    """
    from jinja2 import pass_context
    from nbconvert import HTMLExporter

    class _Exporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context: Any, source: str) -> str:
            rendered = super().markdown2html(context, source)
            return rendered if trusted else sanitize_html(rendered)

    exporter = _Exporter(template_name="lab")
    for trait in _CDN_TRAITS:
        if exporter.has_trait(trait):
            setattr(exporter, trait, "")
    body, _ = exporter.from_notebook_node(nb)
    return body


def render(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    run: bool = True,
    timeout: int = 600,
) -> Path:
    """Execute ``path`` (unless ``run=False``) and write offline-viewable HTML to ``out``.

    Without ``run`` a notebook that is not signed by this user is untrusted: its outputs and
    markdown are sanitised (see the module's trust rule). A malformed notebook raises
    NbcompileError NBC522; a page that would fetch from the network NBC523, unwritten.
    """
    src = Path(path)
    nb = read_notebook(src)
    trusted = run or is_signed(nb)
    if run:
        execute(nb, src.resolve().parent, timeout=timeout)
    strip_widgets(nb)
    if not trusted:
        sanitize_outputs(nb)
    try:
        page = to_html(nb, trusted=trusted)
    except RecursionError:
        raise _malformed(src, "its outputs are nested too deeply to export") from None
    remote = remote_references(page)
    if remote:
        raise NbcompileError(
            f"the page for {src} would fetch {len(remote)} URL(s) from the network "
            f"(first: {remote[0][:200]}); nothing was written",
            code="NBC523",
            hint="remove the remote images/styles from the notebook's outputs, or embed them",
        )
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, page)
    return target


def write_text_atomic(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` through a new temp file in its folder, then rename it.

    ``mkstemp`` creates the file exclusively (a link planted at any name is never followed);
    a target that exists and is not a regular file (device, pipe, folder) is refused, and a
    failure leaves the earlier file untouched.
    """
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.stat(target).st_mode):
            raise OSError(f"{target} exists and is not a regular file; nothing was written")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------- offline check

#: attributes whose value a browser fetches (``href`` of a link or area is a click, not a load)
_URL_ATTRIBUTES = frozenset(
    [
        "src",
        "href",
        "data",
        "action",
        "formaction",
        "poster",
        "background",
        "xlink:href",
        "manifest",
        "lowsrc",
        "dynsrc",
        "codebase",
        "archive",
        "icon",
    ]
)
_SRCSET_ATTRIBUTES = frozenset({"srcset", "imagesrcset"})
_LOCAL_SCHEMES = frozenset({"data", "about", "blob", "javascript", "mailto", "tel"})
_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[::1\])$", re.IGNORECASE)
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*):")
_REFRESH_URL = re.compile(r"url\s*=\s*['\"]?([^'\"\s;]+)", re.IGNORECASE)


def _normal(url: str) -> str:
    """As a browser reads an attribute URL: outer spaces/controls gone, tabs and newlines too."""
    return re.sub(r"[\t\n\r]", "", url).strip("\x00- ")


def _scheme(url: str) -> str | None:
    match = _SCHEME.match(url)
    return match[1].lower() if match else None


def _remote(url: str) -> bool:
    """Whether fetching ``url`` (relative to a page opened from a file) leaves the machine."""
    url = _normal(url)
    scheme = _scheme(url)
    if scheme is None:  # relative, unless it starts like //host (also with backslashes)
        return url[:2].replace("\\", "/") == "//"
    if scheme in _LOCAL_SCHEMES:
        return False
    rest = url[len(scheme) + 1 :].replace("\\", "/")
    if scheme == "file":  # file:///path is this machine; file://host/share is not
        host = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
        return host.lower() not in ("", "localhost")
    host = re.split(r"[/?#]", rest.lstrip("/"), maxsplit=1)[0].rsplit("@", 1)[-1]
    host = host if host.startswith("[") else host.split(":", 1)[0]
    return not _LOOPBACK.match(host)


def _srcset_urls(value: str) -> list[str]:
    """The URLs of a ``srcset`` (candidates separated by commas, each ``URL [descriptor]``)."""
    urls, pos, n = [], 0, len(value)
    while pos < n:
        while pos < n and value[pos] in " \t\n\r\f,":
            pos += 1
        start = pos
        while pos < n and value[pos] not in " \t\n\r\f":
            pos += 1
        url = value[start:pos]
        if not url:
            break
        if url.endswith(","):
            url = url.rstrip(",")
        else:  # skip the descriptor up to the next comma outside parentheses
            depth = 0
            while pos < n and not (value[pos] == "," and depth == 0):
                depth += {"(": 1, ")": -1 if depth else 0}.get(value[pos], 0)
                pos += 1
        urls.append(url)
    return urls


def _css_urls(css: str, *, sheet: bool = True) -> list[str]:
    """Every URL a stylesheet or ``style`` attribute loads: url(), image-set(), @import."""
    import tinycss2

    found: list[str] = []

    def walk(tokens: Any, in_url_function: bool = False) -> None:
        for token in tokens or ():
            kind = getattr(token, "type", "")
            if kind == "url" or (kind == "string" and in_url_function):
                found.append(token.value)
            elif kind == "function":
                name = token.lower_name.lstrip("-").removeprefix("webkit-")
                walk(token.arguments, name in ("url", "image-set", "image", "src", "cross-fade"))
            elif kind == "at-rule":
                walk(token.prelude, token.lower_at_keyword == "import")
                walk(token.content)
            elif kind == "qualified-rule":
                walk(token.prelude)
                walk(token.content)
            elif kind in ("() block", "[] block", "{} block"):
                walk(token.content, in_url_function)

    if sheet:
        walk(tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True))
    else:  # a style attribute: declarations
        walk(tinycss2.parse_component_value_list(css, skip_comments=True))
    return found


class _URLs(html.parser.HTMLParser):
    """Collects the URLs a page loads: attributes, ``srcset``, inline and ``<style>`` CSS,
    ``<meta http-equiv=refresh>``; comments are read as markup too (a browser may end them
    earlier than this parser does)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        tag = tag.lower()
        named = {k.lower(): v or "" for k, v in attrs}
        for name, value in ((k.lower(), v or "") for k, v in attrs):
            if name in _URL_ATTRIBUTES and not (name == "href" and tag in ("a", "area")):
                self.urls.append(value)
            elif name in _SRCSET_ATTRIBUTES:
                self.urls.extend(_srcset_urls(value))
            elif name == "style":
                self.urls.extend(_css_urls(value, sheet=False))
        if tag == "meta" and named.get("http-equiv", "").strip().lower() == "refresh":
            self.urls.extend(m[1] for m in _REFRESH_URL.finditer(named.get("content", "")))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._in_style = False

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls.extend(_css_urls(data))

    def handle_comment(self, data: str) -> None:
        self.urls.extend(_page_urls(data))

    def unknown_decl(self, data: str) -> None:
        self.urls.extend(_page_urls(data))


def _page_urls(page: str) -> list[str]:
    parser = _URLs()
    parser.feed(page)
    parser.close()
    return parser.urls


def remote_references(page: str) -> list[str]:
    """The URLs ``page`` would fetch from another machine when opened (should be none):
    anything but relative, ``data:``, ``file:`` on this machine and loopback URLs."""
    return [url for url in _page_urls(page) if _remote(url)]
