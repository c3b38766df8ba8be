"""Benchmarks: commands that measure and print figures (never timed tests)."""
