"""A workflow that answers with a file: an image, a PDF, any binary body.

What n8n 2.40.7 sends (``n8n-nodes-base`` ``RespondToWebhook`` ``utils/binary.js``
``getBinaryResponse`` and ``n8n`` ``webhooks/webhook-helpers.js`` ``setupResponseNodePromise``;
``webhook-last-node-response-extractor.js`` ``extractFirstEntryBinaryFromTaskData``):

- a *Respond to Webhook* node set to respond with **Binary File**, or a Webhook node answering
  *When Last Node Finishes* with **First Entry Binary**, sends the file's bytes as the whole body,
  labelled with the binary property's MIME type (``image/png``, ``application/pdf``, …) unless the
  node's own response headers say otherwise. n8n adds no file name: a ``Content-Disposition``
  header is there only when the workflow sets one in the node's *Response Headers*.
- quirk: *When Last Node Finishes* with **First Entry Binary** whose file is held in memory (n8n's
  default binary mode) sends it through express's ``res.json`` (``webhooks/webhook-request-handler.js``
  ``sendStaticResponse``): the body is the Node Buffer as JSON, ``{"type":"Buffer","data":[37,80,…]}``,
  still labelled with the file's type (``application/pdf; charset=utf-8``). Its bytes are the file.
- in *Streaming* mode a Respond to Webhook node with a file streams nothing (it calls
  ``sendResponse``, which only an execution in ``responseNode`` mode waits for): the body ends empty.

Such a body becomes one :class:`~runner_kit.events.Attachment` (a ``data:`` URL) for the chat; a
body labelled as text (``text/*``, JSON, XML) stays a text answer, and one that is not valid in its
charset is still an error.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import re
from email.message import EmailMessage

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.inputs import sniff

from . import const

MiB = 1024 * 1024
# LangBot carries one runner result of at most 16 MiB over the plugin connection
# (langbot_plugin/runtime/io/connection.py MAX_MESSAGE_BYTES), and a file travels in it base64-encoded
FILE_CAP = 10 * MiB
# images a chat shows as a picture; any other type (SVG too) is sent as a file
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
_TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript", "application/x-ndjson",
    "application/x-www-form-urlencoded", "application/ld+json",
})
_EXTENSIONS = {
    "image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/bmp": ".bmp",
    "image/svg+xml": ".svg", "application/pdf": ".pdf", "application/zip": ".zip", "text/csv": ".csv",
    "text/plain": ".txt", "application/json": ".json", "audio/mpeg": ".mp3", "audio/ogg": ".ogg",
    "video/mp4": ".mp4",
}
_MIME = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
# a Node Buffer serialised by res.json (the quirk above); each byte takes up to 4 characters ("255,")
_BUFFER_JSON = re.compile(rb'^\s*\{\s*"type"\s*:\s*"Buffer"\s*,\s*"data"\s*:\s*\[')
BUFFER_JSON_FACTOR = 4
_UNSAFE_NAME = re.compile(r'[\x00-\x1f\x7f<>:"|?*]')
DEFAULT_NAME = "n8n-file"


def mime_of(ctype: str) -> str:
    """The bare MIME type of a Content-Type header, lower case; "" when there is none or it is malformed."""
    mime = ctype.split(";", 1)[0].strip().lower()
    return mime if _MIME.match(mime) else ""


def _texty(mime: str) -> bool:
    if mime.startswith(("image/", "audio/", "video/")):  # image/svg+xml is a picture, not an answer to read
        return False
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _disposition(value: str) -> tuple[str, str | None]:
    """(``attachment``/``inline``/"", file name or None) of a Content-Disposition header."""
    if not value.strip():
        return "", None
    msg = EmailMessage()
    try:
        msg["content-disposition"] = value
        kind = (msg.get_content_disposition() or "").lower()
        name = msg.get_filename()
    except (ValueError, TypeError, IndexError):  # a malformed header names no file
        return value.split(";", 1)[0].strip().lower(), None
    return kind, (str(name) if name else None)


def is_file(ctype: str, disposition: str) -> bool:
    """Whether the answer is a file: sent as an attachment or with a file name, or labelled with a
    type that is not text (an image, a PDF, ``application/octet-stream``, …)."""
    kind, name = _disposition(disposition)
    if kind == "attachment" or name:
        return True
    mime = mime_of(ctype)
    return bool(mime) and not _texty(mime)


def buffer_json(head: bytes) -> bool:
    """Whether a file answer starts like a JSON-serialised Node Buffer (n8n's First Entry Binary quirk)."""
    return bool(_BUFFER_JSON.match(head[:64]))


def unwrap(raw: bytes) -> bytes:
    """The file's bytes: a JSON-serialised Node Buffer is decoded, anything else is the file itself."""
    if not buffer_json(raw):
        return raw
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw
    data = doc.get("data") if isinstance(doc, dict) and set(doc) == {"type", "data"} else None
    if not isinstance(data, list):
        return raw
    try:
        return bytes(data)  # ints 0..255 only; anything else raises
    except (TypeError, ValueError):
        return raw


def limit(max_bytes: int) -> int:
    """The largest file answer delivered: ``max-file-size-mb``, and never more than :data:`FILE_CAP`."""
    return max(1, min(int(max_bytes), FILE_CAP))


def too_large(size: int | None, most: int) -> RunnerError:
    got = f"of {size / MiB:.1f} MiB" if size is not None else "larger than that"
    if size is not None and f"{size / MiB:.1f}" == f"{most / MiB:.1f}":
        got = f"of more than {most / MiB:.1f} MiB"
    return RunnerError(
        "upstream.too_large",
        f"the {const.PLATFORM} workflow answered with a file {got}; the largest this bot delivers is "
        f"{most / MiB:.1f} MiB (max-file-size-mb, at most {FILE_CAP // MiB} MiB)",
    )


def _clean(name: str) -> str:
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    # printable only: a direction mark would show "invoice<RLO>fdp.exe" as "invoiceexe.pdf"
    name = _UNSAFE_NAME.sub("", "".join(c for c in name if c.isprintable())).strip(" .")
    return name[:120].strip(" .")


def _extension(mime: str) -> str:
    return _EXTENSIONS.get(mime) or mimetypes.guess_extension(mime, strict=False) or ".bin"


def attachment(data: bytes, mime: str, disposition: str) -> ev.Attachment:
    """The file for the chat: its bytes as a ``data:`` URL, its name from Content-Disposition or
    made up from its type (n8n sends none of its own)."""
    if not mime or mime == "application/octet-stream":  # unlabelled: a PNG still shows as a picture
        mime = sniff(data) or "application/octet-stream"
    _, given = _disposition(disposition)
    name = _clean(given or "") or DEFAULT_NAME + _extension(mime)
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return ev.Attachment(url=url, kind="image" if mime in IMAGE_TYPES else "file", name=name, mime_type=mime)
