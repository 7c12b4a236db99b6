"""Request credentials for the Webhook node's Authentication: none, basic, JWT or a header.

JWTs are signed per request with the shared secret (HS256/HS384/HS512, stdlib ``hmac``) and expire
shortly after: n8n checks the token when the request arrives, so a short life is all it needs.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import hmac
import json
import re
import time
import uuid
from typing import Any

from runner_kit.errors import RunnerError

from . import const

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_jwt(secret: str, algorithm: str, claims: dict[str, Any]) -> str:
    """A compact JWS of ``claims`` signed with ``secret`` (HS256, HS384 or HS512)."""
    alg = algorithm.strip().upper()
    digest = const.JWT_ALGORITHMS.get(alg)
    if digest is None:
        raise RunnerError(
            "config.invalid",
            f"config key 'jwt-algorithm' is {algorithm!r}; this runner signs with HS256, HS384 or HS512 "
            "(a shared secret). Set the n8n JWT credential to one of those, with the same secret",
        )
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    signature = hmac.new(secret.encode("utf-8"), signing_input, getattr(hashlib, digest)).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def _basic(user: str, password: str, encoding: str) -> str:
    enc = (encoding or "latin1").strip() or "latin1"
    try:
        codecs.lookup(enc)
    except LookupError:
        raise RunnerError(
            "config.invalid", f"config key 'basic-encoding' is {encoding!r}, which is not a text encoding (use latin1 or utf-8)"
        ) from None
    try:
        raw = f"{user}:{password}".encode(enc)
    except UnicodeEncodeError:
        raise RunnerError(
            "config.invalid",
            f"the basic-auth user name or password has characters {enc} cannot encode; set basic-encoding to utf-8 "
            "(n8n reads Basic credentials as UTF-8)",
        ) from None
    return "Basic " + base64.b64encode(raw).decode("ascii")


def _need(cfg: Any, key: str, auth: str) -> str:
    value = str(cfg.get(key) or "")
    if not value:
        raise RunnerError("config.missing", f"config key '{key}' is required when auth-type is {auth}")
    return value


def auth_headers(cfg: Any, now: float | None = None) -> dict[str, str]:
    """The headers this request authenticates with; raises config.* for an unusable setting."""
    auth = str(cfg.get("auth-type") or "none").strip().lower()
    if auth == "none":
        return {}
    if auth == "basic":
        user = _need(cfg, "basic-username", auth)
        return {"Authorization": _basic(user, str(cfg.get("basic-password") or ""), str(cfg.get("basic-encoding") or ""))}
    if auth == "jwt":
        secret = _need(cfg, "jwt-secret", auth)
        issued = int(time.time() if now is None else now)
        claims = {"iat": issued, "exp": issued + const.JWT_LIFETIME, "sub": "n8n-webhook", "iss": "langbot",
                  "jti": uuid.uuid4().hex}
        return {"Authorization": "Bearer " + sign_jwt(secret, str(cfg.get("jwt-algorithm") or "HS256"), claims)}
    if auth == "header":
        name = _need(cfg, "header-name", auth).strip()
        if not _TOKEN.match(name):
            raise RunnerError("config.invalid", f"config key 'header-name' ({name[:60]!r}) is not a valid HTTP header name")
        return {name: _need(cfg, "header-value", auth)}
    raise RunnerError("config.invalid", f"config key 'auth-type' must be one of: {', '.join(const.AUTH_TYPES)}")
