"""One benchmark entry per plugin (ENTRY), collected by bench/registry.py."""
