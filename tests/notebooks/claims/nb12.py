"""Claims of 12_many_processes (two local JAX processes under ipyparallel)."""

from . import Ablation, Claim

SPLIT = (
    '(rc[0].execute("_replicated = x.sharding.is_fully_replicated", block=True), '
    'not rc[0]["_replicated"])[1]'
)

CLAIMS = [
    Claim(
        "12",
        "allreduce-is-the-gradient",
        "data-parallel training all-reduces every parameter's gradient across the processes: "
        "the parameters' bytes (and the loss), predicted from the shapes",
        cause=SPLIT,
        ablation=Ablation(
            {
                'rows, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())': (
                    "rows = replicated = NamedSharding(mesh, P())"
                ),
                'assert len(procs) == 2 and crossing_0 and all(op == "all-reduce" for op, _ in crossing_0)': (
                    "pass"
                ),
            },
            why="the batch replicated, not split: each process computes the whole gradient, "
            "nothing to add across processes",
            only=(
                "import jax, jax.numpy",
                "%%compile\ndef loss_fn",
                "c = train_step.compilation",
                "crossing_0, param_bytes_0",
            ),
            cleanup=("rc.shutdown",),
        ),
        window="exact bytes",
    ),
    Claim(
        "12",
        "nbc800-before-a-hang",
        "a program that differs on one process is refused on every process (NBC800, with the "
        "line) before it can hang at a collective",
        cause='"process_index() == 1" in rc[0]["RANK_BUG"]',
        ablation=Ablation(
            {"    if jax.process_index() == 1: x = x * 2.0\n": "    if False: x = x * 2.0\n"},
            why="no branch on the process: every process traces the same program",
            only=("import jax, jax.numpy", "%%compile\ndef loss_fn", "RANK_BUG ="),
            cleanup=("rc.shutdown",),
        ),
    ),
    Claim(
        "12",
        "others-wait-for-the-busy-one",
        "profiled side by side, the process the others wait for is the busy one: the other "
        "waits longer inside the all-reduce",
        cause='rc[0]["BUSY"] == 1',
        ablation=Ablation(
            {"BUSY = 1  # the process": "BUSY = 0  # the process"},
            why="the busy thread on process 0 instead",
            only=(
                "import jax, jax.numpy",
                "%%compile\ndef loss_fn",
                "import threading",
                'side = rc[0]["side"]',
            ),
            cleanup=("rc.shutdown",),
        ),
    ),
]
