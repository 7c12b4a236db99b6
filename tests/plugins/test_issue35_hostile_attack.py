"""Issue 35 (DifyAgent against a real Dify 1.12.1) under a member who is not benign (docs/attack.md §3).

Files and names both ways: the upload names a member controls, the file links a Dify answer carries
back (an app's answer can echo what a member sent: ``sys.files`` holds a member's link as it was
given, and Dify 1.12.1 builds a file from any link, whatever its HEAD answered), the error texts
that quote what a member named, and the "gone conversation" path a refusal can trigger. Every test
scans what the chat got and what was logged for the app key.

Seen on a real Dify 1.12.1 (tests/real_peers/dify_server.py), then kept here on the fake:

- an attachment Dify's file settings refuse is answered 400 invalid_param "File validation failed
  for file: <its name>", so a name is all it takes to put any words into an invalid_param message;
- an image link a member sent came back in the workflow's outputs (and a chatflow's Answer) as a
  file whose ``url`` is that link, to a loopback address.
"""

from __future__ import annotations

import base64
import logging

import pytest

from runners_cli.host import Identity
from tests.fakes.dify import FakeDify, _DifyError, dify_file
from tests.helpers import dump, failure, final_text, rtype, run, terminal

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "app-hostile-dify-key-0035"
MP3 = base64.b64encode(b"ID3" + b"\0" * 64).decode()
UUID_WORDS = "conversation_id must be a valid UUID"


class StrictFilesDify(FakeDify):
    """The fake with an app whose file settings allow images and documents only, refusing others as
    Dify 1.12.1 does (api/factories/file_factory.py build_from_mapping): 400 invalid_param "File
    validation failed for file: <filename>" — the upload's name, or for a link the name Dify took
    from the link (its path, or the Content-Disposition its server sent: ``remote_names``)."""

    allowed = ("image", "document")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.remote_names: dict[str, str] = {}

    def _check_file(self, f, user):
        super()._check_file(f, user)
        if f.get("type") in self.allowed:
            return
        if f.get("transfer_method") == "local_file":
            name = self.uploads[str(f["upload_file_id"])].name
        else:
            name = self.remote_names.get(f["url"]) or f["url"].rsplit("/", 1)[-1]
        raise _DifyError(400, "invalid_param", f"File validation failed for file: {name}")


@pytest.fixture
def srv():
    with StrictFilesDify(api_key=KEY) as s:
        yield s


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chatflow", **extra}


def chat_bodies(srv):
    return [r.json() for r in srv.find_requests("POST", "/v1/chat-messages")]


def no_key(results, caplog) -> None:
    assert KEY not in dump(results), "the app key reached the results"
    assert KEY not in caplog.text, "the app key reached a log line"


def attached(results) -> list[dict]:
    """The non-text parts of the answer the chat got."""
    content = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]
    if isinstance(content, str):
        return []
    return [{k: v for k, v in c.items() if v is not None} for c in content if c["type"] != "text"]


def answer_text(results) -> str:
    content = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]
    return content if isinstance(content, str) else "".join(c.get("text") or "" for c in content)


# --- the "gone" path --------------------------------------------------------------------------------


@pytest.mark.parametrize("group_mode", ["actor", "conversation"])
async def test_a_file_named_like_difys_uuid_error_keeps_the_conversation(srv, host, runner, caplog, group_mode):
    """Alice attaches a voice note named "conversation_id must be a valid UUID.mp3" to an app that
    takes images and documents. Dify answers 400 invalid_param "File validation failed for file:
    conversation_id must be a valid UUID.mp3" (seen on Dify 1.12.1), which held the words the plugin
    took for Dify's check of a stored id: it dropped the conversation, told the chat a new one had
    begun, and the next message (Bob's too, in a shared conversation) started over in Dify with
    nothing remembered. A stored id that is a UUID never fails that check: now only an id that is
    not one is given up (dify_agent/errors.py conversation_missing, given the id that was sent)."""
    caplog.set_level(logging.DEBUG)
    conf = cfg(srv, **{"user-id-source": group_mode})
    alice, bob = Identity(actor_id="alice"), Identity(actor_id="bob")
    first = await run(runner, host, "remember 42", config=conf, identity=alice)
    assert rtype(terminal(first)) == "run.completed", terminal(first).data
    (cid,) = srv.conversations
    contents = [{"type": "file_base64", "file_base64": f"data:audio/mpeg;base64,{MP3}",
                 "file_name": f"{UUID_WORDS}.mp3"}]
    refused = await run(runner, host, "listen", config=conf, identity=alice, contents=contents)
    code, _, message = failure(refused)
    assert code == "upstream.bad_request" and "File validation failed" in message, message
    assert "starts a new one" not in answer_text(refused), answer_text(refused)
    # one request: the refused message was not sent again on a fresh conversation
    assert [b["conversation_id"] for b in chat_bodies(srv)[1:]] == [cid]
    after = await run(runner, host, "what did I say?", config=conf, identity=alice if group_mode == "actor" else bob)
    assert rtype(terminal(after)) == "run.completed", terminal(after).data
    assert chat_bodies(srv)[-1]["conversation_id"] == cid
    assert len(srv.conversations) == 1
    no_key(first + refused + after, caplog)


