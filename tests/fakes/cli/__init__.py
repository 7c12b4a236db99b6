"""Scripted fakes of the coding-agent CLIs (Claude Code, Codex) that talk to tests/fakes/model_api.py."""
