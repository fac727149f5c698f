"""Cell source -> Captured (target, example args, line map, cache key)."""

from .source import SourceInfo, source_of_function

__all__ = ["SourceInfo", "source_of_function"]
