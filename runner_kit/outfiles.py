"""Files a platform produces, attached to the answer inline (WeKnora's artifacts, DeerFlow's
presented files): how many, how large in all, which first, and the one line naming what was left out.

The answer and its files travel to LangBot in one result, which LangBot 4.11.2 cuts over
:data:`~runner_kit.results.HOST_RESULT_LIMIT`; an inline file is base64 (4/3 of its bytes). Images
come first: LangBot shows an inline image, and names any other inline file only (see
:meth:`runner_kit.results.ResultBuilder._message`).
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Callable, Sequence
from typing import TypeVar

from . import events as ev
from .errors import RunnerError
from .results import HOST_RESULT_LIMIT
from .texts import t

MAX_FILES = 10  # files attached to one answer at most; the others are named
MAX_NAMED = 20  # files named one by one in the not-attached line (the rest are counted)
BUDGET = 600 * 1024  # the bytes of all one answer's files
RESULT_MARGIN = 64 * 1024  # the message's envelope, a note, the file names

T = TypeVar("T")


def room(text_len: int) -> int:
    """The file bytes one answer of ``text_len`` (escaped) characters still has room for."""
    return max(0, min(BUDGET, (HOST_RESULT_LIMIT - RESULT_MARGIN - text_len) * 3 // 4))


def images_first(items: Sequence[T], name_of: Callable[[T], str]) -> list[T]:
    """``items`` with those whose name says image first (the chat shows them), order kept otherwise."""
    return sorted(items, key=lambda i: not str(mimetypes.guess_type(name_of(i))[0] or "").startswith("image/"))


def attachment(data: bytes, mime: str, name: str, image: bool | None = None) -> ev.Attachment:
    """``data`` as an inline attachment (an image when ``image``, by default when ``mime`` says so)."""
    url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    kind = "image" if (mime.startswith("image/") if image is None else image) else "file"
    return ev.Attachment(url=url, kind=kind, name=name, mime_type=mime)


def size_text(n: int) -> str:
    return f"{n / 1048576:.3g} MiB" if n >= 1048576 else f"{max(1, round(n / 1024))} KiB"


def too_many(name: str, limit: int = MAX_FILES) -> str:
    """The not-attached phrase for a file past ``limit`` files (:data:`MAX_FILES`)."""
    return t("'{name}' (more than {n} files)", "“{name}”（超过 {n} 个文件）", name=name, n=limit)


def too_large(name: str, err: RunnerError, max_bytes: int, left: int) -> str | None:
    """The not-attached phrase for a file over ``max-file-size-mb`` or what was ``left`` of the
    answer's room; None when ``err`` is not about size."""
    if err.code != "input.too_large":
        return None
    if left < max_bytes:
        return t("'{name}' (larger than one LangBot message can carry)", "“{name}”（超出一条 LangBot 消息能携带的大小）",
                 name=name)
    return t("'{name}' (larger than {size}, the file size limit)", "“{name}”（超过文件大小上限 {size}）",
             name=name, size=size_text(max_bytes))


def left_out_note(phrases: Sequence[str]) -> str:
    """The line after the answer naming the files that were not attached (short, however many)."""
    shown = list(phrases[:MAX_NAMED])
    files = "; ".join(shown)
    if len(phrases) > len(shown):
        files += t("; {n} more", "；另外 {n} 个", n=len(phrases) - len(shown))
    return "\n\n" + t("(Not attached: {files}.)", "（未附上：{files}。）", files=files)
