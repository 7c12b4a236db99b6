"""Questions from a coding agent to the chat (runner_kit.approvals): typed answers inside the run,
buttons through a new run, who may answer, timeouts, "allow for this session"."""

from __future__ import annotations

import asyncio

import pytest

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit.config import ConfigSchema
from runner_kit.runner import Adapter
from runners_cli.host import Identity
from tests.helpers import messages, rtype, scripted_runner, terminal
from tests.helpers import run_answering as drive

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

SCHEMA = ConfigSchema.from_items(
    [
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "approval-timeout", "type": "float", "default": 600},
        {"name": "approvers", "type": "array[string]", "default": []},
        {"name": "follow-up-mode", "type": "select", "default": "next-turn",
         "options": [{"name": "next-turn"}, {"name": "interrupt"}]},
    ]
)


class Asker(Adapter):
    """A scripted agent: says something, asks ``questions`` one by one, reports each decision."""

    platform = "Asker"
    session_key = "asker.session"
    multi_turn = True
    questions: list = []
    log: list = []

    async def turn(self, inp, index):
        yield ev.SessionId("sess-1")
        yield ev.Text(f"Working on {inp.text}.")
        for q in type(self).questions if index == 0 else []:
            d = await self.env.ask(ap.Question(**q))
            type(self).log.append(d)
            yield ev.Text(f" [{q['title']}: {d.word}{' because ' + d.reason if d.reason else ''}]")
        yield ev.Text(" Done.")

    async def close(self):
        type(self).log.append("close")


RM = {"title": "run a command: rm -rf build", "detail": "in the workspace", "scope": "cmd:rm -rf build"}
# the agent proposed the rule "rm -rf …" (as Claude Code's Bash(rm -rf:*)): it covers simple commands only
RM_RULE = {"title": "run a command: rm -rf build", "scope": "cmd-prefix:rm -rf", "request": "cmd:rm -rf build"}



def make(*questions):
    return scripted_runner(Asker, SCHEMA, questions=list(questions), log=[])


texts = messages


# --- reading answers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "word", "reason"), [
    ("allow", "allow", None), ("Yes!", "allow", None), ("允许", "allow", None), ("同意。", "allow", None),
    ("always", "always", None), ("总是允许", "always", None), ("allow for this session", "always", None),
    ("deny", "deny", None), ("no", "deny", None), ("拒绝", "deny", None),
    ("deny: too risky", "deny", "too risky"), ("no, use git clean", "deny", "use git clean"),
    ("拒绝，太危险了", "deny", "太危险了"),
])
def test_typed_answers_are_read_in_english_and_chinese(text, word, reason):
    d = ap.parse_answer(text, ap.Question(title="x", scope="cmd:x"))
    assert d is not None and d.word == word and d.reason == reason


@pytest.mark.parametrize("text", ["note that", "please fix the tests", "allow me to explain", "nothing", ""])
def test_other_messages_are_not_answers(text):
    assert ap.parse_answer(text, ap.Question(title="x")) is None


def test_question_answers_pick_options_by_number_value_or_label():
    q = ap.Question(title="Which database?", kind="question",
                    options=[ap.Option("pg", "PostgreSQL"), ap.Option("sqlite", "SQLite")], free_text=False)
    assert ap.parse_answer("2", q).answer == "sqlite"
    assert ap.parse_answer("postgresql", q).answer == "pg"
    assert ap.parse_answer("mysql", q) is None
    q.free_text = True
    assert ap.parse_answer("MySQL 8", q).answer == "MySQL 8"


def test_interaction_request_is_buttons_or_one_field_and_valid_for_the_sdk():
    from langbot_plugin.api.entities.builtin.runner.interaction import InteractionRequest

    perm = ap.interaction_request("Claude Code", ap.Question(**RM), 2e9, None)
    assert [a["id"] for a in perm["actions"]] == ["allow", "always", "deny"] and "fields" not in perm
    InteractionRequest.model_validate(perm)
    choice = ap.interaction_request("Codex", ap.Question(title="Pick", kind="question",
                                                         options=[ap.Option("a", "A"), ap.Option("b", "B")]), None, None)
    assert [a["id"] for a in choice["actions"]] == ["opt-0", "opt-1"]
    InteractionRequest.model_validate(choice)
    free = ap.interaction_request("Codex", ap.Question(title="Name?", kind="question"), None, None)
    assert len(free["fields"]) == 1 and "actions" not in free
    InteractionRequest.model_validate(free)


