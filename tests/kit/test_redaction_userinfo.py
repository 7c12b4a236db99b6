"""A URL's ``user:password@`` and credential query parameters are secrets: the generic rule every
redactor applies, the filter on httpx's and httpcore's log lines, the run's redactor learning them
from config and ``base_url()``, and the request that still authenticates without them in its URL.
(Every plugin's failure paths: tests/contract/test_redaction_userinfo.py.)"""

from __future__ import annotations

import base64
import logging

import httpx
import pytest

from runner_kit.config import ConfigSchema
from runner_kit.errors import Redactor, config_secrets, secret_name, url_userinfo
from runner_kit.explain import explanation, failure_log, incomplete_note
from runner_kit.host_api import _reason
from runner_kit.http import base_url, close_shared_client, open_stream, shared_client, shown_url
from runner_kit.logs import RedactingFilter, bind_redactor, redact_log, unbind_redactor
from tests.fakes.http_server import FakeHTTPServer, closed_port
from tests.helpers import dump, failure, make_runner, messages, rtype, run

PASSWORD = "S3cr3t-pw"


@pytest.fixture(autouse=True)
async def _close_client():
    yield
    await close_shared_client()


# --- the generic rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("POST http://alice:S3cr3t-pw@127.0.0.1:8080/v1/chat", "POST http://***@127.0.0.1:8080/v1/chat"),
        ("https://u:p%40ss@example.com", "https://***@example.com"),
        ("HTTPS://ghp_token1234@git.example.com/x.git", "HTTPS://***@git.example.com/x.git"),
        ("http://u:p@ss@h:1/p", "http://***@h:1/p"),  # an unescaped @ in the password
        ("ws://a:b@h and http://c:d@k/", "ws://***@h and http://***@k/"),
        ("'http://alice:pw@h/'", "'http://***@h/'"),
        ("http://***@h", "http://***@h"),  # already redacted stays the same
    ],
)
def test_userinfo_is_redacted_and_the_host_kept(text, shown):
    assert Redactor()(text) == shown


@pytest.mark.parametrize(
    "text",
    ["mail alice@example.com", "http://h:80/users/a@b", "http://h/p?x=a@b", "mailto:a@b.example", "no url at all"],
)
def test_text_without_userinfo_is_left_alone(text):
    assert Redactor()(text) == text


@pytest.mark.parametrize("param", ["key", "api_key", "token", "access_token", "sign", "signature", "password"])
def test_credential_query_parameters_are_redacted(param):
    out = Redactor()(f"GET https://h/files/a.png?x=1&{param}=Zx9Qv7Lm&y=2")
    assert "Zx9Qv7Lm" not in out and f"{param}=***" in out and "x=1" in out and "y=2" in out


def test_the_generic_rule_holds_outside_any_run():
    """Log lines of no run (a pool's connection closing, another task) still lose the userinfo."""
    assert redact_log(f"http://alice:{PASSWORD}@h/") == "http://***@h/"


# --- which config values are secrets ------------------------------------------------------------


def test_url_userinfo_gives_the_pair_the_password_and_decoded_forms():
    assert url_userinfo("x http://alice:p%40ss@h/ y") == ["alice:p%40ss", "p%40ss", "alice:p@ss", "p@ss"]
    assert url_userinfo("http://tok123@h") == ["tok123"]
    assert url_userinfo("http://h:1/") == []


@pytest.mark.parametrize("name", ["api-key", "apiKey", "OPENAI_API_KEY", "auth-token", "jwt-secret", "basic-password",
                                  "Authorization", "x-api-key", "key", "access_key", "ANTHROPIC_AUTH_TOKEN"])
def test_secret_names(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["env-key", "max_tokens", "keyword", "monkey", "header-name", "base-url", "model"])
def test_names_that_are_not_secrets(name):
    assert not secret_name(name)


def test_secrets_hide_in_json_header_pairs_and_env_lines():
    found = config_secrets({
        "servers": {"gh": {"url": "https://bob:hunter22@mcp.example.com/sse",
                           "headers": {"Authorization": "Bearer tok-abcdef"}, "env": {"GITHUB_TOKEN": "ghp_xyz123"}}},
        "pairs": [{"name": "X-Api-Key", "value": "pair-secret"}],
        "tweaks": '{"OpenAI-1": {"api_key": "sk-in-a-string", "max_tokens": "4096"}}',
        "env": "FOO=bar\nexport OPENAI_API_KEY=\"sk-env-value\"\nLOG_LEVEL=debug",
        "env-key": "OPENAI_API_KEY",
    })
    for secret in ("bob:hunter22", "hunter22", "Bearer tok-abcdef", "tok-abcdef", "ghp_xyz123", "pair-secret",
                   "sk-in-a-string", "sk-env-value"):
        assert secret in found, secret
    for plain in ("4096", "bar", "debug", "OPENAI_API_KEY"):
        assert plain not in found, plain


