"""Claims of 08_model_libraries."""

from . import Ablation, Claim

CALL = "        return self.out(jax.nn.gelu(self.hidden(x)))\n"

CLAIMS = [
    Claim(
        "08",
        "params-are-inputs",
        "a Flax NNX model's parameters are inputs of the compiled program, not baked-in constants",
        cause="len(jax.tree_util.tree_leaves(c.args)) > 1",
        ablation=Ablation(
            {
                "%%compile\nmodel(x)": "%%compile\nmodel(x)  # compiled again, closed over, below",
                "c = nbcompile.last()\npaths": "c = nbcompile.compile(lambda x_: model(x_), x)\npaths",
                "assert c.compiled.memory_analysis().argument_size_in_bytes == predicted_args": "pass",
            },
            why="the model closed over (lambda x_: model(x_)): its arrays become constants",
            only=("%%compile\nmodel(x)", "c = nbcompile.", "predicted_args =", "closed = "),
        ),
        control="largest_const >= 32 * 64",
    ),
    Claim(
        "08",
        "fusions-name-modules",
        "the fused kernels speak in the model's structure: module paths such as hidden",
        cause='"self.hidden(x)" in __import__("inspect").getsource(MLP.__call__)',
        ablation=Ablation(
            {
                CALL: "        h = x @ self.hidden.kernel[...] + self.hidden.bias[...]\n"
                "        return self.out(jax.nn.gelu(h))\n",
                "assert max((np.size(v) for v in c.jaxpr.consts), default=0) < 16": "pass",
                'assert any("hidden" in p for p in paths)': 'assert True or any("hidden" in p for p in paths)',
            },
            why="the hidden layer's arithmetic written out with its arrays: no call of the "
            "hidden module",
            only=("%%compile\nmodel(x)", "c = nbcompile.", "predicted_args =", "closed = "),
        ),
    ),
]
