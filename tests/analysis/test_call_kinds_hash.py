"""``CallKinds`` hashes its labels once (issue 28 item 7: the ``analyse.inferred_sources`` stage).

Every cached look-up keyed by the kinds (``_op_name_parts``, ~40,000 per GPT-2-small analysis in
``annotate_compiled`` and ``kernel_shares``) hashed them; hashing sorted all of a few thousand
labels each time. Now the hash is computed once and not pickled (a string's hash differs between
processes).
"""

from __future__ import annotations

import pickle

from nbcompile.analysis.calls import CallKinds


class _CountingDict(dict):
    reads = 0

    def items(self):
        type(self).reads += 1
        return super().items()


def test_call_kinds_hash_computed_once():
    kinds = CallKinds(_CountingDict({f"block#{i}": "call" for i in range(1, 500)}))
    first = hash(kinds)
    for _ in range(10):
        assert hash(kinds) == first
    assert _CountingDict.reads == 1
    same = CallKinds({f"block#{i}": "call" for i in reversed(range(1, 500))})
    assert same == kinds and hash(same) == first
    back = pickle.loads(pickle.dumps(CallKinds({"gelu": "library", "block#1": "call"})))
    assert back == CallKinds({"block#1": "call", "gelu": "library"})
    assert hash(back) == hash(CallKinds({"block#1": "call", "gelu": "library"}))
