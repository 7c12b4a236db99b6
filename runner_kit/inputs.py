"""The user's input: text plus images and files from contents and attachments, size-capped."""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import os
from dataclasses import dataclass
from typing import Any

from .errors import RunnerError

DEFAULT_MAX_BYTES = 20 * 1024 * 1024


@dataclass(slots=True)
class InputFile:
    """One image or file the user sent: bytes in hand, or a URL for the upstream to fetch."""

    name: str
    kind: str  # image | file | voice
    mime_type: str
    data: bytes | None = None
    url: str | None = None

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0


@dataclass(slots=True)
class UserInput:
    text: str
    files: list[InputFile]
    params: dict[str, Any]


def collect_input(ctx: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> UserInput:
    """Gather text, files and adapter params from the run context."""
    inp = ctx.input
    text = inp.to_text() or ""
    files: list[InputFile] = []
    seen: set[str] = set()

    def add(f: InputFile) -> None:
        key = f.url or hashlib.sha1(f.data or b"").hexdigest()
        if key not in seen:
            seen.add(key)
            files.append(f)

    for n, el in enumerate(inp.contents or []):
        t = el.type
        if t == "image_base64" and el.image_base64:
            add(_from_b64(el.image_base64, f"image-{n + 1}", "image", max_bytes))
        elif t == "image_url" and el.image_url is not None and el.image_url.url:
            add(_from_url(el.image_url.url, f"image-{n + 1}", "image", max_bytes))
        elif t == "file_base64" and el.file_base64:
            add(_from_b64(el.file_base64, el.file_name or f"file-{n + 1}", "file", max_bytes))
        elif t == "file_url" and el.file_url:
            add(_from_url(el.file_url, el.file_name or f"file-{n + 1}", "file", max_bytes))

    for n, att in enumerate(inp.attachments or []):
        kind = att.type or "file"
        name = att.name or f"{kind}-{n + 1}"
        if att.content:
            f = _from_b64(att.content, name, kind, max_bytes, att.mime_type)
        elif att.path:
            f = _from_path(att.path, name, kind, max_bytes, att.mime_type)
        elif att.url:
            f = _from_url(att.url, name, kind, max_bytes, att.mime_type)
        else:
            raise RunnerError("input.unreadable", f"attachment '{name}' has no content, path or url")
        add(f)

    params: dict[str, Any] = {}
    if ctx.adapter is not None and isinstance(ctx.adapter.extra, dict):
        raw = ctx.adapter.extra.get("params")
        if isinstance(raw, dict):
            params = dict(raw)
    return UserInput(text=text, files=files, params=params)


def _mime(name: str, kind: str, given: str | None = None) -> str:
    if given:
        return given
    guessed = mimetypes.guess_type(name)[0]
    if guessed:
        return guessed
    return "image/png" if kind == "image" else "application/octet-stream"


def _check_size(size: int, name: str, max_bytes: int) -> None:
    if size > max_bytes:
        raise RunnerError(
            "input.too_large",
            f"'{name}' is {size / 1048576:.1f} MiB; the limit is {max_bytes / 1048576:.1f} MiB (max-file-size)",
        )


def _from_b64(value: str, name: str, kind: str, max_bytes: int, mime: str | None = None) -> InputFile:
    if value.startswith("data:"):
        header, _, value = value.partition(",")
        mime = mime or header[5:].split(";")[0] or None
    # estimate before decoding so a huge payload is refused without allocating it twice
    _check_size(len(value) * 3 // 4, name, max_bytes)
    try:
        data = base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise RunnerError("input.unreadable", f"'{name}' is not valid base64") from None
    _check_size(len(data), name, max_bytes)
    mime = mime or _sniff(data)
    if "." not in name and mime:
        name += mimetypes.guess_extension(mime) or ""
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), data=data)


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def _sniff(data: bytes) -> str | None:
    """The MIME type of common images and PDFs from their first bytes (platforms check extensions)."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _from_url(url: str, name: str, kind: str, max_bytes: int, mime: str | None = None) -> InputFile:
    if url.startswith("data:"):
        return _from_b64(url, name, kind, max_bytes, mime)
    if url.startswith("file://"):
        return _from_path(url[7:], name, kind, max_bytes, mime)
    if not url.startswith(("http://", "https://")):
        raise RunnerError("input.unreadable", f"'{name}' has an unsupported URL scheme")
    base = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if base and "." in base and name.startswith((kind + "-", "file-", "image-")):
        name = base
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), url=url)


def _from_path(path: str, name: str, kind: str, max_bytes: int, mime: str | None = None) -> InputFile:
    try:
        size = os.path.getsize(path)
        _check_size(size, name, max_bytes)
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except RunnerError:
        raise
    except OSError as exc:
        raise RunnerError("input.unreadable", f"cannot read attachment '{name}': {exc.strerror or exc}") from None
    _check_size(len(data), name, max_bytes)
    if name.startswith(kind + "-") and "." in os.path.basename(path):
        name = os.path.basename(path)
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), data=data)
