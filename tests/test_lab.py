"""`make lab` starts JupyterLab on notebooks/ (HTTP 200 on 127.0.0.1), and stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.kernel


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_the_tutorials(tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    args = "--no-browser --IdentityProvider.token= --ServerApp.password= --LabApp.news_url=None"
    proc = subprocess.Popen(
        ["make", "-s", "lab", f"PORT={port}", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/contents/01_quickstart.ipynb?content=0", timeout=5
                ) as r:
                    assert r.status == 200
                    assert b'"name": "01_quickstart.ipynb"' in r.read().replace(b'":"', b'": "')
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=5) as r:
                    assert r.status == 200
                url = (
                    f"http://127.0.0.1:{port}/lab/api/settings/"
                    "@jupyter-widgets/jupyterlab-manager:plugin"
                )
                with urllib.request.urlopen(url, timeout=5) as r:
                    # make lab saves widget state with notebooks (the live view survives reopen)
                    body = json.load(r)
                    assert body["schema"]["properties"]["saveState"]["default"] is True, body
                break
            except OSError:
                assert proc.poll() is None, "make lab exited"
                assert time.monotonic() < deadline, "JupyterLab did not answer in 180 s"
                time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
