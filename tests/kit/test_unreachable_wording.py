"""Issue 34 item 4: "unreachable" is said as what it is. Nothing listening at the configured port, or a
host name that does not exist, is usually a wrong URL or port: the chat says which setting to check
and does not ask to try again. A passing outage (timeouts, 5xx, a network that is down) keeps "try
again". Real sockets on loopback, through the kit's own HTTP client."""

from __future__ import annotations

import socket

import httpx
import pytest

from runner_kit.explain import explanation
from runner_kit.http import transport_error
from tests.fakes.http_server import closed_port


async def _connect_error(url: str) -> httpx.ConnectError:
    async with httpx.AsyncClient(timeout=2.0) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get(url)
    return caught.value


def _chat(err) -> str:
    chat = getattr(err, "chat", None)
    return str(chat) if chat is not None else explanation("Dify", err.code, err.message)


async def test_nothing_listening_at_the_port_names_the_setting_not_a_retry():
    port = closed_port()
    err = transport_error(await _connect_error(f"http://127.0.0.1:{port}/v1"), "Dify", f"127.0.0.1:{port}")
    assert err.code == "upstream.unavailable"
    said = _chat(err)
    assert f"127.0.0.1:{port}" in said and "nothing accepts connections" in said
    assert "check the address in this bot's AI settings" in said and "try again" not in said.lower()


async def test_a_host_name_that_does_not_exist_names_the_setting():
    exc = httpx.ConnectError("[Errno -2] Name or service not known")
    exc.__cause__ = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    said = _chat(transport_error(exc, "Dify", "dify.invalid:443"))
    assert "no host has that name" in said and "AI settings" in said and "try again" not in said.lower()


@pytest.mark.parametrize("exc", [
    httpx.ConnectError("[Errno -3] Temporary failure in name resolution"),
    httpx.ConnectError("[Errno 101] Network is unreachable"),
    httpx.ConnectTimeout("timed out"),
], ids=["dns-down", "network-down", "connect-timeout"])
def test_a_passing_outage_keeps_try_again(exc):
    said = _chat(transport_error(exc, "Dify", "dify.example.com:443"))
    assert "try again" in said.lower() and "AI settings" not in said
