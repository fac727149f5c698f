"""`nbcompile render` of a downloaded notebook (issue 29, item 6): Jupyter's trust rule.

A notebook rendered without executing it, and not signed by this user, is untrusted: no
script from its outputs or markdown may run when the page is opened, nothing may be fetched
from the network, and the page is written through a fresh temp file (a planted link is never
followed). These tests export without a kernel (``--no-execute``)."""

from __future__ import annotations

import html.parser
import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from nbcompile import cli
from nbcompile.render import remote_references, render, sanitize_html

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

#: the attacker's notebook: script in markdown, HTML, markdown and JavaScript outputs, event
#: handlers, javascript: links, an unquoted-attribute injection through image metadata, and
#: remote resources in the three forms the old regex missed
MARKDOWN = (
    "# Results\n\n<img src=x onerror=\"alert('md-img')\"> <script>alert('md-script')</script>\n\n"
    "[docs](https://jax.readthedocs.io) <a href=\"javascript:alert('md-link')\">x</a>\n\n"
    '<IMG SRC="HTTP://evil.example/pixel.png"> <svg onload="alert(\'md-svg\')"></svg>\n\n'
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n> a quote with `a<b`"
)
HOSTILE_HTML = (
    "<b>table</b><script>alert('out-script')</script>"
    "<img srcset='http://evil.example/a.png 1x'>"
    "<div style='background:url(http://evil.example/b.png)'>styled</div>"
    "<iframe src='http://evil.example/frame'></iframe>"
    "<details><summary>more</summary><img src='data:image/png;base64," + PNG + "' alt='ok'>"
    "</details><form action='http://evil.example/'><input onfocus=\"alert('form')\"></form>"
)


def _hostile() -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_markdown_cell(MARKDOWN),
            new_code_cell(
                "show()",
                outputs=[
                    new_output(
                        "display_data",
                        data={
                            "text/html": HOSTILE_HTML,
                            "application/javascript": "alert('out-js')",
                            "text/plain": "a view",
                        },
                    ),
                    new_output(
                        "display_data",
                        data={
                            "image/png": PNG,
                            "text/markdown": "<img src=y onerror=\"alert('out-md')\">**bold**",
                        },
                        metadata={"image/png": {"width": "1 onerror=alert('width')"}},
                    ),
                    new_output(
                        "execute_result",
                        data={"text/plain": "<script>alert('plain')</script>"},
                        execution_count=1,
                    ),
                ],
            ),
        ]
    )


