"""runner_kit.pending in a group: several members' runs one after the other over one conversation
state, in each identity mode. Who may answer an open question, what happens to everyone else's
messages (kept in the record and sent right after the question is settled, or on in their own
session), and that nothing is dropped on the way. The plugins' own runs are in
tests/plugins/test_{coze,dify,deerflow}_group_questions.py."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from runner_kit import events as ev
from runner_kit.inputs import UserInput
from runner_kit.pending import MAX_KEPT, PendingAction

KEY = "demo.pending"
ALICE = SimpleNamespace(actor_id="alice", actor_name="Alice")
BOB = SimpleNamespace(actor_id="bob", actor_name="Bob")
CAROL = SimpleNamespace(actor_id="carol", actor_name="Carol")
SHARED_MODES = ("conversation", "legacy-session", "legacy-bot")
PER_PERSON = ("actor", "hashed")


def user_of(actor: Any, source: str) -> str:
    if source in PER_PERSON:
        return f"user_{actor.actor_id}" if source == "actor" else f"lb_{actor.actor_id}"
    return {"conversation": "conversation_conv-1", "legacy-session": "group_g1", "legacy-bot": "bot-1"}[source]


class Chat:
    """One LangBot conversation's state and the runs in it (the host applies each run's State)."""

    def __init__(self, source: str, **config: Any):
        self.state: dict[str, Any] = {}
        self.config = {"user-id-source": source, **config}
        self.source = source

    def pending(self, actor: Any, text: str = "", click: Any = None, files: list[Any] | None = None) -> PendingAction:
        ctx = SimpleNamespace(state=SimpleNamespace(conversation=dict(self.state)),
                              input=SimpleNamespace(interaction=click), actor=actor,
                              delivery=SimpleNamespace(interactions=None))
        env = SimpleNamespace(ctx=ctx, config=self.config, user=user_of(actor, self.source),
                              input=UserInput(text=text, files=files or [], params={}))
        return PendingAction(env, KEY, "demo question")

    def apply(self, events: list[Any]) -> None:
        for e in events:
            if isinstance(e, ev.State):
                if e.value is None:
                    self.state.pop(e.key, None)
                else:
                    self.state[e.key] = e.value

    def ask(self, actor: Any, expires_at: float | None = None) -> dict[str, Any]:
        p = self.pending(actor, "pick a colour")
        out = p.ask({"title": "Red or blue?"}, text="Red or blue?", expires_at=expires_at)
        self.apply(out)
        return p.record() or {}

    def run(self, actor: Any, text: str = "", reader: Any = None, **kw: Any) -> tuple[Any, PendingAction]:
        p = self.pending(actor, text, **kw)
        res = p.resolve(read_click, reader or read_typed)
        self.apply(res.events)
        return res, p

    def answered(self, res: Any, p: PendingAction, *, asked_again: bool = False) -> str | None:
        """What an adapter does with an answer: submit (done), then send the kept messages unless
        the platform asked again; returns the text it would send for them."""
        self.apply([p.done()])
        if asked_again:
            self.apply(p.ask({"title": "And green?"}, text="And green?", expires_at=None))
            return None
        if not res.kept:
            return None
        self.apply([p.kept_sent()])
        return p.kept_input(res.kept).text


def read_click(sub: Any) -> Any:
    return {"red": "RED", "blue": "BLUE"}.get(getattr(sub, "action_id", None))


def read_typed(text: str) -> Any:
    """Like a free-text question: any text is an answer for someone who may answer."""
    return text.strip() or None


def read_choice(text: str) -> Any:
    """Like a question with choices: only a choice's name is an answer."""
    return {"red": "red", "blue": "blue"}.get(text.strip().lower())


