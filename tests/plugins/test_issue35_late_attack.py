"""Issue 35, the late pieces attacked as a chat would: links an answer passes to the chat
(runner_kit.netguard.chat_link through Dify, Coze and Tbox), a platform's error text put on one line
(runner_kit.errors.platform_error), and acp-agent-runner's usage after usage_update stopped counting."""

from __future__ import annotations

import json

import pytest

from runner_kit import netguard
from runner_kit.errors import platform_error
from runners_cli.host import Identity
from tests.fakes.dify import dify_file
from tests.helpers import failure, final_text, make_runner, rtype, run, terminal
from tests.plugins.test_dify import cfg as dify_cfg
from tests.plugins.test_dify import dify_fake  # noqa: F401  (the fixture srv: the fake Dify)
from tests.plugins.test_tbox_agent import cfg as tbox_cfg

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the runner fixture

# Hosts a fetching client (httpx, aiohttp/yarl: LangBot fetches image and file links itself for
# Discord, Lark and Matrix) reads as localhost or a loopback / metadata address, although the text
# is none of the spellings chat_link knew: a trailing dot, IDNA's full-width letters and digits and
# its ideographic full stops, percent-encoding (browsers decode it).
SPELLED_LOCAL = [
    "http://localhost./latest/meta-data/x.png",
    "http://api.localhost./x.png",
    "http://ｌｏｃａｌｈｏｓｔ:8080/x.png",
    "http://１６９.２５４.１６９.２５４/latest/meta-data/x.png",
    "http://169。254。169。254/latest/meta-data/x.png",
    "http://127．0．0．1:5001/x.png",
    "http://127｡0｡0｡1/x.png",
    "http://localhost。/x.png",
    "http://local%68ost/x.png",
]


@pytest.mark.parametrize("url", SPELLED_LOCAL)
def test_local_addresses_in_other_spellings_are_not_passed_to_the_chat(url):
    assert netguard.chat_link(url, "https://dify.example.com/v1") is None


@pytest.mark.parametrize("url", [
    "HTTP://127.0.0.1/x", "http://0x7f.1/x", "http://127.1/x", "http://0177.0.0.1/x", "http://0/x",
    "http://127.0.0.1./x", "http://[::ffff:7f00:1]/x", "http://[fe80::1%25eth0]/x", "http://[::1%25lo]/x",
    "http://[64:ff9b::a9fe:a9fe]/x", "http://[2002:a9fe:a9fe::]/x", "http:\\\\127.0.0.1\\x", "http:/127.0.0.1/x",
    "http://evil.com\\@127.0.0.1/x", "http://1.1.1.1 &@127.0.0.1/x", "http://%31%32%37.0.0.1/x",
])
def test_the_forms_that_held_stay_refused(url):
    assert netguard.chat_link(url, "https://dify.example.com/v1") is None


@pytest.mark.parametrize("url", ["https://bücher.example/a.png", "https://xn--bcher-kva.example/a.png",
                                 "https://dify.example.com.evil.com/a.png", "https://cdn.example/127.0.0.1.png"])
def test_public_names_still_pass(url):
    assert netguard.chat_link(url, "https://dify.example.com/v1") == url


def _content(results):
    return [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]


