"""Fuzz of the checked-programs record (nbcompile/frozen/_checked.py): a good small file loaded
against 1,200 damaged records, keys and record folders, in one supervised child (time, memory
and signals watched per case; `_record_worker.py`).

Every case must end in one of two ways: the record is ignored (the probe, or the first-call
check, runs and the file loads and computes the right answer, and a genuine record is written
again), or it is honoured, and then only when it is genuinely this file's and this user's (the
undamaged record). Never a crash, a hang, a memory blow-up or an exception other than
FreezeError; and a record never makes a model ``written_here``.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest

from ..helpers import freeze_small_matmul
from . import _supervise

CASES = 1_200
MEMORY_LIMIT = 3 * 2**30
ITEM_SECONDS = 60.0
ROOT_ONLY = {"other_owner"}

CONTENT = [
    "flip",
    "truncate",
    "append",
    "empty",
    "not_utf8",
    "whitespace",
    "deep",
    "deep_body",
    "old_format",
    "foreign_key",
    "stale_mac",
    "mac",
    "missing_field",
    "extra_field",
    "other_program",
    "other_scope",
    "other_uid",
    "other_kind",
    "other_format",
    "body_types",
    "json_junk",
]
ENTRY = ["missing", "fifo", "dev_zero", "symlink_to_genuine", "sparse", "folder", "other_owner"]
KEY = [*ENTRY, "readable_by_others", "wrong_size"]
DAMAGES = {
    "program": ["genuine", *CONTENT, *ENTRY],
    "shapes": ["genuine", *CONTENT, "body_shapes", *ENTRY],
    "key": KEY,
    "folder": ["group_writable", "other_owner"],
}


def cases(n: int) -> list[dict]:
    """``n`` cases, every (target, damage) pair in turn, each with its own seed."""
    root = hasattr(os, "getuid") and os.getuid() == 0
    pairs = [
        (target, damage)
        for target, damages in DAMAGES.items()
        for damage in damages
        if root or damage not in ROOT_ONLY
    ]
    out = []
    for i, (target, damage) in zip(range(n), itertools.cycle(pairs), strict=False):
        out.append(
            {
                "id": f"{i:04d}-{target}-{damage}",
                "target": target,
                "damage": damage,
                "seed": i,
                "call": target == "shapes",
            }
        )
    return out


def problems(case: dict, got: dict) -> list[str]:
    """What is wrong with one case's outcome (empty: answered as it must be)."""
    if "load" not in got:
        return [f"the child {got.get('outcome')}"]
    wrong = []
    if got["load"] != "loaded":
        wrong.append(f"load: {got['load']} {got.get('message', '')}")
    if got.get("written_here"):
        wrong.append("a record made the model written_here")
    genuine = case["damage"] == "genuine"
    if case["target"] == "shapes":
        if got.get("probed"):
            wrong.append("the program record was not honoured")
        if got.get("call") != "ran" or not got.get("correct"):
            wrong.append(f"call: {got.get('call')}, correct: {got.get('correct')}")
        if got.get("lowered") is genuine:
            wrong.append(f"first-call check ran: {got.get('lowered')}")
    elif got.get("probed") is genuine:
        wrong.append(f"probed: {got.get('probed')}")
    unrewritable = case["damage"] == "folder"
    if case["target"] != "folder" and got.get("rewritten") is unrewritable:
        wrong.append(f"a genuine record on disk afterwards: {got.get('rewritten')}")
    return wrong


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("record-fuzz") / "small.nbc"
    return freeze_small_matmul(path)


def run_fuzz(small_file: Path, n: int) -> tuple[list[dict], dict]:
    todo = cases(n)
    with tempfile.TemporaryDirectory(prefix="nbc-record-fuzz-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(
            json.dumps({"model": str(small_file), "folder": f"{tmp}/records", "cases": todo})
        )
        results = _supervise.run(
            "_record_worker.py",
            [c["id"] for c in todo],
            [str(job)],
            item_seconds=ITEM_SECONDS,
            memory_bytes=MEMORY_LIMIT,
        )
    return todo, results


def test_every_damaged_record_is_ignored_or_genuine(small_file: Path) -> None:
    todo, results = run_fuzz(small_file, CASES)
    wrong = {
        c["id"]: p
        for c in todo
        if (p := problems(c, results.get(c["id"], {"outcome": "gave no answer"})))
    }
    assert not wrong, json.dumps(dict(itertools.islice(wrong.items(), 30)), indent=1)
    assert len(results) == CASES
