"""Images sent as data, put into DashScope's temporary storage so an app can read them.

The application API takes images only as links (``input.image_list``). An image that arrived as
bytes goes through the temporary storage the API key itself may use (Alibaba Cloud Model Studio,
"Upload a local file to obtain a temporary URL"; the same two steps as the dashscope SDK's
``dashscope/utils/oss_utils.py`` ``OssUtils.upload``):

1. ``GET {base}/uploads?action=getPolicy&model=<model>`` with the API key answers
   ``{"data": {"policy", "signature", "upload_dir", "upload_host", "expire_in_seconds",
   "max_file_size_mb", "oss_access_key_id", "x_oss_object_acl", "x_oss_forbid_overwrite"}}``.
2. A form POST to ``upload_host`` (an OSS bucket) with those fields, ``key`` =
   ``<upload_dir>/<file name>`` and the file last; 200 (``success_action_status``) is success, an
   XML ``<Error><Code>…</Code><Message>…</Message></Error>`` is not.

The object is then ``oss://<key>``, which a request carrying ``X-DashScope-OssResourceResolve:
enable`` may name. The storage keeps it 48 hours, for that model and account only.

``upload_host`` comes from DashScope's answer: it is posted to only when every address it resolves
to is public (or an administrator allowed it in ``RUNNER_KIT_FETCH_ALLOW``), as a link from the chat
would be fetched. File names are not sent: each object gets a random name with the image's
extension.
"""

from __future__ import annotations

import mimetypes
import re
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from runner_kit.errors import RunnerError
from runner_kit.http import open_stream, read_json
from runner_kit.inputs import InputFile
from runner_kit.logs import get_logger
from runner_kit.netguard import AllowList, checked_addresses, shown_host

from . import const
from .errors import parse_envelope

log = get_logger("runner_kit.dashscope")

_POLICY_FIELDS = ("policy", "signature", "upload_dir", "upload_host", "oss_access_key_id")
_OSS_ERROR = re.compile(r"<Code>([^<]{1,80})</Code>.*?<Message>([^<]{0,300})</Message>", re.S)
_SAFE_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}")


@dataclass(slots=True)
class Policy:
    """One upload policy (valid for a few minutes, for any number of files)."""

    fields: dict[str, Any]
    host: str
    directory: str
    max_bytes: int | None


class UploadError(Exception):
    """An image could not be put into the temporary storage; ``why`` is short and fit for the chat."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


async def get_policy(client: httpx.AsyncClient, base: str, api_key: str, model: str, budget: float) -> Policy:
    """Step 1: a policy for ``model``; :class:`UploadError` when DashScope refuses or answers oddly."""
    try:
        async with open_stream(client, "GET", base + const.UPLOADS_PATH, budget=budget, platform=const.PLATFORM,
                               error_parser=parse_envelope, params={"action": "getPolicy", "model": model},
                               headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"}) as resp:
            doc = await read_json(resp, const.PLATFORM, limit=256 * 1024)
    except RunnerError as err:
        raise UploadError(err.message) from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) and data.get(k) for k in _POLICY_FIELDS):
        raise UploadError("DashScope gave no usable upload policy")
    size = data.get("max_file_size_mb")
    max_bytes = int(float(size) * 1024 * 1024) if isinstance(size, (int, float)) and size > 0 else None
    fields = {
        "OSSAccessKeyId": data["oss_access_key_id"],
        "Signature": data["signature"],
        "policy": data["policy"],
        "x-oss-object-acl": str(data.get("x_oss_object_acl") or "private"),
        "x-oss-forbid-overwrite": str(data.get("x_oss_forbid_overwrite") or "true"),
        "success_action_status": "200",
    }
    return Policy(fields, data["upload_host"], data["upload_dir"].rstrip("/"), max_bytes)


async def _check_host(url: str, budget: float) -> None:
    """The upload host DashScope named is public, or allowed by the administrator."""
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise UploadError("DashScope named an upload address that is not valid") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise UploadError("DashScope named an upload address that is not http(s)")
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        await checked_addresses(target.host, port, allow=AllowList.from_env(), timeout=min(budget, 10.0))
    except RunnerError as err:
        if err.code == "input.refused":
            log.warning("%s: not uploading to %s, which DashScope named: it is not a public address",
                        const.PLATFORM, shown_host(target.host))
            raise UploadError(f"DashScope named an upload address that is not public ({shown_host(target.host)})") \
                from None
        raise UploadError(err.message) from None


def _oss_error(status: int, body: bytes, ctype: str) -> RunnerError:
    found = _OSS_ERROR.search(body.decode("utf-8", "replace"))
    detail = f"{found.group(1)}: {found.group(2)}" if found else "no details"
    return RunnerError("upstream.bad_request", f"the storage answered HTTP {status} ({detail[:200]})", status=status)


def object_name(f: InputFile) -> str:
    """A random name with the image's extension (nothing the sender chose goes up)."""
    ext = mimetypes.guess_extension(f.mime_type or "") or ""
    if not ext:
        tail = "." + f.name.rsplit(".", 1)[-1] if "." in f.name else ""
        ext = tail if _SAFE_EXT.fullmatch(tail) else ""
    return uuid.uuid4().hex + ext.lower()


async def upload(client: httpx.AsyncClient, policy: Policy, f: InputFile, budget: float) -> str:
    """Step 2: ``f``'s bytes into the storage; its ``oss://`` link."""
    data = f.data or b""
    if policy.max_bytes is not None and len(data) > policy.max_bytes:
        raise UploadError(f"it is larger than the {policy.max_bytes // (1024 * 1024)} MiB the storage takes")
    await _check_host(policy.host, budget)
    key = f"{policy.directory}/{object_name(f)}"
    form = {**policy.fields, "key": key, "x-oss-content-type": f.mime_type or "application/octet-stream"}
    try:
        async with open_stream(client, "POST", policy.host, budget=budget, platform="DashScope's temporary storage",
                               error_parser=_oss_error, data=form,
                               files={"file": (key.rsplit("/", 1)[-1], data, f.mime_type or "application/octet-stream")}):
            pass
    except RunnerError as err:
        raise UploadError(err.message) from None
    return "oss://" + key