async def test_dify_answer_files_on_local_spellings_never_reach_the_chat(srv, host, runner):
    """A chatflow that echoes a member's files: message_end.files naming the metadata service as
    ``１６９.２５４.１６９.２５４`` or ``localhost.`` is dropped, the public file stays."""
    srv.mode = "chatflow"
    srv.answer_files = [
        dify_file("5f0c6d8e-0000-4000-8000-000000000001", "a.png", "image/png", base="http://localhost.:8080"),
        dify_file("5f0c6d8e-0000-4000-8000-000000000002", "b.png", "image/png", base="http://１６９.２５４.１６９.２５４"),
        dify_file("5f0c6d8e-0000-4000-8000-000000000003", "c.png", "image/png", base="https://files.example.com"),
    ]
    results = await run(runner, host, config=dify_cfg(srv, **{"app-type": "chatflow"}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    urls = [c["image_url"]["url"] for c in _content(results) if c["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("https://files.example.com/"), urls


async def test_tbox_image_lanes_on_local_spellings_never_reach_the_chat(host):
    from tests.fakes.tbox import FakeTbox
    from tests.plugins.test_tbox_agent import APP, KEY

    with FakeTbox(api_key=KEY, app_id=APP) as s:
        s.image_urls = [*SPELLED_LOCAL[:5], "https://cdn.example/1.png"]
        results = await run(make_runner("tbox-agent", host), host, config=tbox_cfg(s))
    links = [c["image_url"]["url"] for c in _content(results) if c["type"] == "image_url"]
    assert links == ["https://cdn.example/1.png"]


def test_coze_object_string_files_on_local_spellings_are_dropped(host):
    import sys

    from runners_cli.plugins import find, load_runner_class

    adapter = load_runner_class(find("coze-agent")).adapter
    answer_content = sys.modules[adapter.__module__]._answer_content
    parts = [{"type": "text", "text": "here"},
             *({"type": "image", "file_url": u} for u in SPELLED_LOCAL),
             {"type": "image", "file_url": "https://cdn.example.com/ok.png"}]
    text, files = answer_content("object_string", json.dumps(parts))
    assert text == "here" and [f.url for f in files] == ["https://cdn.example.com/ok.png"]


# --- a platform's words on one line ---------------------------------------------------------------


async def test_a_password_on_its_own_line_of_a_dify_error_stays_hidden(srv, host, runner):
    """Redaction takes "password: Sunshine" up to the line break; joined into "password: Sunshine
    retry later" the value read as prose and reached the chat. Redacted before it is joined."""
    srv.fail_midstream = {"status": 400, "code": "invalid_param",
                          "message": "tool login failed\r\npassword: Sunshine\u2028retry \x1b[31mlater"}
    code, _, message = failure(await run(runner, host, config=dify_cfg(srv)))
    assert "Sunshine" not in message and "password: ***" in message, message
    assert "\n" not in message and "\x1b" not in message and "\u2028" not in message


@pytest.mark.parametrize("text", ["login failed\npassword: Sunshine\nretry", "bad: token=Abcdefgh\r\nsee docs",
                                  "x secret=Hunter\u2028next", "y api_key: Letmein\x1b[0m now"])
def test_platform_error_reveals_no_secret_the_multiline_text_hid(text):
    message = platform_error("Tbox", "upstream.error", "", 400, "E", text).message
    assert not any(w in message for w in ("Sunshine", "Abcdefgh", "Hunter", "Letmein")), message


async def test_difys_hint_is_still_found_in_a_crlf_message(srv, host, runner):
    srv.fail_midstream = {"status": 400, "code": "invalid_param",
                          "message": "query is required in input form\r\n\u2028\x1b[0m"}
    code, _, message = failure(await run(runner, host, config=dify_cfg(srv)))
    assert code == "config.invalid" and "requires “query”" in message, message
    assert message.count("\n") == 0 and "\x1b" not in message


# --- acp-agent-runner: real usage still counted, once per turn, per member ----------------------------


def _member(name):
    return Identity(conversation_id="group-1", actor_id=name.lower(), actor_name=name)


async def test_acp_usage_from_the_prompt_result_counts_once_per_turn_in_a_group(host, tmp_path, monkeypatch):
    """The fake sends usage_update (the window's fill, growing) and the result's usage: each turn
    reports its own consumption, once, for whichever member spoke; never the fill, never a sum."""
    import tests.contract.cases  # noqa: F401  (the case module imports from it)
    from tests.contract.case_acp_agent_runner import _Server, config

    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    acp = _Server().start()
    try:
        runner = make_runner("acp-agent-runner", host)
        for who, text in (("Alice", "hello"), ("Bob", "hi there"), ("Alice", "and again"), ("Bob", "more")):
            results = await run(runner, host, text, config=config(acp), identity=_member(who))
            end = terminal(results)
            assert rtype(end) == "run.completed" and final_text(results)
            n_in = len(acp.requests[-1].body) // 4
            got = (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens)
            assert got == (n_in, 7, n_in + 7), (who, text, got)
            assert len([r for r in results if rtype(r) == "run.completed"]) == 1
    finally:
        acp.stop()
