"""LocalAgent names: the platform as messages name it, and the state keys it keeps."""

PLATFORM = "LangBot model"
CHECKPOINT_KEY = "local-agent.checkpoint"  # conversation state: {"summary", "through_seq", "created_at"}
