"""Tbox names: endpoints, message types and the state key."""

PLATFORM = "Tbox"
SESSION_KEY = "tbox.conversation_id"

DEFAULT_BASE = "https://api.tbox.cn"
# what an owner may paste after the host (the API prefix, or a whole endpoint address)
API_SUFFIXES = ("/api/chat", "/api/completion", "/api")
CHAT_PATH = "/api/chat"
COMPLETION_PATH = "/api/completion"
UPLOAD_PATH = "/api/file/upload"

CHAT_APP = "chat"
COMPLETION_APP = "completion"
# the SDK's channel header; Tbox lists API conversations under it
SOURCE = "AGENT_SDK"

DEFAULT_LANE = "default"
TEXT = "text"
IMAGE = "image"

# message types (``data.type`` of an ``event: message``)
HEADER = "header"
CHUNK = "chunk"
THINKING = "thinking"
END = "end"
FOLLOWUP = "followup"
REVOKE = "revoke"
CHARGE = "charge"
META = "meta"
ERROR = "error"
IGNORED = frozenset({"unknown"})

# the conversation id, under both names Tbox is known to use
CONVERSATION_KEYS = ("conversationId", "sessionId")

MAX_FOLLOW_UPS = 5
REVOKED_TEXT = "(Tbox withdrew this answer after its content review.)"
DEFAULT_BASE_PROMPT = "Please look at the attached file(s)."
DEFAULT_BASE_PROMPT_ZH = "请查看附带的文件。"
