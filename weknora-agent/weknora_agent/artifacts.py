"""Files WeKnora's agent skills produce (artifacts): what an answer announces, and how the chat names
them and the ones that are left out.

When the agent completes, WeKnora drains the skill sandbox's output directory into its own storage
and lists the new files on the ``complete`` event as ``data.artifacts`` — ``index``, ``file_name``,
``file_type``, ``file_size``, ``source_path``, ``mod_time``, ``created_at``, never the storage URL
(Tencent/WeKnora @412dcc41 internal/handler/session/agent_stream_handler.go handleComplete,
publicArtifactViews). Each is downloaded by its index in that list, in the caller's own session
(artifact_download.go DownloadMessageArtifact). A file's name is only ever shown: the download URL
is made of the session id, the message id and the index alone.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from runner_kit import outfiles
from runner_kit.errors import RunnerError
from runner_kit.texts import t

from . import const


@dataclass(frozen=True, slots=True)
class Artifact:
    index: int  # its position in the answer's artifact list (the download path's last id)
    name: str  # what the chat shows
    size: int | None  # the size WeKnora announced (None when it did not say)


def announced(value: Any) -> list[Artifact]:
    """The files a ``complete`` event's ``data.artifacts`` lists, each index once."""
    out: list[Artifact] = []
    seen: set[int] = set()
    for pos, item in enumerate(value if isinstance(value, list) else []):
        if not isinstance(item, dict):
            continue
        given = item.get("index")
        index = given if isinstance(given, int) and _count(given) else pos  # WeKnora numbers them by position
        if index in seen:
            continue
        seen.add(index)
        size = item.get("file_size")
        out.append(Artifact(index, display_name(item.get("file_name"), index), size if _count(size) else None))
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def display_name(raw: Any, index: int) -> str:
    """A file's name as the chat shows it: the last part of what WeKnora calls it, on one line and
    short (a name such as ``../../etc/passwd`` or a URL is only ever a label)."""
    text = str(raw or "").replace("\\", "/").split("?", 1)[0].rstrip("/")
    name = "".join(c for c in text.rsplit("/", 1)[-1] if c.isprintable()).strip()[:80]
    return name if name not in ("", ".", "..") else f"file-{index + 1}"


def url_segment(value: Any) -> str | None:
    """``value`` percent-encoded as one path segment; None for what no segment may be."""
    text = str(value or "")
    if text in ("", ".", ".."):
        return None
    return quote(text, safe="")


def mime_of(content_type: str, name: str) -> str:
    """The file's type: what WeKnora served, or — when it only said octet-stream (its type table
    knows few extensions) — what the name suggests."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if not mime or mime == "application/octet-stream":
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return mime


def likely_image(name: str) -> bool:
    """The name says the file is an image LangBot can show (those are fetched first)."""
    return mimetypes.guess_type(name)[0] in const.IMAGE_TYPES


def why_left_out(name: str, err: RunnerError, max_bytes: int, room: int) -> str:
    """One phrase of the not-attached note, in the run's language."""
    if (size := outfiles.too_large(name, err, max_bytes, room)) is not None:
        return size
    return t("'{name}' (it could not be downloaded from WeKnora)", "“{name}”（无法从 WeKnora 下载）", name=name)
