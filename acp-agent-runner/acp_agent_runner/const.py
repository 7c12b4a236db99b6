"""ACP names: the state key, provider presets, permission modes and known agent quirks."""

from __future__ import annotations

PLATFORM = "ACP"
SESSION_KEY = "acp.session_id"
DATA_NAME = "acp-agent-runner"  # the data directory (workspaces, private homes)

# env var carrying the model API key to codex-acp through its custom provider (`env_key`)
CODEX_KEY_ENV = "LANGBOT_ACP_API_KEY"

# the codex core's warning for any custom-provider model; codex-acp sends it as an agent chunk
# (platforms/real-peers: fixtures/real-peers/codex-acp/text-new.jsonl)
MODEL_METADATA_WARNING = "Model metadata for `"
MODEL_METADATA_WARNING_END = "Defaulting to fallback metadata; this can degrade performance and cause issues."

# permission-mode -> the agent's own session modes to switch to, first one offered wins
# (codex-acp: read-only / auto / full-access; claude-code-acp: default / acceptEdits / bypassPermissions)
SESSION_MODES: dict[str, tuple[str, ...]] = {
    "read-only": ("read-only", "default"),
    "workspace-write": ("auto", "acceptEdits"),
    "full-access": ("full-access", "bypassPermissions"),
}

READ_KINDS = frozenset({"read", "search", "think"})
EDIT_KINDS = frozenset({"edit", "delete", "move"})

# ACP stopReason -> the run's finish_reason
FINISH_REASONS = {
    "end_turn": "stop",
    "max_tokens": "length",
    "max_turn_requests": "length",
    "refusal": "content_filter",
    "cancelled": "cancelled",
}
