"""Claude Code adapter for the ClaudeCodeAgent LangBot runner."""