def test_loaded_config_carries_every_secret_for_the_run():
    schema = ConfigSchema.from_items([
        {"name": "base-url", "type": "string"},
        {"name": "api-key", "type": "secret"},
        {"name": "header-value", "type": "secret"},
        {"name": "env", "type": "text"},
    ])
    config = schema.load({"base-url": f"http://alice:{PASSWORD}@127.0.0.1:9/v1", "api-key": "key-one-1",
                          "header-value": "hv-two-2", "env": "MY_SECRET=env-three-3", "extra": {"token": "t-four-4"}})
    for secret in (PASSWORD, f"alice:{PASSWORD}", "key-one-1", "hv-two-2", "env-three-3", "t-four-4"):
        assert secret in config.secrets, secret
    assert config["base-url"] == f"http://alice:{PASSWORD}@127.0.0.1:9/v1"  # the value itself is untouched


def test_base_url_adds_its_userinfo_to_the_run_redactor_only():
    run_redactor = Redactor()
    token = bind_redactor(run_redactor)
    try:
        got = base_url(f"http://alice:{PASSWORD}@127.0.0.1:9/api/", "base-url", suffixes=("/api",))
        assert got == f"http://alice:{PASSWORD}@127.0.0.1:9"  # still sent (as Basic)
        assert run_redactor(f"the password is {PASSWORD}") == "the password is ***"
    finally:
        unbind_redactor(token)
    base_url("http://carol:other-pw-1@h/", "base-url")  # outside a run: nothing is kept anywhere
    assert "other-pw-1" in Redactor()("other-pw-1") and redact_log("other-pw-1") == "other-pw-1"


def test_shown_url_drops_userinfo_and_query():
    assert shown_url(f"http://alice:{PASSWORD}@127.0.0.1:9/api?key=1") == "http://127.0.0.1:9/api"
    assert shown_url("https://u@[::1]:8443/x") == "https://[::1]:8443/x"


# --- what the chat reads -------------------------------------------------------------------------


def test_explanations_and_the_failure_log_never_show_userinfo():
    message = f"no API answered at http://alice:{PASSWORD}@10.0.0.5:2026 (tried /api)"
    for text in (explanation("DeerFlow", "config.invalid", message), incomplete_note("DeerFlow", "x", message),
                 failure_log("config.invalid", False, message)):
        assert PASSWORD not in text and "alice" not in text
        assert "http://***@10.0.0.5:2026" in text


def test_host_error_text_is_redacted_before_it_is_cut():
    """LangBot's model error may carry the provider's URL; a cut must not keep half a password."""
    text = "RequesterError: " + "x" * 250 + f" at http://alice:{PASSWORD}@llm.example.com/v1/chat"
    reason = _reason(text)
    assert "S3cr" not in reason and "alice" not in reason


# --- httpx's and httpcore's log lines ------------------------------------------------------------


class _Echo(FakeHTTPServer):
    def __init__(self) -> None:
        super().__init__()
        self.add_route("POST", "/v1/run", self._run)

    async def _run(self, req, resp) -> None:
        await resp.json(200, {"ok": True})


@pytest.fixture
def echo():
    with _Echo() as srv:
        yield srv


async def test_httpx_request_lines_carry_no_userinfo_or_key(echo, caplog):
    caplog.set_level(logging.DEBUG)
    url = echo.root_url.replace("://", f"://alice:{PASSWORD}@") + "/v1/run?key=QueryK3y&x=1"
    async with open_stream(shared_client(), "POST", url, budget=2.0, platform="Echo", json={}) as resp:
        assert resp.status_code == 200
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("HTTP Request: POST http://127.0.0.1:") for line in lines), lines
    assert not [line for line in lines if PASSWORD in line or "alice" in line or "QueryK3y" in line]


@pytest.mark.parametrize("name", ["httpx", "httpcore.connection", "httpcore.http11", "httpcore.proxy",
                                  "httpcore.socks", "httpcore.http2"])
def test_every_http_logger_has_the_filter(name, caplog):
    logger = logging.getLogger(name)
    assert any(isinstance(f, RedactingFilter) for f in logger.filters)
    caplog.set_level(logging.DEBUG, logger=name)
    logger.debug("send %s", f"https://alice:{PASSWORD}@h/x?access_token=AcT0ken9&sign=S1gn4ture")
    message = caplog.records[-1].getMessage()
    assert message == "send https://***@h/x?access_token=***&sign=***"


