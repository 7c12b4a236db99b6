"""Codex names: the app-server methods we use, the provider id we configure and the state key."""

PLATFORM = "Codex"
SESSION_KEY = "codex.thread_id"
DEFAULT_EXECUTABLE = "codex"
CLIENT_NAME = "langbot_codex_agent"
CLIENT_TITLE = "LangBot CodexAgent"
CLIENT_VERSION = "0.3.0"

PROVIDER_ID = "langbot"  # the [model_providers.<id>] block the generated config.toml declares
DEFAULT_ENV_KEY = "CODEX_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# notifications that carry nothing the chat or the ledger needs
IGNORED_NOTIFICATIONS = frozenset({
    "thread/started",
    "thread/status/changed",
    "thread/goal/cleared",
    "thread/name/updated",
    "turn/started",
    "turn/diff/updated",
    "account/rateLimits/updated",
    "account/updated",
    "remoteControl/status/changed",
    "serverRequest/resolved",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/commandExecution/terminalInteraction",
    "item/mcpToolCall/progress",
    "mcpServer/startupStatus/updated",
    "sessionConfigured",
})
# notifications worth one processor-log line (warnings Codex shows its own users)
LOGGED_NOTIFICATIONS = frozenset({"warning", "configWarning", "deprecationNotice", "windowsWorldWritableWarning"})
