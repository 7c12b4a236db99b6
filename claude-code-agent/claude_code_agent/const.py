"""Claude Code names: the CLI, its flags, the state key and the environment it reads."""

PLATFORM = "Claude Code"
SESSION_KEY = "claude_code.session_id"
PROCESS_PLATFORM = "claude-code"  # data directory name (workspaces, private HOMEs)
DEFAULT_EXECUTABLE = "claude"

# the base command: headless, JSON lines both ways, token-level stream events
BASE_ARGS = (
    "-p",
    "--output-format", "stream-json",
    "--verbose",
    "--input-format", "stream-json",
    "--include-partial-messages",
)

# permission-mode (ours) -> claude's own --permission-mode
PERMISSION_MODES = {
    "read-only": "plan",
    "workspace-write": "acceptEdits",
    "full-access": "bypassPermissions",
    "ask": "default",  # with --permission-prompt-tool stdio: claude asks us (can_use_tool) and we ask the chat
}
ASK_MODE = "ask"
PROMPT_TOOL_ARGS = ("--permission-prompt-tool", "stdio")
EDIT_TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}
QUESTION_TOOL = "AskUserQuestion"
# modes claude refuses as root unless IS_SANDBOX=1 is set
BYPASS_MODES = {"bypassPermissions"}

QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_ERROR_REPORTING": "1",
}

NO_CONVERSATION = "No conversation found with session ID"
SESSION_IN_USE = "is already in use"

# any of these in the child's environment lets claude authenticate
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK",
                  "CLAUDE_CODE_USE_VERTEX")
DEFAULT_API = "https://api.anthropic.com"  # where claude goes without a base URL
USER_HEADER = "x-langbot-user"  # sent through ANTHROPIC_CUSTOM_HEADERS on every model request
