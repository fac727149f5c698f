"""adapt() for plain functions, missing libraries, static arguments, and the name-scope machinery."""

from __future__ import annotations

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.capture import models
from nbcompile.capture._models_scopes import module_scopes
from nbcompile.capture.models import MissingLibraryError, adapt, module_paths, scope_path
from nbcompile.errors import CaptureError


def predict(params, x):
    return jnp.tanh(x @ params["w"])


def test_plain_function_jit_and_partial_pass_through():
    params, x = {"w": jnp.ones((3, 2))}, jnp.ones((4, 3))
    jitted = jax.jit(predict)
    for target, args, name in (
        (predict, (params, x), "predict"),
        (jitted, (params, x), "predict"),
        (functools.partial(predict, params), (x,), "predict"),
    ):
        ad = adapt(target, args, {})
        assert ad.fn is target and ad.args == args and ad.params_argnums == ()
        assert (ad.kind, ad.name) == ("function", name)
        assert ad.rebindable
    ad = adapt(predict, (params,), {"x": x})
    assert ad.kwargs == {"x": x} and ad.arg_names == ("params",)


def test_import_does_not_load_model_libraries():
    code = (
        "import sys, nbcompile.capture.models, nbcompile.capture._models_scopes\n"
        "bad = [m for m in ('flax', 'equinox', 'keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    env = {"JAX_PLATFORMS": "cpu", "PATH": ""}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("flax.nnx.module", "flax"),
        ("flax.linen.module", "flax"),
        ("equinox._module._module", "equinox"),
        ("keras.src.models.model", "keras"),
    ],
)
def test_missing_library_names_the_install_command(monkeypatch, module, extra):
    def not_installed(name):
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(models, "_import_module", not_installed)
    Base = type("Module", (), {"__module__": module})
    Model = type("Model", (Base,), {"__call__": lambda self, x: x})
    for target, args in ((Model(), (jnp.ones(2),)), (predict, (Model(), jnp.ones(2)))):
        with pytest.raises(MissingLibraryError) as info:
            adapt(target, args, {})
        assert isinstance(info.value, CaptureError) and info.value.code == "NBC112"
        assert f"pip install nbcompile[{extra}]" in str(info.value)


def test_objects_of_other_libraries_are_plain_functions():
    Thing = type("Thing", (), {"__module__": "mylib.layers", "__call__": lambda self, x: x})
    ad = adapt(Thing(), (jnp.ones(2),), {})
    assert ad.kind == "function"


class Leaf:
    def __call__(self, x):
        return jnp.sin(x)


class Twice(Leaf):
    def __call__(self, x):  # calls super().__call__: must not open a second scope
        return super().__call__(x) * 2


class Tree:
    def __init__(self):
        self.enc, self.dec = Leaf(), Twice()
        self.layers = [Leaf(), Leaf()]

    def __call__(self, x):
        x = self.dec(self.enc(x))
        for layer in self.layers:
            x = layer(x)
        return x


def tree_modules(tree):
    return [
        (("Tree",), tree),
        (("Tree", "enc"), tree.enc),
        (("Tree", "dec"), tree.dec),
        (("Tree", "layers_0"), tree.layers[0]),
        (("Tree", "layers_1"), tree.layers[1]),
    ]


def test_module_scopes_name_calls_and_restore_classes():
    tree, before = Tree(), (Leaf.__dict__["__call__"], Twice.__dict__["__call__"])

    def traced(x):
        with module_scopes(tree_modules(tree)):
            return tree(x)

    paths = module_paths(jax.make_jaxpr(traced)(1.0))
    assert paths == {"Tree/enc", "Tree/dec", "Tree/layers_0", "Tree/layers_1"}
    assert (Leaf.__dict__["__call__"], Twice.__dict__["__call__"]) == before
    assert "__call__" not in Tree.__dict__ or Tree.__dict__["__call__"] is Tree.__call__
    assert module_paths(jax.make_jaxpr(tree)(1.0)) == set()  # no scopes outside the block
    np.testing.assert_allclose(jax.jit(traced)(0.3), tree(0.3))


def test_module_scopes_restore_after_an_error():
    tree, before = Tree(), Leaf.__dict__["__call__"]
    with pytest.raises(TypeError), module_scopes(tree_modules(tree)):
        tree("not a number")
    assert Leaf.__dict__["__call__"] is before


def test_scope_path_drops_transforms():
    def f(x):
        with jax.named_scope("Model"), jax.named_scope("dense1"):
            return jnp.sin(x) * 2

    grad_jaxpr = jax.make_jaxpr(jax.grad(f))(1.0)
    raw = module_paths(grad_jaxpr, keep_transforms=True)
    assert any(p.startswith("transpose(jvp(Model))") for p in raw)
    assert module_paths(grad_jaxpr) == {"Model/dense1"}
    vmapped = jax.make_jaxpr(jax.vmap(f))(jnp.ones(3))
    assert module_paths(vmapped) == {"Model/dense1"}
    assert scope_path("transpose(jvp(Model/blocks_0))/attn") == "Model/blocks_0/attn"
    assert scope_path("vmap()/a") == "a"


def test_model_call_arguments_static_and_array_kwargs(relaxed_dtypes):
    nnx = pytest.importorskip("flax.nnx")

    class Masked(nnx.Module):
        def __init__(self, rngs):
            self.dense1 = nnx.Linear(3, 3, rngs=rngs)

        def __call__(self, x, scale, *, deterministic, mask=None):
            assert isinstance(deterministic, bool)  # stays a Python value under jit
            y = self.dense1(x) * scale
            return y if mask is None else jnp.where(mask, y, 0.0)

    model, x = Masked(nnx.Rngs(0)), jnp.ones((2, 3))
    mask = jnp.array([[True, False, True]] * 2)
    ad = adapt(model, (x, 2.0), {"deterministic": True, "mask": mask})
    assert ad.arg_names == ("params", "state", "x", "kwargs")
    assert ad.args[2] is x and ad.args[3] == {"mask": mask}
    expected = model(x, 2.0, deterministic=True, mask=mask)
    np.testing.assert_allclose(jax.jit(ad.fn)(*ad.args), expected, rtol=1e-6)
    assert "Masked/dense1" in module_paths(jax.jit(ad.fn).trace(*ad.args).jaxpr)
