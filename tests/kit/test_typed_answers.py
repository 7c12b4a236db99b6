"""Typed answers to a permission question, read as people write in a group chat (issue 31 item 5):
an allow or deny word alone, or followed by plain assent / a reason after a separator; common
phrases that start with a deny word, or with an allow word followed by something else, are no
answer (None: the message goes on as an ordinary message)."""

from __future__ import annotations

import pytest

from runner_kit import approvals as ap

ALLOW, ALWAYS, DENY = "allow", "always", "deny"

# what a person types -> (word, reason), or None when it is no answer
ANSWERS = [
    # allow: the word alone, or followed only by more assent
    ("allow", (ALLOW, None)),
    ("Yes!", (ALLOW, None)),
    ("ok", (ALLOW, None)),
    ("yes, go ahead", (ALLOW, None)),
    ("Yes please", (ALLOW, None)),
    ("ok 继续", (ALLOW, None)),
    ("好的，执行吧", (ALLOW, None)),
    ("好的", (ALLOW, None)),
    ("同意。", (ALLOW, None)),
    # always
    ("always", (ALWAYS, None)),
    ("allow for this session", (ALWAYS, None)),
    ("总是允许", (ALWAYS, None)),
    ("yes, always", (ALWAYS, None)),
    # deny: a whole word
    ("deny", (DENY, None)),
    ("no.", (DENY, None)),
    ("No!", (DENY, None)),
    ("n", (DENY, None)),
    ("nope", (DENY, None)),
    ("nah", (DENY, None)),
    ("not now", (DENY, None)),
    ("拒绝", (DENY, None)),
    ("不行", (DENY, None)),
    ("no no no", (DENY, None)),
    # deny: a word, a separator, a reason (kept as typed)
    ("NO, use git rm instead", (DENY, "use git rm instead")),
    ("no, use git rm instead", (DENY, "use git rm instead")),
    ("deny: too risky", (DENY, "too risky")),
    ("deny too risky", (DENY, "too risky")),
    ("no - keep the build dir", (DENY, "keep the build dir")),
    ("not now, after the release", (DENY, "after the release")),
    ("don’t, it is the prod database", (DENY, "it is the prod database")),
    ("拒绝：先跑测试", (DENY, "先跑测试")),
    ("不行，先跑测试", (DENY, "先跑测试")),
    ("拒绝，太危险了", (DENY, "太危险了")),
    # common phrases that start with a deny word are no answers
    ("no problem", None),
    ("no problem!", None),
    ("no worries", None),
    ("no worries, go ahead", None),
    ("no idea what this bot does", None),
    ("no-one asked for this", None),
    ("不错", None),
    ("不错，继续", None),
    ("不过先跑一下测试再发布", None),
    ("不客气", None),
    # …nor those that start with an allow word and go on with something else
    ("好的问题", None),
    ("是不是应该先跑测试？", None),
    ("ok but run the tests first", None),
    ("allow me to explain", None),
    ("可以吗？", None),
    # ordinary chat lines
    ("lol what is this bot doing", None),
    ("note to self", None),
    ("nothing", None),
    ("now run it", None),
    ("n.b. the tests are flaky", None),
    ("please fix the tests", None),
    ("", None),
    ("   ", None),
]


@pytest.mark.parametrize(("text", "expected"), ANSWERS, ids=[repr(t) for t, _ in ANSWERS])
def test_a_typed_reply_is_read_as_a_person_means_it(text, expected):
    d = ap.parse_answer(text, ap.Question(title="run a command: rm -rf build", scope="cmd:rm -rf build"))
    got = None if d is None else (d.word, d.reason)
    assert got == expected, f"{text!r} was read as {got}, not {expected}"


def test_always_on_what_cannot_be_kept_for_the_session_is_allowed_once():
    q = ap.Question(title="edit /etc/hosts")  # no scope: the question offers no "for this session"
    assert ap.parse_answer("always", q).word == ALLOW
    assert ap.parse_answer("yes, always", q).word == ALLOW


def test_a_long_message_that_starts_with_yes_is_not_a_yes():
    q = ap.Question(title="x", scope="cmd:x")
    assert ap.parse_answer("yes " + "please " * 20, q) is None


def test_a_question_to_the_user_still_takes_any_text():
    q = ap.Question(title="Which branch?", kind="question")
    assert ap.parse_answer("no problem", q).answer == "no problem"
    assert ap.parse_answer("不错", q).answer == "不错"
