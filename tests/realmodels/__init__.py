"""Real-model test set: the architectures of the libraries' well-known examples, re-implemented
here in our own code and used as a notebook user would.

Each case (``_cases_*.py``) rebuilds an example's model (same layers, sizes and library API
patterns) and credits the example whose architecture it follows. ``test_realmodels.py`` checks
every case: forward through ``%%compile`` equals the library's own jit, ``--grad`` equals the
library's own value-and-grad, ``--freeze`` loads in a fresh process with the live outputs, and a
deviceless TPU compile has fusions. ``test_patterns.py`` covers the documented patterns of
issue 14 §3, ``test_second_round.py`` what a second round of real models found (§6).
"""
