"""Loopback fake servers for platform adapters (shared by tests, CLI tests and benchmarks)."""
