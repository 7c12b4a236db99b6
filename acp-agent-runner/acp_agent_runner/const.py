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
    # ask: the mode in which the agent itself ASKS (session/request_permission) before a write or a
    # command. claude-code-acp's `default` asks for edits and commands (acceptEdits would accept
    # edits silently). codex-acp has no such mode: its `read-only` and `auto` are approval
    # "on-request", where the model decides whether to ask (measured with codex-acp 0.16.0: a write
    # in `read-only` simply failed in the sandbox, nothing was asked). So for codex-acp the mode is
    # NOT switched: it is launched with `approval_policy="untrusted"` (asks before every command
    # that is not known-safe, fixtures/real-peers/codex-acp/tool-approval.jsonl) in a
    # `workspace-write` sandbox (providers.launch), which a session mode would override.
    "ask": ("default",),
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
