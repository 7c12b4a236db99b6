"""A loopback stand-in for the three LICOS platform endpoints the LICOS agent runtime calls when it
is given a platform (``LICOS_PLATFORM_API_BASE_URL``): enough for managed (``agent_runtime``) runs,
session memory and the credit check to work without the LICOS cloud. The runtime side stays real;
what these answer follows licos-managed/README.md and the runtime's own parsers
(``licos_agent_runtime.session_files``, ``credit_availability``, ``licos_platform_sdk._runtime``).

- ``GET /api/v1/admin/auth/me`` (``Authorization: Bearer <user token>``) → ``{"code": 0, "data":
  {"id": <user id>}}`` for a token in ``users``; otherwise 401 ``{"code": 401, ...}``.
- ``POST /api/v1/internal/auth/ai-user-token`` (Bearer = ``agent_token``, body ``{"userId"}``) →
  ``{"code": 0, "data": {"accessToken": ...}}``, a token that ``auth/me`` then knows.
- ``POST /api/v1/admin/billing/credits/availability/check`` → ``{"code": 0, "data": {"allowed":
  true}}``, or ``allowed: false`` for a user in ``broke_users`` (the runtime answers 402 then).

Recorded: ``requests`` (base class).
"""

from __future__ import annotations

from .http_server import FakeHTTPServer, Request, Response

__all__ = ["FakeLicosPlatform"]


class FakeLicosPlatform(FakeHTTPServer):
    server_name = "fake-licos-platform"

    def __init__(self, *, agent_token: str = "sk-agent", users: dict[str, str] | None = None, port: int = 0) -> None:
        super().__init__(port=port)
        self.agent_token = agent_token
        #: user bearer token -> user id
        self.users: dict[str, str] = dict(users or {"sk-test": "user-1"})
        self.broke_users: set[str] = set()
        self.add_route("GET", "/api/v1/admin/auth/me", self._me)
        self.add_route("POST", "/api/v1/internal/auth/ai-user-token", self._ai_user_token)
        self.add_route("POST", "/api/v1/admin/billing/credits/availability/check", self._credit_check)

    @staticmethod
    def _bearer(req: Request) -> str:
        value = req.headers.get("authorization", "")
        return value[7:].strip() if value.lower().startswith("bearer ") else ""

    async def _unauthorized(self, resp: Response) -> None:
        await resp.json(401, {"code": 401, "message": "unauthorized", "data": None, "success": False})

    async def _me(self, req: Request, resp: Response) -> None:
        user = self.users.get(self._bearer(req))
        if user is None:
            await self._unauthorized(resp)
            return
        await resp.json(200, {"code": 0, "message": "success", "data": {"id": user, "name": user}, "success": True})

    async def _ai_user_token(self, req: Request, resp: Response) -> None:
        if self._bearer(req) != self.agent_token:
            await self._unauthorized(resp)
            return
        user = str((req.json() or {}).get("userId") or "")
        if not user:
            await resp.json(400, {"code": 400, "message": "userId is required", "data": None, "success": False})
            return
        token = f"ai-user-token-{user}"
        self.users[token] = user
        await resp.json(200, {"code": 0, "message": "success", "data": {"accessToken": token}, "success": True})

    async def _credit_check(self, req: Request, resp: Response) -> None:
        if self._bearer(req) not in self.users:
            await self._unauthorized(resp)
            return
        user = req.headers.get("x-licos-current-user-id", "")
        if user in self.broke_users:
            data = {"allowed": False, "reasonMessage": "积分余额不足，请订阅或增购后继续使用"}
        else:
            data = {"allowed": True}
        await resp.json(200, {"code": 0, "message": "success", "data": data, "success": True})
