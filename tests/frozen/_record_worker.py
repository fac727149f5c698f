"""Load a good file against damaged checked-programs records, one case each, for
`_supervise.run`.

    python _record_worker.py JOB.json --from INDEX

JOB.json: ``{"model": PATH, "folder": RECORD_FOLDER, "cases": [{"id", "target", "damage",
"seed"}, ...]}``. ``target`` is ``program`` (the program's record), ``shapes`` (the record of
one input shape's first-call check) or ``key`` (the per-user key). For each case from INDEX
on, the record (or key) is replaced by a damaged one, the model is loaded (and for
``shapes``, called), and the worker prints ``START id`` then ``DONE id {json}``:

- ``load`` / ``call``: "loaded" / "ran", an NBC code, or "ESCAPED: ..." (anything but
  FreezeError);
- ``probed`` / ``lowered``: whether the probe child / first-call child ran (the record was
  ignored) or not (it was honoured);
- ``correct``: the call's output equals the live function's; ``written_here``: the model's flag;
- ``rewritten``: whether a genuine record is on disk afterwards.

The probe and first-call checks run in-process here (``NBCOMPILE_FREEZE_NO_FORK``): the file
is good, only the record is hostile, and each case then costs milliseconds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

os.environ["NBCOMPILE_FREEZE_NO_FORK"] = "1"

import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import _checked, _format, _sandbox, load

X = np.ones((2, 3), np.float32)
W = np.arange(12, dtype=np.float32).reshape(3, 4)
RUNS: list[str] = []
_COUNT = [None, True, -1, 1.5, "x", [1], 2**70 * 1.0]
#: for each field of a probe result, values that do not have its schema
NOT_OF_THE_SCHEMA: dict[str, list[Any]] = {
    "ops": _COUNT,
    "chain": _COUNT,
    "nesting": _COUNT,
    "nr_devices": _COUNT,
    "platforms": [None, 5, "cpu", [1], {"a": 1}],
    "module_attributes": [None, [], 5, {"a": 1}],
    "custom_calls": [None, 5, "x", [1], [{"target": 5}], [{"target": "x"}]],
    "refuse": [{"code": "NBC500", "message": "x"}, None],
    "error": ["x", None],
}
_real_run_isolated = _sandbox.run_isolated


def _counting(*args: Any, **kwargs: Any) -> Any:
    RUNS.append(kwargs.get("what", "probe"))
    return _real_run_isolated(*args, **kwargs)


_sandbox.run_isolated = _counting


# ---------------------------------------------------------------- damage
def _flip(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _junk(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            -1,
            0,
            2**70,
            1.5,
            float("nan"),
            "",
            "x" * 300,
            "\u202e",
            [],
            {},
            [1],
            {"a": 1},
        ]
    )


def _remac(envelope: dict[str, Any], key: bytes | None) -> bytes:
    record = {k: v for k, v in envelope.items() if k != "mac"}
    record["mac"] = _checked._mac(key or os.urandom(32), record) if key is not None else "0" * 64
    return json.dumps(record).encode()


def _damaged_bytes(genuine: bytes, damage: str, rng: random.Random, key: bytes) -> bytes:
    """The bytes of a damaged record (``damage`` names how)."""
    envelope = json.loads(genuine)
    body = envelope["body"]
    if damage == "flip":
        return _flip(genuine, rng)
    if damage == "truncate":
        return genuine[: rng.randrange(len(genuine))]
    if damage == "append":
        return genuine + rng.choice([b"x", b"{}", b"\x00", b"]", b"\xff\xfe"])
    if damage == "empty":
        return b""
    if damage == "not_utf8":
        return b"\xff" * rng.randint(1, 100)
    if damage == "whitespace":  # over the size cap
        return b" " * (_checked.MAX_RECORD_BYTES + rng.randint(0, 1000)) + genuine
    if damage == "deep":
        depth = rng.choice([1_000, 100_000, 1_000_000])
        return b"[" * depth + b"]" * depth
    if damage == "deep_body":
        envelope["body"] = json.loads("[" * 500 + "]" * 500)
        return _remac(envelope, key)
    if damage == "old_format":  # what a record looked like before: no envelope, "written_here"
        old = {**body, "written_here": True} if isinstance(body, dict) else body
        return json.dumps(old).encode()
    if damage == "foreign_key":  # written by nbcompile for another user or machine
        return _remac(envelope, os.urandom(32))
    if damage == "stale_mac":  # a field changed, the MAC left as it was
        field = rng.choice(["kind", "program_sha256", "scope", "uid", "body", "format"])
        envelope[field] = _junk(rng)
        return json.dumps(envelope).encode()
    if damage == "mac":
        envelope["mac"] = rng.choice(["", "00", "0" * 64, "é" * 64, 5, None, envelope["mac"][:-1]])
        return json.dumps(envelope).encode()
    if damage == "missing_field":
        del envelope[rng.choice(sorted(envelope))]
        return json.dumps(envelope).encode()
    if damage == "extra_field":
        envelope["written_here"] = True
        return _remac(envelope, key)
    if damage in ("other_program", "other_scope", "other_uid", "other_kind", "other_format"):
        field = {
            "other_program": ("program_sha256", "ab" * 32),
            "other_scope": ("scope", "0" * 16),
            "other_uid": ("uid", envelope["uid"] + 1),
            "other_kind": ("kind", "shapes" if envelope["kind"] == "program" else "program"),
            "other_format": ("format", "nbcompile-checked-program-0"),
        }[damage]
        envelope[field[0]] = field[1]
        return _remac(envelope, key)  # signed with this user's key, and still not this file's
    if damage == "body_types":  # signed, but not the schema of a probe result
        if isinstance(body, dict):
            name = rng.choice(sorted(NOT_OF_THE_SCHEMA))
            body[name] = rng.choice(NOT_OF_THE_SCHEMA[name])
        else:
            envelope["body"] = _junk(rng)
        return _remac(envelope, key)
    if damage == "body_shapes":  # signed, a record of other input shapes
        envelope["body"] = [[[7, 3], "float32"]]
        return _remac(envelope, key)
    if damage == "json_junk":
        return json.dumps(_junk(rng)).encode()
    raise ValueError(damage)


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _place(path: Path, damage: str, genuine: bytes, rng: random.Random, key: bytes) -> None:
    """Put a damaged entry at ``path`` (a record or the key)."""
    _clear(path)
    if damage == "missing":
        return
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "dev_zero":
        path.symlink_to("/dev/zero")
    elif damage == "symlink_to_genuine":
        other = path.with_name(path.name + ".elsewhere")
        other.write_bytes(genuine)
        path.symlink_to(other)
    elif damage == "sparse":
        with open(path, "wb") as f:
            f.truncate(3 * 2**30)
    elif damage == "folder":
        path.mkdir()
    elif damage == "other_owner":
        path.write_bytes(genuine)
        os.chown(path, 12345, 12345)
    elif damage == "readable_by_others":
        path.write_bytes(genuine)
        os.chmod(path, 0o644)
    elif damage == "wrong_size":
        path.write_bytes(genuine + b"!")
        os.chmod(path, 0o600)
    else:
        path.write_bytes(_damaged_bytes(genuine, damage, rng, key))


# ---------------------------------------------------------------- one case
class Setup:
    def __init__(self, job: dict[str, Any]) -> None:
        os.environ["NBCOMPILE_CHECKED_DIR"] = job["folder"]
        self.model = job["model"]
        data = Path(self.model).read_bytes()
        self.digest = _format.check_sections(data).program_sha256
        load(self.model)(X)  # the genuine records
        self.folder = _checked._folder()
        assert self.folder is not None
        self.program = self.folder / f"{self.digest.hex()}.json"
        (self.shapes,) = self.folder.glob("*.shapes")
        self.key = self.folder / "key"
        self.genuine = {
            "program": self.program.read_bytes(),
            "shapes": self.shapes.read_bytes(),
            "key": self.key.read_bytes(),
        }

    def restore(self) -> None:
        for name, path in (("program", self.program), ("shapes", self.shapes)):
            _clear(path)
            path.write_bytes(self.genuine[name])
        _clear(self.key)
        self.key.write_bytes(self.genuine["key"])
        os.chmod(self.key, 0o600)
        os.chmod(self.folder, 0o700)
        _checked._KEYS.clear()

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        self.restore()
        rng = random.Random(case["seed"])
        target, damage = case["target"], case["damage"]
        key = self.genuine["key"]
        if target == "folder":
            if damage == "group_writable":
                os.chmod(self.folder, 0o770)
            elif damage == "other_owner":
                os.chown(self.folder, 12345, 12345)
        elif damage != "genuine":
            path = {"program": self.program, "shapes": self.shapes, "key": self.key}[target]
            _place(path, damage, self.genuine[target], rng, key)
            if target == "key":
                _checked._KEYS.clear()  # as a new process would: read the key again
        out: dict[str, Any] = {}
        RUNS.clear()
        try:
            model = load(self.model)
            out["load"] = "loaded"
        except FreezeError as err:
            out["load"] = err.code
            out["message"] = str(err)[:300]
            model = None
        except BaseException as err:  # what the fuzz exists to catch
            out["load"] = f"ESCAPED: {type(err).__name__}: {str(err)[:200]}"
            model = None
        out["probed"] = len(RUNS) > 0
        if model is not None:
            out["written_here"] = model.metadata["written_here"]
            if case.get("call"):
                try:
                    got = np.asarray(model(X))
                    out["call"] = "ran"
                    out["correct"] = bool(np.array_equal(got, X @ W))
                except FreezeError as err:
                    out["call"] = err.code
                except BaseException as err:
                    out["call"] = f"ESCAPED: {type(err).__name__}: {str(err)[:200]}"
                out["lowered"] = len(RUNS) > int(out["probed"])
        if self.folder.exists():
            os.chmod(self.folder, 0o700)
            os.chown(self.folder, os.getuid(), os.getgid())
        out["rewritten"] = _checked.recall(self.digest) is not None
        if case.get("call"):
            out["rewritten"] = out["rewritten"] and _checked.recall_shapes(
                self.digest, [[[2, 3], "float32"]]
            )
        return out


class Planted:
    """``"mode": "plant"``: a damaged entry where a program's record lives, then a load; the
    outcome says only what any version of the record code shows (for the damaged-record
    tests): ``load``, ``probed``, and ``rewritten`` (a small regular JSON file there now)."""

    def __init__(self, job: dict[str, Any]) -> None:
        os.environ["NBCOMPILE_CHECKED_DIR"] = job["folder"]
        self.model = job["model"]
        sections = _format.check_sections(Path(self.model).read_bytes())
        self.digest = sections.program_sha256
        from nbcompile.frozen import _program

        self.probe = _program.probe(sections.program)

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        folder = _checked._folder()
        assert folder is not None
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.digest.hex()}.json"
        damage = case["damage"]
        if damage in ("fifo", "dev_zero", "sparse", "folder"):
            _place(path, damage, b"", random.Random(0), b"")
        else:
            _clear(path)
            body = dict(self.probe)
            if damage == "old_format_written_here":
                body["written_here"] = True
            elif damage == "missing_keys":
                body = {"ops": body["ops"]}
            elif damage == "wrong_types":
                body["ops"] = "many"
            path.write_text(json.dumps(body))
        out: dict[str, Any] = {}
        RUNS.clear()
        try:
            model = load(self.model)
            out["load"] = "loaded"
            out["written_here"] = model.metadata["written_here"]
        except FreezeError as err:
            out["load"] = err.code
        except BaseException as err:
            out["load"] = f"ESCAPED: {type(err).__name__}: {str(err)[:200]}"
        out["probed"] = len(RUNS) > 0
        try:
            info = os.lstat(path)
            small = stat.S_ISREG(info.st_mode) and info.st_size < 2**20
            out["rewritten"] = small and isinstance(json.loads(path.read_text()), dict)
        except (OSError, ValueError):
            out["rewritten"] = False
        return out


def main(argv: list[str]) -> None:
    job = json.loads(Path(argv[0]).read_text())
    start = int(argv[argv.index("--from") + 1])
    setup = Planted(job) if job.get("mode") == "plant" else Setup(job)
    for case in job["cases"][start:]:
        print(f"START {case['id']}", flush=True)
        print(f"DONE {case['id']} {json.dumps(setup.run(case))}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
