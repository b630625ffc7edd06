"""Helpers that start real services for tests, benchmarks and the demo (not used in serving)."""