def test_pick_names_a_choice_by_number_value_or_label():
    choices = [ap.Option("approve", "Approve it"), ap.Option("reject", "Request changes")]
    assert ap.pick("2", choices) == "reject" and ap.pick(" Approve it! ", choices) == "approve"
    assert ap.pick("REJECT", choices) == "reject"
    assert ap.pick("3", choices) is None and ap.pick("maybe", choices) is None


def test_a_question_can_be_asked_with_the_platforms_own_field():
    from langbot_plugin.api.entities.builtin.runner.interaction import InteractionRequest

    q = ap.Question(title="Your comment", kind="question")
    fld = {"id": "comment", "label": "comment", "type": "text", "required": True, "default": "ok"}
    req = ap.interaction_request("Dify", q, None, None, field=fld)
    assert req["kind"] == "form" and req["fields"] == [fld]
    InteractionRequest.model_validate(req)
    sub = type("Sub", (), {})
    sub.action_id, sub.values = None, {"comment": " Looks good "}
    assert ap.from_submission(sub, q, field="comment").answer == "Looks good"
    sub.values = {"answer": "typed into the default field"}
    assert ap.from_submission(sub, q, field="comment").answer == "typed into the default field"
    sub.values = {"comment": 42}
    assert ap.from_submission(sub, q, field="comment").answer == "42"
    sub.values = {"comment": "  "}
    assert ap.from_submission(sub, q, field="comment") is None
    choice = ap.Question(title="Pick", kind="question", options=[ap.Option("a", "A"), ap.Option("b", "B")])
    sub.values = {"answer": "a"}
    assert ap.from_submission(sub, choice) is None, "asked with buttons: only a button answers"
    sub.action_id = "opt-1"
    assert ap.from_submission(sub, choice).answer == "b"


# --- typed answers inside the run ---------------------------------------------------------------


async def test_typed_allow_once_is_taken_inside_the_run_and_not_sent_as_a_prompt():
    runner, host, cls = make(RM)
    ctx = host.make_context("clean up", steering=True)
    out = await drive(runner, host, ctx, ["allow"])
    terminal(out)
    said = texts(out)
    assert said[0] == "Working on clean up."
    assert "rm -rf build" in said[1] and "allow" in said[1] and "拒绝" in said[1]
    assert said[-1].endswith("[run a command: rm -rf build: allow] Done.")
    assert cls.log[0].allow and not cls.log[0].always and cls.log[0].by == "Tester"
    assert not [r for r in out if rtype(r) == "action.requested"], "no interaction where the host cannot show one"
    logs = [r.data["text"] for r in out if rtype(r) == "processor.log"]
    assert any("allowed once by Tester" in t for t in logs)


async def test_with_follow_up_mode_interrupt_the_answer_does_not_interrupt_the_turn():
    runner, host, cls = make(RM)
    ctx = host.make_context("clean up", steering=True, config={"follow-up-mode": "interrupt"})
    out = await drive(runner, host, ctx, ["allow"])
    said = texts(out)
    assert said[-1].endswith("[run a command: rm -rf build: allow] Done.")
    assert not any("Stopped here" in t for t in said)


async def test_deny_with_a_reason_reaches_the_agent():
    runner, host, cls = make(RM)
    out = await drive(runner, host, host.make_context("clean up", steering=True), ["deny: keep the build dir"])
    assert texts(out)[-1].endswith("[run a command: rm -rf build: deny because keep the build dir] Done.")
    assert any("denied by Tester: keep the build dir" in r.data["text"] for r in out if rtype(r) == "processor.log")


