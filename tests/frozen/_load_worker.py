"""Run in a fresh process: load each file given in a JSON job and report code, peak-RSS growth,
new modules imported and whether any canary file appeared. Usage: python _load_worker.py JOB.json
(JOB: {"warmup": path, "cases": {name: path}, "canary": path})."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    from nbcompile.errors import FreezeError
    from nbcompile.frozen import load
    from nbcompile.frozen._batch import concrete_shape

    warm = load(job["warmup"])
    warm(
        *[
            __import__("numpy").zeros(concrete_shape(leaf["shape"], 2), leaf["dtype"])
            for leaf in warm.signature["inputs"]["leaves"]
        ]
    )
    results = {}
    for name, path in job["cases"].items():
        modules = set(sys.modules)
        before = _rss_kib()
        try:
            load(path)
            code = "loaded"
        except FreezeError as err:
            code = err.code
        results[name] = {
            "code": code,
            "rss_growth_kib": _rss_kib() - before,
            "new_modules": sorted(set(sys.modules) - modules),
            "canary": os.path.exists(job["canary"]),
        }
    print("RESULTS " + json.dumps(results))


if __name__ == "__main__":
    main()
