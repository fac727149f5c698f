"""Claims of 09_where_the_time_goes."""

from . import Ablation, Claim

IMPORTS = "from nbcompile.measure import profile, variants_for\n"
#: peaks never refused: the profile keeps the roofline whatever beats it
NO_REFUSAL = (
    'import sys; sys.modules["nbcompile.measure.profile"].upper_bound = lambda peaks, rates: '
    "(peaks, [])\n"
)
#: every calibration of this session made on a busy machine (a quarter of the FLOP/s)
BUSY = (
    "import dataclasses, sys\n"
    '_prof = sys.modules["nbcompile.measure.profile"]\n'
    '_peaks = sys.modules["nbcompile.measure._peaks"]\n'
    "_true = _prof.cpu_peaks()[0]\n"
    "_busy = dataclasses.replace(_true, flops_per_s=_peaks.Peak(_true.flops_per_s.value / 4, "
    '"measured", "on a busy machine"))\n'
    "_prof.cpu_peaks = _peaks.cpu_peaks = lambda refresh=False, patience=1.0: (_busy, {})\n"
)
BUSY_CALIBRATION = IMPORTS + BUSY + NO_REFUSAL
NARROW = {"D, SEQ, HEADS = 512, 256, 8": "D, SEQ, HEADS = 16, 1024, 16"}

CLAIMS = [
    Claim(
        "09",
        "time-on-named-kernels",
        "a profile accounts for the execution time: nearly all of it on named kernels",
        cause="SEQ * D * D >= 2**25",
        ablation=Ablation(
            {"D, SEQ, HEADS = 512, 256, 8": "D, SEQ, HEADS = 32, 8, 1"},
            why="a block of 8 tokens of width 32: a call is over before the kernels weigh",
            only=("%%compile --profile", "c = block.compilation"),
        ),
        window="step > 1 ms and coverage >= 95 % (measured 99.9 %)",
    ),
    Claim(
        "09",
        "matmuls-take-most",
        "here the lines with a matrix product take most of the time",
        cause="D // HEADS >= 32",
        ablation=Ablation(
            {**NARROW, "assert p.step_seconds > 1e-3 and p.coverage >= 0.95": "pass"},
            why="narrow heads and a long sequence: the softmax over the scores takes the time",
        ),
        window="> 50 %: measured 97 % (0.42 with the ablation)",
    ),
    Claim(
        "09",
        "roof-bounds-kernels",
        "the calibrated roof is an upper bound: no kernel runs above it (peaks measured on a busy "
        "machine are measured again when beaten, else refused)",
        cause='__import__("nbcompile.measure.profile", fromlist=["_"]).upper_bound is '
        '__import__("nbcompile.measure._peaks", fromlist=["_"]).upper_bound',
        ablation=Ablation(
            {IMPORTS: BUSY_CALIBRATION},
            why="a calibration made on a busy machine (a quarter of the FLOP/s) and no "
            "re-measurement when a kernel beats it",
            only=(
                "%%compile --profile",
                "c = block.compilation",
                "peaks = p.peaks",
                "timed = [k for",
            ),
        ),
        window="5 % above the roof is the noise of two measurements (profile.TOLERANCE)",
    ),
    Claim(
        "09",
        "matmuls-near-peak",
        "on the roofline the matmuls are compute-bound and run at a good share of the FLOP/s peak",
        cause="D >= 256",
        ablation=Ablation(
            {
                **NARROW,
                "assert p.step_seconds > 1e-3 and p.coverage >= 0.95": "pass",
                "assert matmul_share > 0.5": "pass",
                "assert roof_bounds  # claim: roof-bounds-kernels": "pass",
                IMPORTS: IMPORTS + NO_REFUSAL,
            },
            why="width 16: the matrix products are tiny, memory-bound and far from the peak "
            "(the roofline kept even where a tiny kernel beats it, as refused peaks would skip "
            "the claim)",
        ),
        window="10-105 % of the peak together: measured 23-81 % on a 2-core machine shared with "
        "other jobs (the peak is the quietest moment's, the kernels are measured now)",
    ),
]
