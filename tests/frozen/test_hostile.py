"""The hostile-file corpus (tests/frozen/_hostile.py): every file is refused with an NBC code or
loads, runs and refuses differentiation, in a child process with a time and memory limit,
with no death by signal, hang or exception other than FreezeError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import _hostile, _supervise

#: a child using more than this is killed and the case fails ("memory")
MEMORY_LIMIT = 3 * 2**30
ITEM_SECONDS = 60.0


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, mlp_file: Path):
    folder = tmp_path_factory.mktemp("hostile")
    cases = _hostile.build(folder, mlp_file)
    groups = [[c for c in cases if not c.fresh]] + [[c] for c in cases if c.fresh]
    results: dict[str, dict] = {}
    for i, group in enumerate(groups):
        job = folder / f"job{i}.json"
        job.write_text(json.dumps({"cases": [c.job() for c in group]}))
        results.update(
            _supervise.run(
                "_hostile_worker.py",
                [c.id for c in group],
                [str(job)],
                item_seconds=ITEM_SECONDS,
                memory_bytes=MEMORY_LIMIT,
            )
        )
    return cases, results


def test_every_hostile_file_is_answered_safely(outcomes) -> None:
    cases, results = outcomes
    wrong = {}
    for case in cases:
        got = results.get(case.id, {"outcome": "no answer"})
        if "load" not in got:
            wrong[case.id] = got  # hang, memory, signal, exit
            continue
        expected = {"load": case.load}
        if got["load"] == "loaded":
            expected["call"] = case.call or {"ran"}
            if case.grad and got.get("call") == "ran":
                expected["grad"] = case.grad
        bad = {k: (got.get(k), sorted(v)) for k, v in expected.items() if got.get(k) not in v}
        if case.seconds is not None and got["load_seconds"] > case.seconds:
            bad["load_seconds"] = (got["load_seconds"], case.seconds)
        if bad:
            wrong[case.id] = {**bad, "message": got.get("message", "")}
    assert not wrong, json.dumps(wrong, indent=1)


def test_the_corpus_covers_every_class(outcomes) -> None:
    cases, results = outcomes
    ids = {c.id for c in cases}
    for needed in (
        "fifo",
        "directory",
        "symlink_loop",
        "proc_self_environ",
        "sparse_6gb_zeros",
        "sparse_1tb",
        "getrf_512x512_declares_1x1",
        "getrf_8x8_declares_1x1",
        "trsm_side_attribute_lies",
        "vjp_program_carried",
        "lapack_manifest_says_none",
        "output_8gb_budget_1gb",
        "temp_128mb_budget_64mb",
        "chain_12000",
        "ops_100001",
        "nesting_80",
        "main_missing",
        "platform_not_utf8",
        "input_keys_two_types",
    ):
        assert needed in ids, needed
    # the controls really ran: a corpus that refuses everything would prove nothing
    for control in ("mlp_control", "lapack_genuine", "chain_50_control"):
        assert results[control].get("call") == "ran", results[control]
