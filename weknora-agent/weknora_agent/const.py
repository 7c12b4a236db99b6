"""WeKnora names: endpoints, stream response types, built-in agents and the state key."""

PLATFORM = "WeKnora"
SESSION_KEY = "weknora.session_id"

API_PREFIX = "/api/v1"
EXAMPLE_BASE_URL = "http://localhost:8080/api/v1"

SESSIONS_PATH = "/sessions"
SESSION_PATH = "/sessions/{sid}"  # DELETE: what a LangBot reset left behind
CHAT_PATHS = {"chat": "/knowledge-chat/{sid}", "agent": "/agent-chat/{sid}"}
STOP_PATH = "/sessions/{sid}/stop"
CONTINUE_PATH = "/sessions/continue-stream/{sid}"  # ?message_id=: replays the answer's events from the first
# a file the agent's skills produced, by its position in the answer's ``complete`` data.artifacts
ARTIFACT_PATH = "/sessions/{sid}/messages/{mid}/artifacts/{index}/download"

# WeKnora announces the files on ``complete`` before it stores the answer holding them (qa.go stores
# the message after the agent returns): a download answered 404 "artifact index out of range" is
# tried again after these pauses (seconds)
ARTIFACT_WAITS = (0.25, 0.5, 1.0, 2.0)
NOT_STORED_YET = "artifact index out of range"
# attached as images (anything else, SVG too, is a file)
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})

# a broken-off answer is resumed at most MAX_RESUMES times in a row without anything new coming
# (waiting RESUME_BACKOFF, then twice as long, before each retry), MAX_RESUMES_TOTAL times in all
MAX_RESUMES = 3
MAX_RESUMES_TOTAL = 20
RESUME_BACKOFF = 0.5

# the agent used when agent-id is blank (what LangBot's old runner and the migration chose)
DEFAULT_AGENTS = {"chat": "builtin-quick-answer", "agent": "builtin-smart-reasoning"}

# sent as X-External-User-ID (WeKnora scopes sessions per external user when the workspace's
# "API principal" mode is "direct"; otherwise the header is ignored); at most 128 characters
USER_HEADER = "X-External-User-ID"
MAX_USER_ID = 128
SESSION_TITLE = "IM Chat - {user}"

# the AppError code WeKnora sends with 404 "Session not found"
NOT_FOUND_CODE = 1003
# at most this many inline attachment_uploads per request (WeKnora refuses more)
MAX_ATTACHMENTS = 5
MAX_REFERENCES = 10

# response types that carry nothing a chat user sees
IGNORED_TYPES = frozenset(
    {
        "agent_query",
        "session_title",
        "tool_approval_resolved",
        "mcp_oauth_resolved",
        "memory_recalled",
    }
)
