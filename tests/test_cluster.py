"""``%%compile`` under multi-controller JAX: ``nbcompile.cluster(2)`` starts two ipyparallel
engines, each a JAX process (CPU, gloo collectives), and cells run on both as under ``%%px``.

Two clusters in all (each start-up costs CPU): one for a program sharded across the processes
(same value on both, ``c.processes``, a collective crossing processes, the views), a program
that differs on process 1 (NBC800 on both, naming the line) and ``--profile`` side by side
while a host callback makes process 1 late; one for a process that dies during a compile (NBC801 on
the other within the stated wait). Every wait is bounded and the engines are always stopped.
The first tests need no cluster: the fingerprint comparison, ``crosses_processes`` on HLO text,
the side-by-side profiles from summaries, and one process recording no processes.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

ipp = pytest.importorskip("ipyparallel")

import nbcompile  # noqa: E402


def cluster(test: Any) -> Any:
    """Starts engines like a kernel test starts kernels: ``cluster`` and ``kernel`` marks
    (``make test-fast`` leaves both out)."""
    return pytest.mark.kernel(pytest.mark.cluster(test))


WAIT = 20  # seconds a process waits for the others (NBCOMPILE_PROCESS_TIMEOUT on the engines)

SETUP = """
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("data",))
local = np.arange(8, dtype=np.float32).reshape(2, 4) + 10.0 * jax.process_index()
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local)
"""

#: runs a %%compile cell on an engine, keeping the outcome in plain names the test pulls
COMPILE = """
outcome = None
try:
    get_ipython().run_cell_magic("compile", {line!r}, {cell!r})
    outcome = "ok"
except Exception as exc:
    outcome = {{"code": getattr(exc, "code", None), "line": getattr(exc, "line", None),
                "text": str(exc)}}
