"""Browser fixtures: one JupyterLab and one Jupyter Notebook 7 server per session, Debian's
Chromium, no network.

Follows /work/shared/TESTING.md: the servers on 127.0.0.1 with every config dir in a temp folder,
Playwright driving /usr/bin/chromium, every page failing its test on any non-loopback request.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from .helpers import kernel_env

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
LOCAL_SCHEMES = {"file", "data", "blob", "about", "chrome-error"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ui/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.ui)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path_factory: pytest.TempPathFactory, app: str) -> Iterator[dict]:
    """A JupyterLab ("lab") or Jupyter Notebook 7 ("notebook") server on 127.0.0.1 serving a
    temp folder, every config dir inside it: {"url", "root", "app", "open"(name) -> URL}."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp(app)
    root = tmp / "notebooks"
    root.mkdir()
    settings = tmp / "settings"
    for plugin, values in {
        "@jupyterlab/apputils-extension/notification": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = kernel_env(tmp)
    env.update(
        {
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "JUPYTER_PLATFORM_DIRS": "1",
        }
    )
    port = _free_port()
    common = [
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        "--ServerApp.allow_root=True",
        f"--ServerApp.root_dir={root}",
    ]
    if app == "lab":
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            *common,
            "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",
        ]
    else:  # Jupyter Notebook 7: JupyterLab's components, one document per page
        cmd = [
            sys.executable,
            "-m",
            "notebook",
            *common,
            "--JupyterNotebookApp.expose_app_in_browser=True",
        ]
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/api/status", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{app} did not start:\n" + (tmp / "server.log").read_text()[-3000:]
                    ) from None
                time.sleep(0.3)
        where = "lab/tree" if app == "lab" else "notebooks"
        yield {
            "url": url,
            "root": root,
            "app": app,
            "open": lambda name: f"{url}/{where}/{name}" + ("?reset" if app == "lab" else ""),
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A JupyterLab server on 127.0.0.1 serving a temp folder: {"url", "root", ...}."""
    yield from _serve(tmp_path_factory, "lab")


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A Jupyter Notebook 7 server on 127.0.0.1 serving a temp folder."""
    yield from _serve(tmp_path_factory, "notebook")


@pytest.fixture(params=["lab", "notebook"])
def host(request) -> Iterator[dict]:
    """Each host the README claims, with its kernel sessions shut down after the test."""
    server = request.getfixturevalue("lab" if request.param == "lab" else "notebook7")
    yield server
    _shutdown_sessions(server)


@pytest.fixture(scope="session")
def chromium() -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def _is_local(url: str) -> bool:
    u = urlparse(url)
    return u.scheme in LOCAL_SCHEMES or (u.hostname or "") in LOCAL_HOSTS


@pytest.fixture
def ui_page(chromium) -> Iterator:
    """A fresh page; the test fails if the page asks for anything off this machine."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    outside: list[str] = []
    errors: list[str] = []

    def guard(route) -> None:
        if _is_local(route.request.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("request", lambda r: None if _is_local(r.url) else outside.append(r.url))
    page.on("websocket", lambda ws: None if _is_local(ws.url) else outside.append(ws.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(20_000)
    page.outside_requests = outside
    page.page_errors = errors
    yield page
    context.close()
    assert not outside, f"the page requested non-loopback URLs: {sorted(set(outside))[:5]}"
    assert not [e for e in errors if "nbc" in e.lower() or "nbcompile" in e.lower()], errors


def _shutdown_sessions(lab: dict) -> None:
    import json
    import urllib.request

    with urllib.request.urlopen(lab["url"] + "/api/sessions", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{lab['url']}/api/sessions/{s['id']}", method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture
def lab_session(lab):
    """The shared JupyterLab, with every kernel session shut down after the test."""
    yield lab
    _shutdown_sessions(lab)