def shown(res: Any) -> str:
    return "".join(e.text for e in res.events if isinstance(e, ev.Text))


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_bob_is_kept_not_an_answer_and_goes_right_after_alices_answer(source):
    chat = Chat(source)
    rec = chat.ask(ALICE)
    res, _ = chat.run(BOB, "lol what is this bot doing")
    assert res.answer is None and not res.go_on, "someone else's message is never the answer, even to free text"
    assert "kept until Alice answers" in shown(res) and "sent right after" in shown(res)
    res, _ = chat.run(BOB, "yes")  # a typed 'yes' is no answer for him either
    assert res.answer is None and "kept" in shown(res)
    res, p = chat.run(ALICE, "blue")
    assert res.answer == "blue" and res.record["id"] == rec["id"]
    assert [k["text"] for k in res.kept] == ["lol what is this bot doing", "yes"]
    sent = chat.answered(res, p)
    assert sent == "lol what is this bot doing\n\nyes", "one sender: the texts as they were written"
    assert p.kept_note(res.kept) == "\n\n(Now what Bob wrote while the question was open:)\n\n"
    res, _ = chat.run(BOB, "and now?")
    assert res.go_on and res.events == [], "nothing is left over: Bob's next message just goes on"


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_three_members_an_approver_answers_and_names_are_kept(source):
    chat = Chat(source, approvers=["carol"])
    rec = chat.ask(ALICE)
    chat.run(BOB, "what is this?")
    res, p = chat.run(CAROL, "red")
    assert res.answer == "red", "an approver may answer for the asker"
    assert chat.answered(res, p) == "what is this?"
    replay, _ = chat.run(ALICE, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"))
    assert shown(replay) == "(The demo question “Red or blue?” was already answered by Carol.)"


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_the_asker_moving_on_takes_the_kept_messages_with_names(source):
    chat = Chat(source)
    chat.ask(ALICE)
    chat.run(BOB, "is it done?")
    chat.run(CAROL, "I want one too")
    res, p = chat.run(ALICE, "", files=[object()])  # a picture: no answer
    assert res.go_on
    # Alice's files-only message: the question is left, the kept messages go with hers
    assert p.env.input.text == "Bob: is it done?\nCarol: I want one too\nAlice: (sent files)"
    assert "left unanswered" in shown(res) and "Sent together with what Bob, Carol wrote" in shown(res)
    assert chat.state == {}, "nothing is left kept or open"


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_expired_question_sends_what_was_kept(source):
    chat = Chat(source)
    rec = chat.ask(ALICE, expires_at=time.time() + 30)
    chat.run(BOB, "hello?")
    chat.state[next(iter(chat.state))]["expires_at"] = time.time() - 1
    res, p = chat.run(ALICE, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"))
    assert res.go_on and p.env.input.text == "hello?", "the click itself sends nothing, the kept message goes"
    assert "expired before it was answered" in shown(res) and "Now what Bob wrote" in shown(res)
    assert chat.state == {}


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_kept_messages_survive_a_run_that_ended_before_sending_them(source):
    chat = Chat(source)
    chat.ask(ALICE)
    chat.run(BOB, "ping")
    res, p = chat.run(ALICE, "blue")
    chat.apply([p.done()])  # the platform took the answer; the run failed before sending Bob's message
    res, p = chat.run(CAROL, "hi all")
    assert res.go_on and p.env.input.text == "Bob: ping\nCarol: hi all"
    assert chat.state.get(p.key, {}).get("kept") is None


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_a_new_question_right_after_the_answer_keeps_them_kept(source):
    chat = Chat(source)
    chat.ask(ALICE)
    chat.run(BOB, "ping")
    res, p = chat.run(ALICE, "blue")
    assert chat.answered(res, p, asked_again=True) is None
    rec = p.record()
    assert rec["title"] == "And green?" and [k["text"] for k in rec["kept"]] == ["ping"]
    res, p = chat.run(ALICE, "yes, green")
    assert [k["text"] for k in res.kept] == ["ping"]


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_keeps_a_bounded_amount_and_says_so(source):
    chat = Chat(source)
    chat.ask(ALICE)
    for i in range(MAX_KEPT):
        res, _ = chat.run(BOB, f"message {i}")
        assert "kept until Alice answers" in shown(res)
    res, _ = chat.run(BOB, "one more")
    assert "send this again after it is answered" in shown(res)
    res, _ = chat.run(BOB, "", files=[object()])
    assert "files cannot be kept" in shown(res)
    res, _ = chat.run(BOB, "see attached", files=[object()])
    assert "send this again" in shown(res)


@pytest.mark.parametrize("source", PER_PERSON)
def test_own_sessions_bob_goes_on_in_his_own_conversation(source):
    chat = Chat(source, approvers=["carol"])
    chat.ask(ALICE)
    for text in ("lol what is this bot doing", "yes", "red"):
        res, p = chat.run(BOB, text)
        assert res.go_on and res.answer is None and res.events == [], text
        assert p.env.input.text == text and not p.foreign
    res, _ = chat.run(ALICE, "blue")
    assert res.answer == "blue" and res.kept == [], "only Alice's own session holds her question"


@pytest.mark.parametrize("source", PER_PERSON)
def test_own_sessions_an_approver_answers_another_members_question_only_when_one_fits(source):
    chat = Chat(source, approvers=["carol"])
    a = chat.ask(ALICE)
    chat.state[next(k for k, v in chat.state.items() if v["id"] == a["id"])]["asked_at"] -= 10
    b = chat.ask(BOB)
    res, p = chat.run(CAROL, "red", reader=read_choice)
    assert res.answer is None and "fits the open questions of Alice, Bob" in shown(res), \
        "a typed choice that fits two people's questions answers neither"
    res, p = chat.run(CAROL, click=SimpleNamespace(interaction_id=a["id"], action_id="red"))
    assert res.answer == "RED" and res.record["id"] == a["id"] and p.foreign, "her click names Alice's"
    chat.apply([p.done()])
    replay, _ = chat.run(ALICE, click=SimpleNamespace(interaction_id=a["id"], action_id="red"))
    assert shown(replay) == "(The demo question “Red or blue?” was already answered by Carol.)"
    res, p = chat.run(CAROL, "blue", reader=read_choice)
    assert res.record["id"] == b["id"] and p.foreign, "now only Bob's question fits"
    chat.apply(p.ask({"title": "And green?"}, text="And green?", expires_at=None))
    assert p.record()["actor"] == "bob", "asked again in Bob's session: still Bob's question"


@pytest.mark.parametrize("source", PER_PERSON)
def test_own_sessions_an_approvers_message_never_answers_another_members_free_text_question(source):
    """Carol may answer Alice's question, but her words in her own session are hers: for a question
    any text answers, only its button (or Alice) answers it from another session."""
    chat = Chat(source, approvers=["carol"])
    a = chat.ask(ALICE)
    res, p = chat.run(CAROL, "lunch at noon?")
    assert res.go_on and res.answer is None and not p.foreign
    res, p = chat.run(CAROL, click=SimpleNamespace(interaction_id=a["id"], action_id="red"))
    assert res.answer == "RED" and res.record["id"] == a["id"], "her click still answers it"


@pytest.mark.parametrize("source", PER_PERSON)
def test_own_sessions_an_approvers_own_question_comes_first(source):
    chat = Chat(source, approvers=["carol"])
    chat.ask(ALICE)
    c = chat.ask(CAROL)
    res, p = chat.run(CAROL, "red")
    assert res.record["id"] == c["id"] and not p.foreign
    res, p = chat.run(CAROL, "", files=[object()])
    assert res.go_on and res.answer is None, "a message with files answers nobody's question"


@pytest.mark.parametrize("source", PER_PERSON)
def test_own_sessions_each_person_has_their_own_open_question(source):
    chat = Chat(source)
    a = chat.ask(ALICE)
    b = chat.ask(BOB)
    assert a["id"] != b["id"] and len(chat.state) == 2
    res, _ = chat.run(BOB, "blue")
    assert res.answer == "blue" and res.record["id"] == b["id"]
    res, _ = chat.run(ALICE, "red")
    assert res.answer == "red" and res.record["id"] == a["id"]


@pytest.mark.parametrize("source", SHARED_MODES)
def test_shared_session_a_question_about_the_kept_messages_is_their_senders(source):
    chat = Chat(source)
    chat.ask(ALICE)
    chat.run(BOB, "delete the old logs too")
    res, p = chat.run(ALICE, "blue")
    chat.apply([p.done(), p.kept_sent()])
    p.kept_input(res.kept)  # sent on Alice's run: the platform asks about Bob's message
    chat.apply(p.ask({"title": "Which logs?"}, text="Which logs?", expires_at=None))
    assert p.record()["actor"] == "bob"
    res, _ = chat.run(ALICE, "all of them")
    assert res.answer is None and "kept until Bob answers" in shown(res)
    res, _ = chat.run(BOB, "the ones from May")
    assert res.answer == "the ones from May"
