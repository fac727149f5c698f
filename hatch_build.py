"""Hatch build hook: bundle the view front end (js/) into nbcompile/widgets/static with esbuild.

esbuild comes from npm (package.json / package-lock.json); from a clean clone the hook runs
``npm ci`` first when node_modules is missing. ``NBCOMPILE_SKIP_JS=1`` skips the build when the
bundle is already there (e.g. building a wheel from an sdist that carries it, or without Node).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUNDLES = ("widget.js", "nbcompile-view.js")


class WidgetBundleHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        static = root / "nbcompile" / "widgets" / "static"
        built = all((static / name).exists() for name in BUNDLES)
        if os.environ.get("NBCOMPILE_SKIP_JS") == "1":
            if not built:
                raise RuntimeError(
                    "NBCOMPILE_SKIP_JS=1 but the view bundle is missing from nbcompile/widgets/static: "
                    "unset it so the build runs `npm ci` and esbuild (needs Node.js and npm)."
                )
            return
        if not (
            root / "js" / "build.mjs"
        ).exists():  # building from an sdist that carries the bundle
            if built:
                return
            raise RuntimeError("nbcompile: js/ sources and the built view bundle are both missing")
        npm, node = shutil.which("npm"), shutil.which("node")
        if npm is None or node is None:
            if built:
                self.app.display_warning(
                    "nbcompile: Node.js/npm not found; using the existing view bundle"
                )
                return
            raise RuntimeError(
                "nbcompile: building the view needs Node.js and npm (apt-get install nodejs npm)"
            )
        if not (root / "node_modules" / "esbuild").exists():
            self.app.display_info("nbcompile: npm ci (esbuild, for the view bundle)")
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=root, check=True)
        self.app.display_info("nbcompile: bundling js/ -> nbcompile/widgets/static")
        subprocess.run([node, str(root / "js" / "build.mjs")], cwd=root, check=True)
        build_data.setdefault("artifacts", []).extend(
            f"nbcompile/widgets/static/{name}" for name in BUNDLES
        )
