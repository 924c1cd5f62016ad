"""Benchmarks run by `make bench`: each module prints its tables (speed is measured here, never in tests)."""
