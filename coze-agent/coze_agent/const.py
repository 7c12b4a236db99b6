"""Coze names: endpoints, stream event names, message types and the state key."""

PLATFORM = "Coze"
SESSION_KEY = "coze.conversation_id"

DEFAULT_BASE = "https://api.coze.cn"
CHAT_PATH = "/v3/chat"
CANCEL_PATH = "/v3/chat/cancel"
# DELETE: the conversation and its messages are removed for good (cozepy ConversationsClient.delete;
# POST .../clear only starts a new context section and keeps the messages)
CONVERSATION_PATH = "/v1/conversations/{conversation_id}"
# answers a chat in status requires_action (query conversation_id, chat_id; body tool_outputs, stream):
# coze-dev/coze-py cozepy/chat/__init__.py (ToolOutput, submit_tool_outputs) and platforms.md §Coze
SUBMIT_PATH = "/v3/chat/submit_tool_outputs"
# conversation state: what answering a requires_action needs, under the interaction id
PENDING_KEY = "coze.pending-action"
UPLOAD_PATH = "/v1/files/upload"
# what a user may paste after the host; the adapter adds the versioned paths itself
API_SUFFIXES = ("/v3/chat", "/v3", "/v1", "/api")

# stream events
CHAT_CREATED = "conversation.chat.created"
CHAT_IN_PROGRESS = "conversation.chat.in_progress"
MESSAGE_DELTA = "conversation.message.delta"
MESSAGE_COMPLETED = "conversation.message.completed"
CHAT_COMPLETED = "conversation.chat.completed"
CHAT_FAILED = "conversation.chat.failed"
CHAT_REQUIRES_ACTION = "conversation.chat.requires_action"
ERROR = "error"
DONE = "done"
# events that carry nothing a chat user reads (voice bots stream audio alongside the text)
IGNORED_EVENTS = frozenset({"conversation.audio.delta", "conversation.audio.completed"})

# message types inside message events
ANSWER = "answer"
FUNCTION_CALL = "function_call"
TOOL_OUTPUTS = frozenset({"tool_output", "tool_response"})
FOLLOW_UP = "follow_up"
NOT_SHOWN = frozenset({"verbose", "knowledge"})  # recall text and workflow bookkeeping

# Coze's business code for an unknown (deleted, foreign) conversation id
CONVERSATION_MISSING = 4002
# cancel of a chat that already finished
CANNOT_CANCEL = 4104
