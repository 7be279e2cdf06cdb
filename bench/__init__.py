"""Benchmark of the client engines against a naive Lightning baseline and a centralized bound (issue 3)."""