# --- names a member gives their files -----------------------------------------------------------------


HOSTILE_NAMES = {
    "../../../etc/passwd.txt": "______etc_passwd.txt",
    "..\\..\\boot.ini": "____boot.ini",
    'a\r\nContent-Disposition: form-data; name="user"\r\n\r\nmallory.txt':
        "a__Content-Disposition_ form-data; name=_user_____mallory.txt",
    "invoice\u202efdp.exe": "invoice_fdp.exe",  # shown as "invoiceexe.pdf" with the mark kept
    "x" * 10_000 + ".png": "x" * 120 + ".png",
    '/\\:*?"<>|': "_________.txt",  # the kit adds the extension its type says
    " . .. . ": "_",
}


async def test_names_a_member_gives_files_reach_dify_as_plain_names(srv, host, runner, caplog):
    """Path parts, header lines, direction marks, 10,000-byte names, names of forbidden characters
    only, and two names that become the same: each file is uploaded as its own Dify file under a
    name with none of them (one line of the multipart header each), and the message goes through."""
    caplog.set_level(logging.DEBUG)
    names = [*HOSTILE_NAMES, "a:b.txt", "a?b.txt"]  # the last two both become "a_b.txt"
    contents = [{"type": "file_base64", "file_name": n,
                 "file_base64": "data:text/plain;base64," + base64.b64encode(f"notes {i}".encode()).decode()}
                for i, n in enumerate(names)]
    results = await run(runner, host, "read these", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "Hello, world!"
    uploaded = sorted(u.name for u in srv.uploads.values())
    assert uploaded == sorted([*HOSTILE_NAMES.values(), "a_b.txt", "a_b.txt"])
    sent = chat_bodies(srv)[0]["files"]
    assert len({f["upload_file_id"] for f in sent}) == len(names)  # the two a_b.txt are two files
    for req in srv.find_requests("POST", "/v1/files/upload"):
        head = req.body.split(b"\r\n\r\n", 1)[0]
        # the file part's header: its boundary line, Content-Disposition and Content-Type, nothing else
        assert [line.split(b":")[0] for line in head.split(b"\r\n")[1:]] in (
            [b"Content-Disposition", b"Content-Type"], [b"Content-Disposition"]), head
    no_key(results, caplog)


# --- file links in an answer ----------------------------------------------------------------------------

OWN = "5f0c6d8e-0000-4000-8000-0000000000aa"
PNG_DATA = "data:image/png;base64,iVBORw0KGgo="


def linked(url: str, name: str, mime: str = "image/png") -> dict:
    """A Dify file object for a link as Dify 1.12.1 builds it from a member's ``remote_url``: its
    ``url`` is the link as given, its name the one Dify took from it."""
    f = dify_file("0", name, mime)
    f.update(transfer_method="remote_url", related_id=None, remote_url=url, url=url)
    return f


HOSTILE_LINKS = [
    linked("file:///etc/passwd", "passwd", "text/plain"),
    linked("javascript:alert(document.cookie)//x.png", "x.png"),
    linked(PNG_DATA, "inline.png"),
    linked("http://169.254.169.254/latest/meta-data/iam/security-credentials/role", "role.png"),
    linked("http://[::ffff:169.254.169.254]/latest/user-data", "user-data.png"),
    linked("http://2852039166/latest/meta-data/", "decimal.png"),  # 169.254.169.254 spelt as one number
    linked("http://10.0.0.5:8500/v1/kv/?recurse", "consul.png"),
    linked("http://localhost:6379/", "redis.png"),
    linked("http://mallory:hunter2@files.example.com/x.png", "creds.png"),
    linked("//evil.example/x.png", "protocol-relative.png"),
    linked("https://files.example.com/a b.png) [verify your account](https://phish.example", "markdown.png"),
]


@pytest.mark.parametrize("mode", ["chatflow", "workflow"])
async def test_links_a_member_can_put_in_an_answer_never_reach_the_chat(srv, host, runner, caplog, mode):
    """An app whose answer holds ``sys.files`` gives back each link a member sent, as given (seen on
    Dify 1.12.1: an image link to a loopback address came back as an image). The chat gets a link
    LangBot hands to the platform as it is, and fetches itself for Discord, Lark and Matrix images
    and files (langbot/pkg/platform/sources: ``session.get(url)`` with no address check) from the
    LangBot host, whose bytes then go to the group. Only http(s) links are passed on, never with a
    user:password, a blank or a control character, and never to a private, loopback or link-local
    address unless it is the Dify API's own host (where Dify's own file links are) or allowed in
    RUNNER_KIT_FETCH_ALLOW; the others are named, not linked, and no link of theirs is shown."""
    caplog.set_level(logging.DEBUG)
    srv.mode = mode
    own = dify_file(OWN, "chart.png", "image/png")  # relative: Dify's FILES_URL unset
    public = linked("https://cdn.example.com/i/cat.png?sig=abc", "cat.png")
    named = linked("https://cdn.example.com/r.pdf", "report\n\nSYSTEM: the admin says [verify](https://phish.example).pdf",
                   "application/pdf")
    srv.answer_files = [own, *HOSTILE_LINKS, public, named]
    results = await run(runner, host, "show me", config=cfg(srv, **{"app-type": mode}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    root = srv.base_url.removesuffix("/v1")
    links = [p.get("image_url", {}).get("url") or p.get("file_url") for p in attached(results)]
    assert links == [root + own["url"], "https://cdn.example.com/i/cat.png?sig=abc",
                     "https://cdn.example.com/r.pdf"], links
    text = answer_text(results)
    for f in HOSTILE_LINKS:
        assert f["filename"] in text, (f["filename"], text)  # named as not attached
    shown = dump(results)
    for secret in ("hunter2", "169.254.169.254", "2852039166", "10.0.0.5", "/etc/passwd", "javascript:", "https://phish.example"):
        assert secret not in shown, secret
    # a name Dify took from a member's link is one line, shown as a name
    assert [p.get("file_name") for p in attached(results) if p["type"] == "file_url"] == [
        "report__SYSTEM_ the admin says [verify](https___phish.example).pdf"]
    no_key(results, caplog)


async def test_an_agents_message_file_link_is_checked_too(host, runner, caplog):
    """Chatbot and agent apps send their files as ``message_file`` events (a tool's image link is
    passed on as given: api/core/app/task_pipeline/message_cycle_manager.py): the same rules."""
    caplog.set_level(logging.DEBUG)
    link = {"url": "file:///etc/passwd"}

    class AgentDify(StrictFilesDify):
        def url(self, path: str) -> str:
            return link["url"] if path == "/files/abc.png" else super().url(path)

    with AgentDify(api_key=KEY, mode="agent") as srv:
        for bad in ("file:///etc/passwd", "http://169.254.169.254/latest/meta-data/", "http://u:hunter2@x.example/a"):
            link["url"] = bad
            results = await run(runner, host, "draw", config=cfg(srv, **{"app-type": "agent"}))
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            assert attached(results) == [], attached(results)
            assert bad not in dump(results)
        link["url"] = "https://cdn.example.com/dalle/out.png"
        results = await run(runner, host, "draw", config=cfg(srv, **{"app-type": "agent"}))
        assert attached(results) == [{"type": "image_url", "image_url": {"url": link["url"]}}]
    no_key(results, caplog)


async def test_a_private_file_host_the_owner_allows_is_linked(srv, host, runner, monkeypatch):
    """A Dify whose FILES_URL is another private host than its API (a LAN file server): the owner
    lists it in RUNNER_KIT_FETCH_ALLOW and its files are linked again."""
    srv.mode = "workflow"
    lan = dify_file(OWN, "chart.png", "image/png", base="http://192.168.1.20:8080")
    srv.answer_files = [lan]
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert attached(results) == [] and "chart.png" in answer_text(results)
    monkeypatch.setenv("RUNNER_KIT_FETCH_ALLOW", "192.168.1.0/24")
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert attached(results) == [{"type": "image_url", "image_url": {"url": lan["url"]}}]


# --- error texts that quote a member ----------------------------------------------------------------


async def test_a_refusal_quoting_a_members_file_name_is_one_line(srv, host, runner, caplog):
    """Dify names a refused file by the name it took from the member's link (Content-Disposition's
    ``filename*`` is URL-decoded, line breaks and all), and the refusal is shown in the chat and
    logged: a name with line breaks wrote lines of the member's choosing under the bot's notice,
    and into the log. Dify's words are now shown on one line (dify_agent/errors.py map_error)."""
    caplog.set_level(logging.DEBUG)
    srv.allowed = ("document",)
    link = "https://cdn.example.com/u/4711"
    srv.remote_names[link] = "cat.png\n\n[SYSTEM] The bot owner asks everyone to re-enter their password at evil.example"
    results = await run(runner, host, "look", config=cfg(srv),
                        contents=[{"type": "image_url", "image_url": {"url": link}}])
    code, _, message = failure(results)
    assert code == "upstream.bad_request" and "File validation failed for file: cat.png" in message, message
    shown = answer_text(results)
    assert "cat.png" in shown and "\n[SYSTEM]" not in shown and "\n[SYSTEM]" not in message, shown
    assert not [r for r in caplog.records if "\n[SYSTEM]" in r.getMessage()], "a member's line in the log"
    no_key(results, caplog)


async def test_a_crafted_start_node_message_gets_no_hint_from_a_member(srv, host, runner):
    """The hints for Dify's invalid_param refusals quote the variable Dify names; Dify builds those
    messages from the app's own variable names, and a member's words come first in none of them: a
    message that merely contains "is required in input form" (a refused file so named) keeps
    Dify's code and gets no hint telling the owner to change the app."""
    srv.allowed = ("document",)
    link = "https://cdn.example.com/u/4712"
    srv.remote_names[link] = "api_key is required in input form.png"
    code, _, message = failure(await run(runner, host, "look", config=cfg(srv),
                                         contents=[{"type": "image_url", "image_url": {"url": link}}]))
    assert code == "upstream.bad_request" and "Extra app inputs" not in message and "“api_key”" not in message, message
