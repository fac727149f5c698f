"""Claims of 06_freezing."""

from . import Ablation, Claim

CLAIMS = [
    Claim(
        "06",
        "one-file",
        "a frozen model is one file holding the program and all the weights",
        cause='fr.get("weight_bytes", 0) > 0',
        ablation=Ablation(
            {
                "%%compile --freeze {path}\n": "%%compile\n",
                'fr = predict.compilation.extras["freeze"]': (
                    "fr = vars(nbcompile.freeze(predict.compilation.original, params, X, path=path,"
                    " weights_argnums=()))"
                ),
                'print(fr["text"])': "print(fr)",
            },
            why="the file frozen with the program only (weights_argnums=()): the weights stay "
            "with the caller",
            only=("path = os.path.join", "def predict", "fr = "),
        ),
    ),
    Claim(
        "06",
        "served-bit-identical",
        "a fresh process serving the file gives the notebook's output, bit for bit",
        cause="all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip("
        "nbcompile.load(path)._weights, jax.tree_util.tree_leaves(params)))",
        ablation=Ablation(
            {"predict(params, X)": "predict(jax.tree_util.tree_map(lambda w: w * 0.5, params), X)"},
            why="the file frozen from other weights than the notebook computes with",
        ),
        window="bit-identical",
    ),
    Claim(
        "06",
        "eval-strips-training-ops",
        "frozen after net.eval(), the file has no random-bit ops and no batch reductions",
        cause="net.bn.use_running_average and net.drop.deterministic",
        ablation=Ablation(
            {"net.eval()                                        #": "net.train()  #"},
            why="the model left in training mode when frozen",
            only=("class Net",),
        ),
        control="file_census(frozen_train)[0] > 0",
        window="counts: zero",
    ),
    Claim(
        "06",
        "constants-fold",
        "with the weights baked in as constants, XLA folds weight-only work: exactly u @ v's "
        "flops leave every call",
        cause="const.weights == {}",
        ablation=Ablation(
            {
                "path=const_path, constants=True)": "path=const_path, constants=False)",
                "assert folded_pred == xla_flops(as_args)": "assert True or folded_pred == xla_flops(as_args)",
                "as_const = jax.jit(const.exported.call).lower(x_new)": (
                    "as_const = jax.jit(const.exported.call).lower(*const._weights, x_new)"
                ),
            },
            why="frozen with the weights as arguments (constants=False): nothing is constant",
            only=(
                "path = os.path.join",
                "%%compile --freeze",
                "x_new = np.asarray",
                "params_lr =",
                "folded_pred =",
            ),
        ),
        window="exact flops",
    ),
]
