"""The user's input: text plus images and files from contents and attachments, size-capped.

Local files are never read on a chat user's say-so: a ``file://`` URL is refused, and an
attachment ``path`` is read only when its real path lies inside a directory the host admin listed
in ``RUNNER_KIT_FILE_DIRS`` (none by default; LangBot 4.11.2 pipelines never send paths).
An http(s) link stays a link (``InputFile.url``): it came with the message, so a plugin that needs
the bytes fetches it with :func:`download`, which reaches public addresses only unless an
administrator allows more (:mod:`runner_kit.netguard`, ``RUNNER_KIT_FETCH_ALLOW``); the host's own
files arrive as bytes and are never fetched.
An attachment that cannot be used is skipped, logged and named in ``UserInput.skipped``; a file
that is too large or not valid base64 fails the run, because the user sent something real.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import mimetypes
import os
import re
import stat
import unicodedata
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import RunnerError
from .logs import get_logger
from .netguard import fetch
from .wire import first_error

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
FILE_DIRS_ENV = "RUNNER_KIT_FILE_DIRS"
# base64 text or bytes larger than this are decoded / hashed in a worker thread, off the event loop
_OFF_LOOP_BYTES = 256 * 1024
_READ_CHUNK = 1024 * 1024


def read_at_most(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd`` (fewer at its end), read in chunks: a file that grows while it is
    read, or a device with no end, never takes more than ``n``."""
    chunks: list[bytes] = []
    total = 0
    while total < n:
        chunk = os.read(fd, min(_READ_CHUNK, n - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
_SLICE = 1024 * 1024  # characters of base64 handled per C call; a multiple of 4
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO or device must not stall the worker
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_B64_WHITESPACE = " \t\r\n\v\f"
_B64_BLANKS = _B64_WHITESPACE.encode()
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,19}")

log = get_logger("runner_kit.inputs")
_warned_dirs: set[str] = set()


@dataclass(slots=True)
class InputFile:
    """One image or file the user sent: bytes in hand, or a link that came with the message (for
    the upstream to fetch, or for :func:`download`; never fetched any other way)."""

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
    """What the user sent; ``skipped`` names each attachment that could not be used, and why."""

    text: str
    files: list[InputFile]
    params: dict[str, Any]
    skipped: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing usable is left: blank text and no files."""
        return not self.text.strip() and not self.files


T = TypeVar("T")
S = TypeVar("S")


async def upload_all(files: Sequence[S], upload: Callable[[S], Coroutine[Any, Any, T]]) -> list[T]:
    """``upload`` every file concurrently, results in the files' order; the first failure cancels
    the other uploads and is raised as itself (not as an exception group)."""
    if not files:
        return []
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(upload(f)) for f in files]
    except BaseExceptionGroup as group:
        raise first_error(group) from None
    return [t.result() for t in tasks]


async def download(f: InputFile, *, max_bytes: int, budget: float) -> bytes:
    """``f``'s bytes: its data, or its link fetched under :mod:`runner_kit.netguard`'s rules
    (public addresses only, redirects checked, at most ``max_bytes``, within ``budget`` seconds).

    A refused link is :class:`RunnerError` ``input.refused``; nothing is fetched from it.
    """
    if f.data is not None or f.url is None:
        return f.data or b""
    return (await fetch(f.url, label=_q(f.name), max_bytes=max_bytes, budget=budget)).data


# refused in file names by Windows and by upload routes (Dify 1.12.1 api/services/file_service.py
# answers 400 "Filename contains invalid characters" for any of them: "Screenshot 12:30.png" failed)
_NAME_FORBIDDEN = frozenset('/\\:*?"<>|')
# control, format (direction marks), line/paragraph separators, surrogates, private and unassigned
_NAME_DROPPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def safe_file_name(name: str, *, max_stem_bytes: int = 120, max_ext_chars: int = 16) -> str:
    """``name`` as every platform's upload takes it: path separators, ``:*?"<>|``, control and format
    characters and ``..`` become ``_``; leading and trailing dots and blanks go; the part before the
    extension is cut to ``max_stem_bytes`` of UTF-8 (an extension longer than ``max_ext_chars`` counts
    as part of the name). Never empty: ``file``."""
    clean = "".join("_" if ch in _NAME_FORBIDDEN or unicodedata.category(ch) in _NAME_DROPPED else ch
                    for ch in name or "").replace("..", "_").strip(" .")
    stem, dot, ext = clean.rpartition(".")
    if not dot or not stem or len(ext) > max_ext_chars or not ext.strip():
        stem, ext = clean, ""
    stem = stem.encode("utf-8")[:max_stem_bytes].decode("utf-8", "ignore").strip(" .") or "file"
    return f"{stem}.{ext.strip()}" if ext.strip() else stem


def upload_failed(name: str, err: RunnerError) -> RunnerError:
    """``err`` (a failed upload of ``name``) with the file named for the owner; code kept."""
    return RunnerError(err.code, f"uploading '{name}' failed: {err.message}", retryable=err.retryable, status=err.status)


class _Skip(Exception):
    """An attachment that cannot be used: ``reason`` is shown to the user, ``detail`` only logged."""

    def __init__(self, reason: str, *, detail: str = "", warn: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        self.warn = warn


async def collect_input(
    ctx: Any,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allowed_dirs: Iterable[str] | None = None,
    source: Any = None,
) -> UserInput:
    """Gather text, files and adapter params from the run context.

    ``allowed_dirs`` lists the directories an attachment ``path`` may be read from; None means
    the ``RUNNER_KIT_FILE_DIRS`` environment variable (os.pathsep-separated), read at call time.
    ``source`` is another input of the same shape as ``ctx.input`` (a steering follow-up's).
    """
    inp = ctx.input if source is None else source
    text = inp.to_text() or ""
    dirs = _allowed_dirs(allowed_dirs)
    files: list[InputFile] = []
    skipped: list[str] = []
    seen: set[str] = set()

    async def add(f: InputFile) -> None:
        key = f.url or await _digest(f.data or b"")
        if key not in seen:
            seen.add(key)
            files.append(f)

    def skip(s: _Skip) -> None:
        skipped.append(s.reason)
        level = logging.WARNING if s.warn else logging.INFO
        log.log(level, "input skipped: %s%s", s.reason, f" ({s.detail})" if s.detail else "")

    for n, el in enumerate(inp.contents or []):
        try:
            f = await _from_content(el, n, max_bytes)
        except _Skip as s:
            skip(s)
            continue
        if f is not None:
            await add(f)

    for n, att in enumerate(inp.attachments or []):
        try:
            f = await _from_attachment(att, n, max_bytes, dirs)
        except _Skip as s:
            skip(s)
            continue
        await add(f)

    params: dict[str, Any] = {}
    if ctx.adapter is not None and isinstance(ctx.adapter.extra, dict):
        raw = ctx.adapter.extra.get("params")
        if isinstance(raw, dict):
            params = dict(raw)
    return UserInput(text=text, files=files, params=params, skipped=skipped)


async def _from_content(el: Any, n: int, max_bytes: int) -> InputFile | None:
    t = el.type
    if t == "image_base64" and el.image_base64:
        return await _from_b64(el.image_base64, f"image-{n + 1}", "image", max_bytes)
    if t == "image_url" and el.image_url is not None and el.image_url.url:
        return await _from_url(el.image_url.url, f"image-{n + 1}", "image", max_bytes)
    if t == "file_base64" and el.file_base64:
        return await _from_b64(el.file_base64, el.file_name or f"file-{n + 1}", "file", max_bytes)
    if t == "file_url" and el.file_url:
        return await _from_url(el.file_url, el.file_name or f"file-{n + 1}", "file", max_bytes)
    return None


async def _from_attachment(att: Any, n: int, max_bytes: int, dirs: tuple[str, ...]) -> InputFile:
    kind = att.type or "file"
    name = att.name or f"{kind}-{n + 1}"
    if att.content:
        return await _from_b64(att.content, name, kind, max_bytes, att.mime_type)
    refused: _Skip | None = None
    if att.path:
        try:
            return await _from_path(att.path, name, kind, max_bytes, att.mime_type, dirs)
        except _Skip as s:
            if not att.url:
                raise
            refused = s
            log.warning("input: %s (%s); using its URL instead", s.reason, s.detail or "path refused")
    if att.url:
        try:
            return await _from_url(att.url, name, kind, max_bytes, att.mime_type)
        except _Skip as s:
            raise refused or s from None
    if att.id or att.ref:
        raise _Skip(f"{_q(name)} has only a platform media id")
    raise _Skip(f"{_q(name)} has no content, url or path")


def _q(name: str) -> str:
    """A user-supplied name, quoted and shortened for messages and logs."""
    name = name.replace("\n", " ").replace("\r", " ")
    return f"'{name[:77]}...'" if len(name) > 80 else f"'{name}'"


# a media type as it may go on in a header (a multipart part's Content-Type): a type, a subtype and
# printable parameters; a data: URL's or an attachment's type is the sender's text, and a line break
# in it would add headers of the sender's choosing to the request a plugin sends upstream
_MEDIA_TYPE = re.compile(r"[\w!#$&^.+-]+/[\w!#$&^.+-]+(?:[ \t]*;[ -~]*)?", re.ASCII)


def _media_type(given: str | None) -> str | None:
    """``given`` when it is a media type fit for a header, else None (the type is then guessed)."""
    value = (given or "").strip()
    return value if len(value) <= 255 and _MEDIA_TYPE.fullmatch(value) else None


def _mime(name: str, kind: str, given: str | None = None) -> str:
    given = _media_type(given)
    if given:
        return given
    guessed = mimetypes.guess_type(name)[0]
    if guessed:
        return guessed
    return "image/png" if kind == "image" else "application/octet-stream"


def _check_size(size: int, name: str, max_bytes: int) -> None:
    if size > max_bytes:
        mib, limit = f"{size / 1048576:.1f} MiB", f"{max_bytes / 1048576:.1f} MiB"
        if mib == limit:  # just over the limit: MiB would read "20.0 MiB; the limit is 20.0 MiB"
            mib, limit = f"{size} bytes", f"{max_bytes} bytes"
        raise RunnerError("input.too_large", f"{_q(name)} is {mib}; the limit is {limit} (max-file-size-mb)")


def _b64_size(value: str, start: int = 0) -> tuple[int, int]:
    """The exact decoded size of the base64 text ``value[start:]`` (whitespace ignored, ``=`` padding
    not counted), and how many whitespace characters it holds."""
    blanks = 0
    for i in range(start, len(value), _SLICE):  # slices keep each C call (and GIL hold) short
        piece = value[i : i + _SLICE].encode("utf-8", "surrogatepass")
        blanks += len(piece) - len(piece.translate(None, _B64_BLANKS))
    pad = 0
    for i in range(len(value) - 1, start - 1, -1):
        if value[i] == "=":
            pad += 1
        elif value[i] not in _B64_WHITESPACE:
            break
    return max(len(value) - start - blanks - pad, 0) * 3 // 4, blanks


def _b64decode(value: str, start: int, name: str, max_bytes: int) -> bytes:
    """Check the exact decoded size of ``value[start:]``, then decode it (large text in slices)."""
    size, blanks = _b64_size(value, start)
    _check_size(size, name, max_bytes)
    try:
        data = _b64decode_sliced(value, start, blanks > 0) if len(value) - start > _SLICE else None
        return data if data is not None else base64.b64decode(value[start:], validate=False)
    except (binascii.Error, ValueError):
        raise RunnerError("input.unreadable", f"{_q(name)} is not valid base64") from None


def _b64decode_sliced(value: str, start: int, blanks: bool) -> bytes | None:
    """Strict decoding slice by slice: the GIL is released between slices, so a worker thread
    decoding 20 MiB does not hold up the event loop for the whole decode. None when the text is not
    plain base64 (junk characters, inner padding): the caller then decodes it whole and leniently.
    """
    parts: list[bytes] = []
    carry = b""
    try:
        for i in range(start, len(value), _SLICE):
            piece = value[i : i + _SLICE].encode("ascii")
            if blanks:
                piece = carry + piece.translate(None, _B64_BLANKS)
                cut = len(piece) - len(piece) % 4
                piece, carry = piece[:cut], piece[cut:]
            parts.append(binascii.a2b_base64(piece, strict_mode=True))
    except (binascii.Error, ValueError):  # UnicodeEncodeError is a ValueError
        return None
    return None if carry else b"".join(parts)


async def _digest(data: bytes) -> str:
    if len(data) > _OFF_LOOP_BYTES:
        return await asyncio.to_thread(_sha1, data)
    return _sha1(data)


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


async def _from_b64(value: str, name: str, kind: str, max_bytes: int, mime: str | None = None) -> InputFile:
    start = 0
    if value[:5].lower() == "data:":
        start = value.find(",") + 1 or len(value)  # no copy of the payload here, on the loop
        mime = mime or value[5 : start - 1].split(";")[0].strip() or None
    # the exact size is checked before decoding, so a huge payload is refused without allocating it
    if len(value) - start > _OFF_LOOP_BYTES:
        data = await asyncio.to_thread(_b64decode, value, start, name, max_bytes)
    else:
        data = _b64decode(value, start, name, max_bytes)
    _check_size(len(data), name, max_bytes)
    return _file(data, name, kind, mime)


def _file(data: bytes, name: str, kind: str, mime: str | None) -> InputFile:
    mime = _media_type(mime) or sniff(data)
    if "." not in name and mime:
        name += mimetypes.guess_extension(mime) or ""
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), data=data)


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
)


def sniff(data: bytes) -> str | None:
    """The MIME type of common images, PDFs and zip archives from their first bytes (platforms check
    extensions; an upstream's file answer may come unlabelled)."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


async def _from_url(url: str, name: str, kind: str, max_bytes: int, mime: str | None = None) -> InputFile:
    """data: URLs are decoded; http(s) URLs stay URLs for the platform to fetch; nothing else is used."""
    url = url.strip()
    head, sep, _ = url.partition(":")
    scheme = head.lower() if sep else ""
    if scheme == "data":
        return await _from_b64(url, name, kind, max_bytes, mime)
    if scheme == "file":
        raise _Skip(
            f"{_q(name)} is a local file:// URL, which is never read", detail="file:// URL", warn=True
        )
    if scheme not in ("http", "https"):
        shown = scheme if _SCHEME.fullmatch(scheme) else ""
        raise _Skip(f"{_q(name)} has an unsupported URL scheme" + (f" ({shown}:)" if shown else ""))
    base = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if base and "." in base and name.startswith((kind + "-", "file-", "image-")):
        name = base
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), url=url)


def _allowed_dirs(given: Iterable[str] | None) -> tuple[str, ...]:
    """The absolute, normalised directories attachment paths may be read from (empty: none)."""
    if given is None:
        given = os.environ.get(FILE_DIRS_ENV, "").split(os.pathsep)
    elif isinstance(given, str):
        given = given.split(os.pathsep)
    out: list[str] = []
    for d in given:
        d = d.strip()
        if not d:
            continue
        if "\0" in d or not os.path.isabs(d):
            if d not in _warned_dirs:
                _warned_dirs.add(d)
                log.warning("%s: ignoring %r, which is not an absolute directory", FILE_DIRS_ENV, d)
            continue
        out.append(os.path.normpath(d))
    return tuple(out)


def _inside(path: str, directory: str) -> bool:
    base = directory.rstrip(os.sep)
    return path == directory or path.startswith(base + os.sep)


async def _from_path(
    path: str, name: str, kind: str, max_bytes: int, mime: str | None, dirs: tuple[str, ...]
) -> InputFile:
    shown = repr(path[:200])
    if not dirs:
        raise _Skip(
            f"{_q(name)} is a local path, and reading local files is not enabled",
            detail=f"path={shown}; set {FILE_DIRS_ENV} to allow directories",
            warn=True,
        )
    if "\0" in path or not os.path.isabs(path):
        raise _Skip(
            f"{_q(name)} has a path outside the allowed directories", detail=f"path={shown}", warn=True
        )
    if name.startswith(kind + "-") and "." in os.path.basename(path):
        name = os.path.basename(path)
    data = await asyncio.to_thread(_read_allowed, path, dirs, name, max_bytes)
    return InputFile(name=name, kind=kind, mime_type=_mime(name, kind, mime), data=data)


def _read_allowed(path: str, dirs: tuple[str, ...], name: str, max_bytes: int) -> bytes:
    """Read a regular file whose real path lies inside one of ``dirs`` (runs in a worker thread).

    A path outside the directories, even lexically, is refused before the file system is asked
    anything about it; a FIFO, device or directory is refused without blocking.
    """
    outside = _Skip(
        f"{_q(name)} has a path outside the allowed directories", detail=f"path={path[:200]!r}", warn=True
    )
    try:
        real_dirs = tuple(os.path.realpath(d) for d in dirs)
        if not any(_inside(os.path.normpath(path), d) for d in dirs + real_dirs):
            raise outside
        real = os.path.realpath(path)
        if not any(_inside(real, d) for d in real_dirs):
            raise outside  # a symlink or '..' leading out of the allowed directories
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            raise _Skip(f"{_q(name)} is not a regular file", detail=f"path={path[:200]!r}", warn=True)
        _check_size(st.st_size, name, max_bytes)
        fd = os.open(real, _OPEN_FLAGS)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                raise _Skip(f"{_q(name)} changed while being read", detail=f"path={path[:200]!r}", warn=True)
            _check_size(fst.st_size, name, max_bytes)
            data = read_at_most(fd, max_bytes + 1)
            total = len(data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _Skip(
            f"cannot read {_q(name)}: {exc.strerror or type(exc).__name__}",
            detail=f"path={path[:200]!r}",
            warn=True,
        ) from None
    _check_size(total, name, max_bytes)
    return data
