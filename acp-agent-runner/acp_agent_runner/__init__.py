"""ACP adapter for the ACPRunner LangBot runner."""
