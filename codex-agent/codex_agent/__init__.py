"""Codex adapter for the CodexAgent LangBot runner."""
