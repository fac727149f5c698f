"""Tests of nbcompile (a package, so helper modules and conftests never collide)."""
