"""Hatch build hook: bundles js/ into nbcompile/widgets/static (filled in by the view work)."""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class WidgetBundleHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        return None