"""


def px(rc: Any, code: str, timeout: float = 120) -> None:
    """Run ``code`` on every engine (``%%px``), waiting at most ``timeout`` seconds."""
    rc[:].execute(textwrap.dedent(code), block=False).get(timeout=timeout)


def compile_everywhere(rc: Any, cell: str, line: str = "", timeout: float = 120) -> list[Any]:
    px(rc, COMPILE.format(line=line, cell=textwrap.dedent(cell)), timeout)
    return rc[:].pull("outcome", block=False).get(timeout=30)


def stop(rc: Any) -> None:
    """End the engines at once (alone, stopping the cluster waits 5 s for them, then kills
    them), then the controller."""
    try:
        rc.shutdown(targets="all", block=False)  # a dead engine would never reply
        deadline = time.monotonic() + 10
        while rc.ids and time.monotonic() < deadline:  # the engines unregister as they end
            time.sleep(0.2)
    finally:
        rc.cluster.stop_cluster_sync()


def pull(rc: Any, expr: str) -> list[Any]:
    px(rc, f"_pulled = {expr}")
    return rc[:].pull("_pulled", block=False).get(timeout=30)


@dataclass
class FakeDevice:
    id: int
    process_index: int


ALL_REDUCE_HLO = """HloModule jit_loss, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main.0_spmd (x: f32[2,4]) -> f32[] {
  %x = f32[2,4]{1,0} parameter(0)
  %c = f32[] constant(0)
  %r = f32[] reduce(%x, %c), dimensions={0,1}, to_apply=%add
  ROOT %all-reduce = f32[] all-reduce(%r), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
}
"""


@pytest.mark.parametrize(("owners", "crosses"), [([0, 0, 1, 1], False), ([0, 1, 0, 1], True)])
def test_crosses_processes_from_the_devices_processes(owners: list[int], crosses: bool) -> None:
    from nbcompile.targets import collectives

    devices = [FakeDevice(i, p) for i, p in enumerate(owners)]
    (found,) = collectives(ALL_REDUCE_HLO, devices)
    assert found.crosses_processes is crosses and found["crosses_processes"] is crosses
    assert found.op == "all-reduce"
    with pytest.raises(AttributeError):
        found.no_such_field  # noqa: B018
    assert collectives(ALL_REDUCE_HLO)[0].crosses_processes is None  # devices unknown


def test_differing_programs_name_the_processes_and_the_first_line() -> None:
    from nbcompile.capture.source import SourceInfo
    from nbcompile.errors import NbcompileError
    from nbcompile.processes._agree import _check_same

    source = SourceInfo(
        filename="<cell>",
        text="%%compile\ndef f(x):\n    x = g(x)\n    return x.sum()\nf(x)",
    )
    same = {"line 3": [3, "a"], "line 4": [4, "b"]}
    ref = {"digest": "d0", "lines": same}
    other = {"digest": "d1", "lines": {"line 3": [3, "z"], "line 4": [4, "y"]}}
    _check_same(source, [ref, dict(ref)])  # one program: nothing raised
    with pytest.raises(NbcompileError) as err:
        _check_same(source, [ref, dict(ref), other])
    assert err.value.code == "NBC800" and err.value.line == 3
    assert "process 2 compiles" in str(err.value) and "x = g(x)" in str(err.value)
    assert "process 1" not in str(err.value)
    with pytest.raises(NbcompileError) as err:  # same lines, other constants: no line named
        _check_same(source, [ref, {"digest": "d2", "lines": same}])
    assert err.value.code == "NBC800" and err.value.line is None


def test_profiles_side_by_side_name_the_slowest_process_and_each_kernels_spread() -> None:
    from nbcompile.processes._profiles import side_by_side

    def summary(own: float, wait: float) -> dict[str, Any]:
        kernels = {"fusion": ["fusion", own], "all-reduce": ["all-reduce", wait]}
        return {"calls": 10, "step": own + wait, "kernels": kernels, "own": own, "collective": wait}

    got = side_by_side([summary(0.04, 0.06), summary(0.08, 0.02)], ["a", "b"], {"all-reduce"})
    assert got.slowest == 1
    assert [p.host for p in got.processes] == ["a", "b"]
    fusion, reduce = got.kernel("fusion"), got.kernel("all-reduce")
    assert fusion.seconds == (0.04, 0.08) and fusion.slowest == 1
    assert fusion.ratio == pytest.approx(2.0) and fusion.spread_seconds == pytest.approx(0.04)
    assert reduce.crosses_processes and reduce.slowest == 0 and not fusion.crosses_processes
    assert got.kernels[0].name == "fusion"  # the longest on any process first
    text = got.text()
    assert "← slowest" in text.splitlines()[3] and "all-reduce ⇄" in text
    assert got.to_json()["slowest"] == 1 and got.to_json()["kernels"][0]["ratio"] == 2.0
    # late between its kernels, not in them (a busy thread delaying dispatch): the others wait
    late = side_by_side([summary(0.05, 0.06), summary(0.04, 0.01)], ["a", "b"], {"all-reduce"})
    assert late.slowest == 1


FINGERPRINT_CHILD = """
import json, jax, jax.numpy as jnp, nbcompile
from nbcompile.processes import fingerprint

@jax.custom_vjp
def double(x):
    return x * 2.0

double.defvjp(lambda x: (double(x), None), lambda r, g: (g * 2.0,))

def loss(x):
    y = jax.nn.relu(x) + jax.nn.softmax(x)
    y = jax.checkpoint(jnp.sin)(y) + double(y)
    return jax.nn.logsumexp(y * 3.0)