def test_a_traceback_on_a_record_is_redacted(caplog):
    caplog.set_level(logging.DEBUG, logger="httpx")
    try:
        raise httpx.ConnectError(f"cannot reach http://alice:{PASSWORD}@h/")
    except httpx.ConnectError:
        logging.getLogger("httpx").debug("failed", exc_info=True)
    record = caplog.records[-1]
    assert PASSWORD not in caplog.text and "http://***@h/" in (record.exc_text or "")


# --- the request still authenticates -------------------------------------------------------------


async def test_userinfo_goes_as_basic_auth_and_leaves_the_url(echo):
    url = echo.root_url.replace("://", f"://alice:{PASSWORD}@") + "/v1/run"
    async with open_stream(shared_client(), "POST", url, budget=2.0, platform="Echo", json={}) as resp:
        assert resp.status_code == 200
        assert "alice" not in str(resp.request.url)
    seen = echo.find_requests("POST", "/v1/run")[-1]
    assert seen.headers["authorization"] == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


async def test_the_platforms_own_authorization_header_is_kept(echo):
    url = echo.root_url.replace("://", f"://alice:{PASSWORD}@") + "/v1/run"
    async with open_stream(shared_client(), "POST", url, budget=2.0, platform="Echo", json={},
                           headers={"Authorization": "Bearer platform-key"}):
        pass
    assert echo.find_requests("POST", "/v1/run")[-1].headers["authorization"] == "Bearer platform-key"


async def test_a_refused_connection_names_the_address_not_the_password():
    port = closed_port()
    with pytest.raises(Exception) as err:
        async with open_stream(shared_client(), "POST", f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1", budget=2.0,
                               platform="Echo"):
            pass
    assert getattr(err.value, "code", None) == "upstream.unavailable"
    assert f"Echo at 127.0.0.1:{port}" in str(err.value) and PASSWORD not in str(err.value)


# --- the plugins' own lines ------------------------------------------------------------------------


async def test_deerflow_says_where_no_api_answered_without_the_password(echo, caplog):
    """Every probed prefix answers 404: the message names the address, never its userinfo."""
    from runners_cli.host import LocalHost
    from runners_cli.plugins import find

    caplog.set_level(logging.DEBUG)
    host = LocalHost(runner_id=find("deerflow-agent").runner_id)
    api = echo.root_url.replace("://", f"://alice:{PASSWORD}@")
    results = await run(make_runner("deerflow-agent", host), host, config={"api-base": api})
    code, _, message = failure(results)
    assert code == "config.invalid"
    assert f"answered at {echo.root_url} (tried" in message
    assert f"answered at {echo.root_url}" in "\n".join(messages(results))
    assert PASSWORD not in dump(results) + caplog.text


async def test_licos_logs_its_run_record_address_without_userinfo(caplog):
    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.licos import FakeLicos

    caplog.set_level(logging.DEBUG)
    host = LocalHost(runner_id=find("licos-agent").runner_id)
    with FakeLicos() as srv:
        base = srv.base_url.replace("://", f"://alice:{PASSWORD}@")
        results = await run(make_runner("licos-agent", host), host, config={"base-url": base})
    assert rtype(results[-1]) == "run.completed"
    logged = [r.data.get("text", "") for r in results if rtype(r) == "processor.log"]
    record = [t for t in logged if "run record:" in t]
    assert record and f"run record: {srv.root_url}/" in record[0], logged
    assert PASSWORD not in dump(results) + caplog.text and "***@" not in record[0]


async def test_dify_file_links_for_the_chat_carry_no_userinfo():
    """Dify sends a tool's file as a path (``/files/…?sign=…``); the link joined for the chat must not
    hand every member the base URL's password."""
    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.dify import FakeDify

    class RelativeFiles(FakeDify):
        def url(self, path: str) -> str:  # as Dify without FILES_URL: a path, not an address
            return path if path.startswith("/files/") else super().url(path)

    host = LocalHost(runner_id=find("dify-agent").runner_id)
    with RelativeFiles(api_key="app-userinfo-test-key") as srv:
        srv.mode = "agent"
        base = srv.base_url.replace("://", f"://alice:{PASSWORD}@")
        results = await run(make_runner("dify-agent", host), host,
                            config={"base-url": base, "api-key": "app-userinfo-test-key", "app-type": "agent"})
    assert rtype(results[-1]) == "run.completed"
    assert f"{srv.root_url}/files/abc.png" in dump(results)
    assert PASSWORD not in dump(results) and "***@" not in dump(results)
