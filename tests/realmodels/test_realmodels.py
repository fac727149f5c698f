"""Every real model (see ``_cases_*.py``) as a notebook user works with it: the model cells run
first, then ``%%compile`` cells. Forward equals the library's own jit, ``--grad`` equals the
library's own value-and-grad, ``--freeze`` files loaded in a fresh process give the live
outputs, and a deviceless TPU compile has fusions."""

from __future__ import annotations

import pytest

from ._cases_equinox import CASES as EQUINOX
from ._cases_flax import CASES as FLAX
from ._cases_jax import CASES as JAX
from ._cases_keras import CASES as KERAS
from ._helpers import (
    TPU,
    assert_close,
    compile_cell,
    evaluate,
    load_in_fresh_process,
    outputs,
    save_frozen_case,
    use,
)

CASES = [*FLAX, *EQUINOX, *KERAS, *JAX]

# Two cases use API patterns the installed libraries warn about: the NNX functional-API case
# reads `Variable.value` (deprecated in Flax 0.12); the Equinox stateful case leaves BatchNorm's
# mode to its legacy default.
pytestmark = [
    pytest.mark.filterwarnings("ignore:'.value' access is now deprecated"),
    pytest.mark.filterwarnings("ignore:When `eqx.nn.BatchNorm:UserWarning"),
]


@pytest.fixture(params=CASES, ids=lambda case: case.name)
def case(request, shell, relaxed_dtypes):
    use(shell, request.param)
    return request.param


def test_forward_equals_the_library_jit(shell, case):
    c = compile_cell(shell, "", case.forward)
    assert_close(outputs(c), evaluate(shell, case.forward_ref), f"{case.name} forward")


def test_grad_equals_the_library_value_and_grad(shell, case):
    c = compile_cell(shell, f"--grad {case.grad}", case.loss)
    assert c.grad is not None, f"{case.name}: --grad compiled no gradient program"
    value, grads = c.grad.fn(*c.grad.args, **c.grad.kwargs)
    want_value, want_grads = evaluate(shell, case.grad_ref)
    assert_close(value, want_value, f"{case.name} loss")
    assert_close(grads, want_grads, f"{case.name} gradient")


@pytest.mark.slow
def test_deviceless_tpu_compile_has_fusions(shell, case):
    c = compile_cell(shell, TPU, case.forward)
    assert c.backend == "tpu" and c.compiled is not None
    assert c.fusions, f"{case.name}: the TPU program has no fusions"


@pytest.mark.slow
def test_frozen_files_give_the_live_outputs_in_a_fresh_process(shell, relaxed_dtypes, tmp_path):
    saved = []
    for case in CASES:
        use(shell, case)
        c = compile_cell(shell, f"--freeze {tmp_path / case.name}.nbc", case.forward)
        assert c.frozen is not None, f"{case.name}: --freeze wrote nothing"
        saved.append(save_frozen_case(case.name, c, evaluate(shell, case.forward_ref), tmp_path))
    results = load_in_fresh_process(saved, tmp_path)
    failed = {name: why for name, why in results.items() if why != "ok"}
    assert not failed and len(results) == len(CASES), failed