async def test_allow_for_session_is_not_asked_again_in_this_run_or_the_next():
    # (this test once used scope "shell:rm" for both: the program's first word. Now the second
    # command is covered because the first question's rule "rm -rf" was what "always" kept.)
    runner, host, cls = make(RM_RULE, dict(RM_RULE, title="run a command: rm -rf dist", request="cmd:rm -rf dist"))
    out = await drive(runner, host, host.make_context("clean", steering=True), ["always"])
    asked = [t for t in texts(out) if "wants to" in t]
    assert len(asked) == 1, "the second rm was covered by 'always'"
    assert [d.word for d in cls.log if d != "close"] == ["always", "always"]
    assert cls.log[1].remembered
    cls.log.clear()
    out2 = await drive(runner, host, host.make_context("clean again", steering=True))
    assert not [t for t in texts(out2) if "wants to" in t], "remembered for the agent session"
    assert all(d.remembered for d in cls.log if d != "close")


async def test_allow_for_session_is_forgotten_on_reset():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", steering=True), ["always"])
    host.reset_conversation()
    cls.log.clear()
    out = await drive(runner, host, host.make_context("clean", steering=True), ["allow"])
    assert [t for t in texts(out) if "wants to" in t], "asked again after the reset"


async def test_someone_else_cannot_answer_and_the_question_stays_open():
    runner, host, cls = make(RM)
    other = Identity(actor_id="u-2", actor_name="Mallory")
    out = await drive(runner, host, host.make_context("clean", steering=True), [("allow", other), "deny"])
    said = texts(out)
    assert any("Only Tester can answer" in t for t in said)
    assert cls.log[0].word == "deny" and cls.log[0].by == "Tester"


async def test_an_approver_from_config_can_answer():
    runner, host, cls = make(RM)
    lead = Identity(actor_id="lead-7", actor_name="Lead")
    ctx = host.make_context("clean", steering=True, config={"approvers": ["lead-7"]})
    out = await drive(runner, host, ctx, [("allow", lead)])
    assert cls.log[0].allow and cls.log[0].by == "Lead"
    assert any("Only Tester, lead-7 can answer" in t for t in texts(out))


async def test_no_answer_within_the_approval_timeout_is_a_visible_denial():
    runner, host, cls = make(RM)
    ctx = host.make_context("clean", steering=True, config={"approval-timeout": 1.2})
    out = await drive(runner, host, ctx)
    said = texts(out)
    assert any("No answer within" in t for t in said)
    assert cls.log[0].timed_out and not cls.log[0].allow
    assert said[-1].endswith("deny because nobody answered in time] Done.")
    assert rtype(out[-1]) == "run.completed"


async def test_other_messages_while_waiting_are_answered_after_the_turn():
    runner, host, cls = make(RM)
    ctx = host.make_context("clean", steering=True)
    out = await drive(runner, host, ctx, ["what are you doing?", "allow"], when="")
    said = texts(out)
    assert any("Still waiting" in t for t in said)
    assert cls.log[0].allow
    assert said[-1] == "Working on what are you doing?. Done.", "the other message became the next turn"


# --- buttons and later runs ---------------------------------------------------------------------


