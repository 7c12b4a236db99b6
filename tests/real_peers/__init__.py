"""Tests against real platform servers installed into a cache directory (opt-in: RUN_SLOW=1)."""
