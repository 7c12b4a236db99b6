import pytest

from runner_kit.errors import CODES, Redactor, RunnerError, status_to_code


@pytest.mark.parametrize(
    "status,code,retryable",
    [(400, "upstream.bad_request", False), (401, "upstream.auth", False), (403, "upstream.forbidden", False),
     (404, "upstream.not_found", False), (413, "upstream.too_large", False), (429, "upstream.rate_limited", True),
     (500, "upstream.unavailable", True), (502, "upstream.unavailable", True), (503, "upstream.unavailable", True)],
)
def test_status_mapping_and_retryable(status, code, retryable):
    assert status_to_code(status) == code
    assert RunnerError(code, "x").retryable is retryable


def test_timeouts_retryable_quota_not():
    assert CODES["upstream.timeout"] and not CODES["upstream.quota"] and not CODES["upstream.auth"]


def test_unknown_code_rejected():
    with pytest.raises(ValueError):
        RunnerError("nope", "x")


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abcdefghijkl",
        "authorization=Basic dXNlcjpwYXNz",
        '{"Authorization": "Bearer xyzxyzxyz"}',
        "GET /run?x-api-key=verysecret1&a=1",
        "api_key=hunter2hunter2",
        "key app-AbCdEf123456 leaked",
        "sk-0123456789abcdef in text",
        "pat_ABCDEFGH12345678",
    ],
)
def test_redaction_patterns(text):
    out = Redactor()(text)
    for secret in ("abcdefghijkl", "dXNlcjpwYXNz", "xyzxyzxyz", "verysecret1", "hunter2hunter2",
                   "AbCdEf123456", "0123456789abcdef", "ABCDEFGH12345678"):
        assert secret not in out


@pytest.mark.parametrize("text", [
    "DashScope error HTTP 401 InvalidApiKey: Invalid API-key provided.",
    "InvalidToken: the token has expired",
    "x-api-key: missing header",
    "Bearer authentication required",
])
def test_words_after_a_secret_name_are_not_taken_for_a_secret(text):
    """Issue 33 item 16: DashScope's wrong-key message read "InvalidApiKey: *** API-key provided.":
    the redactor took the sentence's next word for a key. Values are redacted, not the words around."""
    assert Redactor()(text) == text


@pytest.mark.parametrize("text, secret", [
    ("api-key: Zq81kLmNopQr77 was refused", "Zq81kLmNopQr77"),
    ("password: hunter2 ok", "hunter2"),
    ("token=abc123def", "abc123def"),
    ("secret: plainword", "plainword"),
    ("Authorization: Bearer abcdefghij more", "abcdefghij"),
])
def test_a_value_beside_a_secret_name_is_still_redacted(text, secret):
    assert secret not in Redactor()(text)


def test_known_secret_values_removed_and_text_kept():
    r = Redactor(["my-plain-secret"])
    assert r("failed with my-plain-secret in url") == "failed with *** in url"
    assert r("the answer has 12 tokens") == "the answer has 12 tokens"


def test_redact_value_reaches_every_string_of_a_tool_call():
    from runner_kit.errors import Redactor, redact_value

    r = Redactor(["sk-live-123456789"])
    got = redact_value({"cmd": "echo sk-live-123456789", "env": ["A=sk-live-123456789", 3],
                        "sk-live-123456789": {"n": None}}, r)
    assert "sk-live-123456789" not in repr(got)
    assert got["env"][1] == 3 and got["cmd"].startswith("echo ")


def test_a_platforms_words_reach_the_chat_and_the_log_on_one_line():
    """A platform's error text can quote a chat member (a file name, a link): its line breaks,
    terminal escapes and direction marks never become lines or reversed text of their own."""
    from runner_kit.errors import platform_error

    err = platform_error("Dify", "upstream.bad_request", "", 400, "invalid_param",
                         "File validation failed for file: a\n[INFO] run ok\r\x1b[2Kb\u202etxt.exe")
    assert err.message == ("Dify error HTTP 400 invalid_param: File validation failed for file: a [INFO] run ok "
                           "[2Kb txt.exe")