async def test_button_answer_arrives_as_a_new_run_that_finishes_the_turn():
    runner, host, cls = make(RM)
    out1 = await drive(runner, host, host.make_context("clean", interactions=True, steering=True))
    assert rtype(terminal(out1)) == "run.completed"
    assert texts(out1) == ["Working on clean."], "the question goes out as buttons, not as text"
    (req,) = host.interactions
    assert [a["id"] for a in req["actions"]] == ["allow", "always", "deny"]
    assert "rm -rf build" in req["fallback_text"]
    assert "close" not in cls.log, "the agent waits in the plugin process"
    out2 = await drive(runner, host, host.make_context(
        interactions=True, interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    assert texts(out2)[-1] == " [run a command: rm -rf build: allow] Done."
    assert cls.log[0].allow and cls.log[-1] == "close"
    assert rtype(terminal(out2)) == "run.completed"


async def test_typed_answer_in_a_later_run_answers_a_parked_question():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean"))  # no steering: the question is parked
    out = await drive(runner, host, host.make_context("拒绝，先备份"))
    assert texts(out)[-1].endswith("deny because 先备份] Done.")


async def test_a_new_message_instead_of_an_answer_denies_and_comes_next():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", interactions=True))
    cls.questions = []
    out = await drive(runner, host, host.make_context("just list the files", interactions=True))
    said = texts(out)
    assert any("was told no" in t for t in said)
    assert said[-1] == "Working on just list the files. Done."
    assert cls.log[0].word == "deny"


async def test_a_click_after_the_agent_is_gone_says_so_in_one_line():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", interactions=True))
    (req,) = host.interactions
    await ap.close_all()  # the plugin restarted
    out = await drive(runner, host, host.make_context(
        interactions=True, interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    (line,) = texts(out)
    assert "no longer waiting" in line and "restarted" in line
    assert rtype(terminal(out)) == "run.completed"
    cls.questions = []
    out = await drive(runner, host, host.make_context("hello again"))
    assert texts(out) == ["Working on hello again. Done."], "the conversation goes on normally"


async def test_a_parked_question_expires_into_a_denial():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", interactions=True, config={"approval-timeout": 0.3}))
    await asyncio.sleep(0.6)
    assert cls.log and cls.log[0].timed_out
    out = await drive(runner, host, host.make_context("allow", interactions=True))
    (line,) = texts(out)
    assert "no longer waiting" in line and "nobody answered in time" in line


async def test_shutdown_stops_an_expired_agent_without_waiting_out_its_grace():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", interactions=True, config={"approval-timeout": 0.2}))
    await asyncio.sleep(0.4)
    assert cls.log and cls.log[0].timed_out and "close" not in cls.log  # in its grace period
    started = asyncio.get_running_loop().time()
    await ap.close_all()
    assert "close" in cls.log and asyncio.get_running_loop().time() - started < ap.PARK_GRACE


async def test_a_click_by_someone_else_leaves_the_question_open():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", interactions=True))
    (req,) = host.interactions
    other = Identity(actor_id="u-2", actor_name="Mallory")
    out = await drive(runner, host, host.make_context(
        identity=other, interactions=True, interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    assert any("Only Tester can answer" in t for t in texts(out))
    out = await drive(runner, host, host.make_context(
        interactions=True, interaction={"interaction_id": req["interaction_id"], "action_id": "deny"}))
    assert cls.log[0].word == "deny" and texts(out)[-1].endswith("deny] Done.")


# --- what "allow for this session" covers (issue 29) --------------------------------------------------


def _cmd(command, rule=None):
    from runner_kit import command_scope as cs

    asked = cs.command_key(command)
    return ap.Question(title=f"run a command: {command}", scope=(cs.prefix_key(rule, command) if rule else "") or asked,
                       request=asked)


def test_memory_allows_the_exact_command_and_nothing_else():
    m = ap.Memory("k", None)
    stored = m.remember(_cmd("git status"), "s1")
    assert stored == {"session": "s1", "allow": ["cmd:git status"], "v": ap.MEMORY_VERSION}
    assert m.allows(_cmd("git status"), "s1") and m.allows(_cmd("git   status"), "s1")
    for other in ("git status; rm -f precious.txt; touch PWNED.txt", "git status && touch PWNED.txt",
                  "git status --short", "git push", "git status | sh", "git status $(touch PWNED.txt)"):
        assert not m.allows(_cmd(other), "s1"), other
    assert not m.allows(_cmd("git status"), "s2"), "another agent session"
    assert not m.allows(ap.Question(title="x"), "s1"), "a question with no key is never covered"


def test_a_prefix_rule_covers_simple_commands_only():
    m = ap.Memory("k", None)
    q = _cmd("git status", rule="git status")
    assert q.scope == "cmd-prefix:git status" and q.request == "cmd:git status"
    m.remember(q, "s1")
    assert m.allows(_cmd("git status"), "s1") and m.allows(_cmd("git status --short src"), "s1")
    for other in ("git status; rm -f precious.txt; touch PWNED.txt", "git status && rm -rf ~", "git statusx",
                  "git status > /etc/x", "git status `touch PWNED.txt`", "git push", "FOO=1 git status",
                  "sudo git status", "git status\nrm -f x"):
        assert not m.allows(_cmd(other), "s1"), other
    # a remembered exact key never approves a different non-simple command either
    m.remember(_cmd("cd src && ls"), "s1")
    assert m.allows(_cmd("cd src && ls"), "s1")
    assert not m.allows(_cmd("cd / && rm -rf ~"), "s1") and not m.allows(_cmd("cd .. && touch PWNED.txt"), "s1")


def test_a_rule_is_never_what_a_request_asks_for():
    m = ap.Memory("k", None)
    m.remember("cmd-prefix:git", "s1")
    assert not m.allows(ap.Question(title="x", scope="cmd-prefix:git"), "s1")
    assert m.allows("cmd:git log", "s1")


def test_memory_stored_by_an_older_version_allows_nothing():
    legacy = {"session": "s1", "allow": ["shell:git", "shell:rm", "edit", "WebFetch", "fetch"]}
    m = ap.Memory("k", legacy)
    assert not m.scopes
    for q in (_cmd("git status"), _cmd("rm -rf build"), ap.Question(title="edit", scope="edit:a.py"),
              ap.Question(title="old", scope="shell:git"), ap.Question(title="old", scope="edit")):
        assert not m.allows(q, "s1"), q.scope
    # the same unknown scopes under this version's marker are dropped too
    m = ap.Memory("k", {**legacy, "v": ap.MEMORY_VERSION})
    assert not m.scopes and not m.allows(ap.Question(title="old", scope="shell:git"), "s1")
    assert m.remember(ap.Question(title="old", scope="shell:git"), "s1") is None, "never kept"


def test_several_files_are_covered_one_by_one():
    m = ap.Memory("k", None)
    m.remember(ap.Question(title="change files", scope=("edit:a.py", "delete:b.py")), "s1")
    assert m.allows(ap.Question(title="x", scope="edit:a.py"), "s1")
    assert not m.allows(ap.Question(title="x", scope="edit:b.py"), "s1"), "a delete does not cover an edit"
    assert not m.allows(ap.Question(title="x", scope=("edit:a.py", "edit:c.py")), "s1")
    assert not m.allows(ap.Question(title="x", scope=("edit:a.py", "")), "s1"), "a file with no key"
    assert m.remember(ap.Question(title="x", scope=("edit:c.py", "")), "s1") is None


def test_a_question_that_cannot_be_remembered_has_no_session_button_and_always_is_once():
    from langbot_plugin.api.entities.builtin.runner.interaction import InteractionRequest

    q = ap.Question(title="edit /etc/passwd", scope="")
    req = ap.interaction_request("Claude Code", q, None, None)
    assert [a["id"] for a in req["actions"]] == ["allow", "deny"]
    InteractionRequest.model_validate(req)
    text = ap.question_text("Claude Code", q)
    assert "cannot be allowed for the whole session" in text and "回复 允许 或 拒绝" in text
    d = ap.parse_answer("always", q)
    assert d.allow and not d.always
    sub = type("Sub", (), {"action_id": "always", "values": {}})
    assert ap.from_submission(sub, q).word == "allow"


@pytest.mark.parametrize(("question", "label"), [
    (_cmd("git status"), "Allow `git status` for this session"),
    (_cmd("git status --short", rule="git status"), "Allow commands starting with `git status` for this session"),
    (_cmd("git status; rm -f precious.txt"), "Allow this exact command for this session"),
    (_cmd("bash -c 'ls'"), "Allow this exact command for this session"),
    (_cmd("ls " + "x" * 200), "Allow this exact command for this session"),
    (ap.Question(title="edit", scope="edit:src/app.py"), "Allow editing src/app.py for this session"),
    (ap.Question(title="rm", scope="delete:src/old.py"), "Allow deleting src/old.py for this session"),
    (ap.Question(title="mv", scope='move:["a.py", "b.py"]'), "Allow moving a.py to b.py for this session"),
    (ap.Question(title="x", scope='tool:["WebFetch", {"url": "https://example.com"}]'),
     "Allow this exact request for this session"),
])
def test_the_session_button_and_the_text_say_what_they_cover(question, label):
    from langbot_plugin.api.entities.builtin.runner.interaction import InteractionRequest

    req = ap.interaction_request("Claude Code", question, 2e9, None)
    assert [(a["id"], a["label"]) for a in req["actions"]][1] == ("always", label)
    assert len(label) <= 80
    InteractionRequest.model_validate(req)
    said = label.removeprefix("Allow ").removesuffix(" for this session")
    text = ap.question_text("Claude Code", question)
    assert f"always (allow {said[0].lower() + said[1:]} for this session)" in text or said.startswith("this exact")
    assert "回复 允许、总是允许" in text


async def test_a_legacy_memory_in_conversation_state_is_asked_again():
    runner, host, cls = make(RM)
    await drive(runner, host, host.make_context("clean", steering=True), ["always"])
    sk = host.scope_key(Identity(), "conversation")
    (key,) = [k for k in host.store.snapshot(sk) if k.endswith(ap.MEMORY_SUFFIX)]
    session = host.store.get(sk, key)["session"]
    host.store.set(sk, key, {"session": session, "allow": ["shell:rm"]})  # as the previous version kept it
    cls.log.clear()
    out = await drive(runner, host, host.make_context("clean again", steering=True), ["deny"])
    assert [t for t in texts(out) if "wants to" in t], "asked again: the old scope approves nothing"
    assert cls.log[0].word == "deny"


# --- schema forms (ACP / MCP elicitation) ------------------------------------------------------------


def test_a_schema_form_reads_each_kind_of_property():
    one_of = ap.schema_form("Pick", {"properties": {"env": {"type": "string", "oneOf": [
        {"const": "prod", "title": "Production"}, {"const": "stg", "title": "Staging"}]}}})
    assert [o.label for o in one_of.question.options] == ["Production", "Staging", "Decline"]
    assert one_of.content("staging") == {"env": "stg"} and one_of.content("1") == {"env": "prod"}
    assert one_of.content(ap.DECLINE) is None and one_of.content("拒绝") is None
    flag = ap.schema_form("Sure?", {"properties": {"ok": {"type": "boolean"}}})
    assert flag.content("yes") == {"ok": True} and flag.content("否") == {"ok": False}
    count = ap.schema_form("How many?", {"properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}}})
    assert count.question.free_text and count.content("3") == {"n": 3}
    assert count.content("9") == "n: a whole number" and count.content("three") == "n: a whole number"
    tags = ap.schema_form("Tags", {"properties": {"t": {"type": "array", "items": {"enum": ["a", "b", "c"]}}}})
    assert tags.content("a, c") == {"t": ["a", "c"]} and isinstance(tags.content("a, z"), str)
    empty = ap.schema_form("Continue?", {"properties": {}})
    assert [o.label for o in empty.question.options] == ["OK", "Decline"] and empty.content("ok") == {}


def test_a_schema_form_with_several_fields_takes_lines_and_names_what_is_missing():
    form = ap.schema_form("Details", {"required": ["name"], "properties": {
        "name": {"type": "string", "title": "Full name"}, "age": {"type": "number"}}})
    assert "name: text (required)" in form.question.detail
    assert form.content("Full name： Ada\nage: 36") == {"name": "Ada", "age": 36.0}
    assert form.content("age: old") == "missing or not understood: name (text); age (a number)"
    again = form.again("missing or not understood: name (text)")
    assert "(missing or not understood: name (text))" in again.question.detail
    assert again.question.id != form.question.id


def test_read_lines_cuts_a_reply_where_a_line_names_a_field():
    names = {"comment": "comment", "action": "act"}
    got = ap.read_lines("hello\nComment： fine\nsecond line\nnote: kept\naction = 2", names)
    assert got == [(None, ["hello"]), ("comment", ["fine", "second line", "note: kept"]), ("act", ["2"])]
    assert ap.read_lines("", names) == [] and ap.read_lines("no names here", names) == [(None, ["no names here"])]
    assert ap.norm("  Request   Changes! ") == "request changes"
    form = ap.schema_form("Details", {"properties": {"name": {"type": "string"}, "age": {"type": "number"}}})
    assert form.content("name = Ada\nage: 36\nthanks") == {"name": "Ada", "age": 36.0}

