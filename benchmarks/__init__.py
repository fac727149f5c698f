"""nbcompile's benchmark harness (``python -m benchmarks``) and its reference models.

Figures, repeats and the ``--check`` rule are described in docs/benchmarks.md; the reference
models shared with the tests are in :mod:`benchmarks.models`.
"""