c = nbcompile.compile(loss, jnp.ones(4))
print(json.dumps(fingerprint(c.stages, c.source)))
"""


def test_fingerprints_are_the_same_in_separate_processes() -> None:
    """No object address (custom_vjp keeps a function as a parameter) or per-process string
    hash order gets into a fingerprint: two processes agree on the same program."""
    from tests.helpers import child_json

    first, second = (
        child_json(["-c", FINGERPRINT_CHILD], env={"PYTHONHASHSEED": seed}) for seed in "12"
    )
    assert first == second
    assert len(first["lines"]) >= 3  # per cell line, not one digest for everything


def test_one_process_records_no_processes_and_cluster_checks_its_count() -> None:
    import jax.numpy as jnp

    c = nbcompile.compile(lambda x: (x * 2.0).sum(), jnp.ones(3))
    assert c.processes == ()
    with pytest.raises(nbcompile.NbcompileError) as err:
        nbcompile.cluster(0)
    assert err.value.code == "NBC803"


def test_a_jaxlib_whose_collectives_hang_in_engines_is_refused(monkeypatch) -> None:
    """jaxlib 0.12.1: the first program across processes never returns in an IPython kernel
    (ipyparallel engines, plain jupyter kernels; plain jax.jit, no nbcompile), while the same
    program in plain Python processes returns at once. cluster() refuses such a jaxlib before
    starting anything, naming it and the version that works; the variable lets one try anyway."""
    import jax

    from nbcompile import processes

    monkeypatch.setattr(processes._cluster, "HANGING_JAXLIBS", {jax.lib.__version__})
    monkeypatch.delenv(processes.TRY_ANYWAY_ENV, raising=False)
    started = []
    monkeypatch.setattr(ipp, "Cluster", lambda *a, **k: started.append(a) or 1 / 0)
    with pytest.raises(nbcompile.NbcompileError) as err:
        nbcompile.cluster(2)
    assert err.value.code == "NBC803" and not started
    assert f"jaxlib {jax.lib.__version__}" in str(err.value)
    assert "0.12.0.1" in err.value.hint
    assert processes.collectives_hang() == jax.lib.__version__
    monkeypatch.setenv(processes.TRY_ANYWAY_ENV, "1")
    assert processes.collectives_hang() is None
    monkeypatch.setattr(processes._cluster, "HANGING_JAXLIBS", set())
    monkeypatch.delenv(processes.TRY_ANYWAY_ENV)
    assert processes.collectives_hang() is None


@pytest.fixture(scope="module")
def rc() -> Iterator[Any]:
    # As in the full suite (and a notebook): an IPython shell exists in the client's process.
    # ipyparallel's client then hands the engines' comm messages to that shell, so an engine
    # that opened a widget comm broke the client's output dispatch (no result ever shown).
    from IPython.terminal.interactiveshell import TerminalInteractiveShell

    TerminalInteractiveShell.instance()
    client = nbcompile.cluster(2, timeout=WAIT)
    try:
        px(client, SETUP)
        yield client
    finally:
        stop(client)


LOSS = """
def loss(x):
    return (x**2).mean()