class _Page(html.parser.HTMLParser):
    """What could run in a page: script elements, on* handlers, javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.handlers: list[str] = []
        self.js_urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(f"{tag} {name}={value}")
            if (value or "").strip().lower().startswith("javascript:"):
                self.js_urls.append(f"{tag} {name}={value}")

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


def _page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture
def no_signatures(tmp_path: Path, monkeypatch) -> Path:
    """A Jupyter data folder of this test only (its own signature secret and database)."""
    data = tmp_path / "jupyter-data"
    data.mkdir()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    return data


def test_an_untrusted_notebook_renders_inert(tmp_path: Path, no_signatures: Path) -> None:
    nb_path, out = tmp_path / "downloaded.ipynb", tmp_path / "page.html"
    nbformat.write(_hostile(), nb_path)
    render(nb_path, out, run=False)
    text = out.read_text()
    page, baseline = _page(text), _page(_plain_page(tmp_path))
    assert "alert(" not in "".join(page.scripts), page.scripts
    assert page.scripts == baseline.scripts  # only the template's own scripts
    assert page.handlers == [] and page.js_urls == [], (page.handlers, page.js_urls)
    assert "<iframe" not in text.split("</style>")[-1] and "<form" not in text
    assert remote_references(text) == [] and "evil.example" not in text
    # what is inert survives: headings, tables, quotes, data: images, links, markdown
    for kept in ('<h1 id="Results"', "<table>", "<blockquote>", "<details>", "<b>table</b>"):
        assert kept in text, kept
    assert f'src="data:image/png;base64,{PNG}"' in text and "<strong>bold</strong>" in text
    assert 'href="https://jax.readthedocs.io"' in text
    assert "&lt;script&gt;alert('plain')" in text  # text/plain is shown as text


def _plain_page(tmp_path: Path) -> str:
    path, out = tmp_path / "plain.ipynb", tmp_path / "plain.html"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# plain")]), path)
    render(path, out, run=False)
    return out.read_text()


def test_a_notebook_signed_by_this_user_is_trusted(tmp_path: Path, no_signatures: Path) -> None:
    from nbformat.sign import NotebookNotary

    nb = new_notebook(
        cells=[
            new_code_cell(
                "x",
                outputs=[
                    new_output(
                        "display_data",
                        data={"text/html": "<script>window.trusted = 1</script><b>mine</b>"},
                    )
                ],
            )
        ]
    )
    notary = NotebookNotary()
    notary.sign(nb)
    notary.close()
    path, out = tmp_path / "mine.ipynb", tmp_path / "mine.html"
    nbformat.write(nb, path)
    render(path, out, run=False)
    assert "window.trusted = 1" in "".join(_page(out.read_text()).scripts)


def test_remote_references_parse_what_a_browser_fetches() -> None:
    remote = {
        '<IMG SRC="HTTP://e.example/a">': "HTTP://e.example/a",
        "<img srcset='a.png 1x, http://e.example/b.png 2x'>": "http://e.example/b.png",
        "<div style='background:URL(http://e.example/c)'>": "http://e.example/c",
        "<style>@import 'http://e.example/d.css';</style>": "http://e.example/d.css",
        r"<style>a{background:\75 rl(http://e.example/e)}</style>": "http://e.example/e",
        "<style>b{background:image-set('//e.example/f' 1x)}</style>": "//e.example/f",
        "<img/src=//e.example/g>": "//e.example/g",
        "<!-- --!><img src=http://e.example/h> -->": "http://e.example/h",
        "<link rel=stylesheet href=https://e.example/i.css>": "https://e.example/i.css",
        "<meta http-equiv=refresh content='0;url=http://e.example/j'>": "http://e.example/j",
        "<svg><image xlink:href='http://e.example/k'/></svg>": "http://e.example/k",
        "<img src='http:e.example/l'>": "http:e.example/l",
        "<img src=' ht\ttp://e.example/m'>": " ht\ttp://e.example/m",
        "<video poster=http://e.example/n>": "http://e.example/n",
        "<object data=http://e.example/o>": "http://e.example/o",
        "<img src='\\\\e.example\\p'>": "\\\\e.example\\p",
        "<img src='file://e.example/share/q'>": "file://e.example/share/q",
    }
    for page, url in remote.items():
        assert remote_references(page) == [url], page
    local = [
        '<a href="https://e.example/">a link is a click, not a load</a>',
        "<img src='data:image/png;base64,AAAA'>",
        "<img src='figures/local.png'>",
        "<img src='http://localhost:8000/x.png'><img src='http://127.0.0.1/y'>",
        "<img src='#frag'><img src='file:///tmp/z.png'>",
        "<script>var svg = 'http://www.w3.org/2000/svg';</script>",
    ]
    for page in local:
        assert remote_references(page) == [], page


def test_sanitize_keeps_only_inert_markup() -> None:
    clean = sanitize_html(
        "<a href='javascript:alert(1)'>j</a><a href='data:text/html,x'>d</a>"
        "<img src='data:text/html;base64,AA'><img src='x' onerror='alert(1)'>"
        "<td colspan='2 onclick=alert(1)'>c</td><p style='color:red'>s</p>"
    )
    assert (
        "javascript" not in clean
        and "data:text" not in clean
        and "on" not in clean.replace("onclick", "X").replace("onerror", "X")
    )
    assert "alert" not in clean and "style" not in clean


def test_a_planted_link_at_the_old_temp_name_is_not_followed(
    tmp_path: Path, no_signatures: Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "page.html.tmp").symlink_to(precious)
    (tmp_path / ".page.html.tmp").symlink_to(precious)
    nb = tmp_path / "n.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# hi")]), nb)
    assert cli.main(["render", str(nb), "-o", str(tmp_path / "page.html"), "--no-execute"]) == 0
    assert precious.read_text() == "keep me"
    assert "<h1" in (tmp_path / "page.html").read_text()
    leftovers = {p.name for p in tmp_path.iterdir()} - {
        "precious.txt",
        "page.html.tmp",
        ".page.html.tmp",
        "n.ipynb",
        "page.html",
        "jupyter-data",
    }
    assert leftovers == set()


def test_a_page_that_would_fetch_is_not_written(tmp_path: Path, capsys, monkeypatch) -> None:
    """A trusted (signed/executed) notebook may hold anything; the offline check still holds."""
    monkeypatch.setattr("nbcompile.render.is_signed", lambda nb: True)
    nb = new_notebook(
        cells=[
            new_code_cell(
                "x",
                outputs=[new_output("display_data", data={"text/html": "<IMG SRC=HTTP://e.x/a>"})],
            )
        ]
    )
    path, out = tmp_path / "n.ipynb", tmp_path / "o.html"
    nbformat.write(nb, path)
    assert cli.main(["render", str(path), "-o", str(out), "--no-execute"]) == 1
    err = capsys.readouterr().err
    assert "[NBC523]" in err and "HTTP://e.x/a" in err and not out.exists()


def test_output_to_a_device_is_refused(tmp_path: Path, no_signatures: Path) -> None:
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    nb = tmp_path / "n.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# hi")]), nb)
    with pytest.raises(OSError, match="not a regular file"):
        render(nb, fifo, run=False)
    assert fifo.is_fifo()
