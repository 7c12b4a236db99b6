"""n8n names: stream item types, answer keys, auth types and the state key."""

PLATFORM = "n8n"
SESSION_KEY = "n8n.session_id"

# NDJSON item types of a Webhook in "Streaming" response mode (packages/workflow StructuredChunk)
STREAM_TYPES = frozenset({"begin", "item", "end", "error", "keepalive"})
# n8n 2.x writes {"type":"keepalive"} every 30 s while a streaming execution runs (workflow-runner.js)
KEEPALIVE = "keepalive"
STREAM_KEYS = frozenset({"type", "content", "metadata"})

# where an answer may sit in a JSON response, after the configured output-key
FALLBACK_KEYS = ("output", "text", "answer", "response", "reply", "message")
# a streamed item whose content is an object (newer n8n chat frontends) carries its text here
CHUNK_TEXT_KEYS = ("text_chunk", "text", "content", "output")

AUTH_TYPES = ("none", "basic", "jwt", "header")
JWT_ALGORITHMS = {"HS256": "sha256", "HS384": "sha384", "HS512": "sha512"}
JWT_LIFETIME = 120  # seconds a signed request token stays valid (n8n checks it on arrival)

# what n8n says in a 200 when the Webhook node answers before the workflow runs ("Immediately")
STARTED_MESSAGE = "Workflow was started"
# what n8n says in a 500 when the workflow failed (lastNode / responseNode modes)
WORKFLOW_ERROR = "Error in workflow"
# n8n's plain-text bodies when webhook authentication fails (nodes/Webhook/utils.js, error.js):
# 401 basic auth missing / wrong, JWT missing; 403 header auth (missing or wrong), a JWT that fails
# verification (jsonwebtoken's message); 500 when the node has no credential set
AUTH_REQUIRED = "Authorization is required!"
AUTH_WRONG = "Authorization data is wrong!"
AUTH_FAILED_403 = ("Authorization data is wrong!", "invalid signature", "jwt expired", "invalid algorithm",
                   "jwt malformed", "invalid token", "jwt signature is required", "jwt not active")
NO_NODE_CREDENTIAL = "No authentication data defined on node!"

URL_HINT = (
    "is webhook-url the Webhook node's Production URL (…/webhook/<path>) and is the workflow published? "
    "A Test URL (…/webhook-test/<path>) only answers while the n8n editor is listening"
)
