"""Benchmark helpers for tools/bench (not part of the package)."""