loss(batch)
"""


@cluster
def test_cluster_engines_are_jax_processes(rc: Any) -> None:
    got = pull(rc, "(jax.process_index(), jax.process_count(), jax.device_count())")
    assert sorted(tuple(g) for g in got) == [(0, 2, 2), (1, 2, 2)]


@cluster
def test_compile_on_every_process_same_value_and_processes(rc: Any) -> None:
    # the cell as %%px sends it: every engine runs `%%compile` itself
    reply = rc[:].execute("%%compile\n" + LOSS, silent=False, block=False)
    reply.get(timeout=120)
    assert reply.wait_for_output(timeout=60)  # the shown result comes apart from the reply
    shown = [r.data.get("text/plain", "") for r in reply.get(timeout=1)]
    assert "process 1" in shown[0] and "of 2" in shown[1]
    values = pull(rc, "float(loss(batch))")
    expected = float(sum(v * v for p in (0, 1) for v in [x + 10.0 * p for x in range(8)]) / 16.0)
    assert values == [pytest.approx(expected)] * 2
    bound = pull(rc, "hasattr(loss, 'compilation')")
    assert bound == [True, True]
    assert pull(rc, "'processes' in nbcompile.last().timings") == [True, True]
    facts = pull(
        rc,
        "[(p.index, p.host, p.devices, p.fingerprint) for p in nbcompile.last().processes]",
    )
    assert facts[0] == facts[1]
    assert [f[0] for f in facts[0]] == [0, 1]
    assert len({f[3] for f in facts[0]}) == 1  # one program: one fingerprint
    assert all(len(f[2]) == 1 for f in facts[0])  # each process addresses its one CPU
    crossing = pull(rc, "[(c.op, c.crosses_processes) for c in nbcompile.last().collectives]")
    for per_process in crossing:
        assert any(op == "all-reduce" and crosses for op, crosses in per_process)


@cluster
def test_view_on_process_0_one_line_elsewhere(rc: Any) -> None:
    compile_everywhere(rc, LOSS)
    views = pull(rc, "repr(nbcompile.last())")
    assert "process 0" in views[0] and "process 1" in views[0]
    assert "crosses processes 0, 1" in views[0]
    assert "all-reduce" in views[0]
    assert len(views[1].splitlines()) == 1
    assert "process 1 of 2" in views[1] and "view is on process 0" in views[1]
    mime = pull(rc, "sorted(nbcompile.last()._repr_mimebundle_())")
    # no widget is made on an engine at all (its comm could not reach the page)
    assert pull(rc, "getattr(nbcompile.last()._shown, 'view', None) is None") == [True, True]
    assert mime[1] == ["text/plain"]
    assert "text/html" in mime[0]  # the self-contained view: an engine's widget cannot follow
    assert not [m for m in mime[0] if "widget" in m]


@cluster
def test_program_that_differs_on_one_process_is_refused_on_every_process(rc: Any) -> None:
    cell = """
    def rank_loss(x):
        if jax.process_index() == 1: x = x * 2.0
        return (x**2).mean()

    rank_loss(batch)
    """
    start = time.monotonic()
    outcomes = compile_everywhere(rc, cell, timeout=60)
    assert time.monotonic() - start < 60
    for outcome in outcomes:
        assert isinstance(outcome, dict), outcomes
        assert outcome["code"] == "NBC800", outcome
        assert outcome["line"] == 4  # the visible cell line (the %%compile line is line 1)
        assert "process 1" in outcome["text"]
        assert "x = x * 2.0" in outcome["text"]
    assert pull(rc, "'rank_loss' in dir() and hasattr(rank_loss, 'compilation')") == [
        False,
        False,
    ]
    # the processes still work together afterwards (fresh keys for the next compile)
    assert compile_everywhere(rc, LOSS) == ["ok", "ok"]


@cluster
def test_a_cell_that_failed_on_one_process_runs_again_on_both(rc: Any) -> None:
    """Process 1 fails before the processes compare (a name it lacks); process 0 waits and
    gets NBC801; defined on both, the same cell runs again and the processes meet."""
    cell = """
    def shaky(x):
        return (x * factor).mean()

    shaky(batch)
    """
    px(rc, "factor = 2.0 if jax.process_index() == 0 else None\nif factor is None: del factor")
    first = compile_everywhere(rc, cell, timeout=WAIT + 90)
    assert first[0]["code"] == "NBC801" and "process 1" in first[0]["text"], first
    assert first[1]["code"] not in (None, "NBC800", "NBC801"), first  # its own error
    px(rc, "factor = 2.0")
    assert compile_everywhere(rc, cell) == ["ok", "ok"]
    assert pull(rc, "float(shaky(batch))")[0] == pytest.approx(pull(rc, "float(shaky(batch))")[1])


@cluster
def test_freeze_of_a_program_across_processes_is_refused(rc: Any, tmp_path: Any) -> None:
    outcomes = compile_everywhere(rc, LOSS, line=f"--freeze {tmp_path / 'm.nbc'}")
    assert [o["code"] for o in outcomes] == ["NBC802", "NBC802"], outcomes
    assert not (tmp_path / "m.nbc").exists()


@cluster
def test_a_process_that_dies_during_a_compile_gives_the_other_nbc801() -> None:
    client = nbcompile.cluster(2, timeout=WAIT)
    try:
        px(client, SETUP)
        ids = sorted(client.ids)
        cell = """
        def dying(x):
            if jax.process_index() == 1:
                import os, signal
                os.kill(os.getpid(), signal.SIGKILL)
            return (x**2).mean()

        dying(batch)
        """
        code = COMPILE.format(line="", cell=textwrap.dedent(cell))
        survivor = client[ids[0]].execute(code, block=False)
        client[ids[1]].execute(code, block=False)
        start = time.monotonic()
        survivor.get(timeout=WAIT + 60)
        assert time.monotonic() - start < WAIT + 60
        outcome = client[ids[0]].pull("outcome", block=False).get(timeout=30)
        assert isinstance(outcome, dict), outcome
        assert outcome["code"] == "NBC801"
        assert "process 1" in outcome["text"] and f"{WAIT:g} s" in outcome["text"]
    finally:
        stop(client)


@cluster
def test_profile_on_every_process_side_by_side_shows_the_late_process(rc: Any) -> None:
    """Process 1 is late by a fixed ``LATE`` seconds in every call: a host callback ahead of the
    all-reduce sleeps there on process 1 only (the program is the same on both; the callback's
    Python differs), so process 0 waits in the all-reduce and process 1 is the slowest. A
    burner thread on process 1 did this before and lost to outside load on a busy machine (a
    program busy on process 0's core made process 0 the slower: 1 of 2 runs with one such
    program, 2 of 3 with three); a sleep is a delay no CPU contention takes away. The callback
    runs in a ``shard_map`` so that it runs on every device (under automatic sharding it runs
    on one device and its result crosses processes in a collective of its own)."""
    px(
        rc,
        """
        import time
        LATE = 0.3  # seconds process 1 sleeps in each call, far above the compute's time

        def _late(x):
            if jax.process_index() == 1:
                time.sleep(LATE)
            return np.asarray(x)

        heavy = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("data")),
            np.random.default_rng(jax.process_index()).normal(size=(512, 512)).astype(np.float32),
        )
        w = jax.device_put(np.eye(512, dtype=np.float32) * 0.5, NamedSharding(mesh, P()))
        """,
    )
    cell = """
    def late(x):
        return jax.pure_callback(_late, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    def layers(w, x):
        x = jax.shard_map(late, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        for _ in range(8):
            x = jnp.tanh(x @ w)
        return (x**2).mean()

    layers(w, heavy)
    """
    outcomes = compile_everywhere(rc, cell, line="--profile 10", timeout=240)
    assert outcomes == ["ok", "ok"], outcomes
    side = pull(rc, "nbcompile.last().profile.processes.to_json()")
    assert side[0] == side[1]  # the same summaries on every process
    procs, kernels = side[0]["processes"], side[0]["kernels"]
    assert [p["index"] for p in procs] == [0, 1] and all(p["calls"] == 10 for p in procs)
    assert procs[0]["collective_seconds"] > procs[1]["collective_seconds"]  # 0 waits for 1
    assert side[0]["slowest"] == 1
    crossing = [k for k in kernels if k["crosses_processes"]]
    assert [k["opcode"] for k in crossing] == ["all-reduce"] and crossing[0]["slowest"] == 0
    compute = [k for k in kernels if not k["crosses_processes"]]
    assert compute and all(None not in k["seconds"] for k in compute)  # measured on both
    (callback,) = [k for k in compute if k["opcode"] == "custom-call"]
    assert callback["slowest"] == 1 and callback["seconds"][1] >= 0.3  # the sleep, on 1 only
    views = pull(rc, "repr(nbcompile.last())")
    assert "profile on every process" in views[0] and "← slowest" in views[0]
    assert len(views[1].splitlines()) == 1
