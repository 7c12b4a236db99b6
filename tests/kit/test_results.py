from runner_kit.results import ResultBuilder, StreamPolicy, ThinkFilter, strip_think


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def content(r):
    return r.data["chunk"]["all_content"]


def test_first_text_immediately_then_coalesced_and_cumulative():
    clock = Clock()
    b = ResultBuilder("r", policy=StreamPolicy(growth=0.5, min_chars=4, max_delay=10), clock=clock)
    first = b.add_text("Hello")
    assert first is not None and content(first) == "Hello"
    assert b.add_text(" w") is None  # 2 pending < max(4, 2.5)
    r = b.add_text("orld")  # 6 pending >= 4 and >= 2.5
    assert content(r) == "Hello world"
    assert r.data["chunk"]["content"] is None, "all_content carries the text; content does not repeat it"


def test_max_delay_flushes_slow_text():
    clock = Clock()
    b = ResultBuilder("r", policy=StreamPolicy(growth=10, min_chars=1000, max_delay=0.5), clock=clock)
    b.add_text("a")
    assert b.add_text("b") is None
    assert 0 < b.due_in() <= 0.5
    clock.t = 0.6
    r = b.add_text("c")
    assert content(r) == "abc"


def test_long_answer_host_bytes_bounded():
    b = ResultBuilder("r")
    sent = 0
    n = 0
    for i in range(4000):
        r = b.add_text(f"tok{i % 10} ")
        if r is not None:
            n += 1
            sent += len(content(r))
    total = len(b.answer)
    assert sent < 5 * total
    assert n < 40


def test_think_events_shown_as_block_before_answer():
    b = ResultBuilder("r")
    b.add_think("pondering")
    b.add_text("answer")
    b.flush()
    final = b.final_message()
    assert final.data["message"]["content"] == "<think>\npondering\n</think>\nanswer"


def test_remove_think_drops_events_and_inline_blocks_split_across_pieces():
    b = ResultBuilder("r", remove_think=True)
    b.add_think("hidden")
    for piece in ["<thi", "nk>secret", " stuff</th", "ink>\nVisible", " answer"]:
        b.add_text(piece)
    assert b.final_message().data["message"]["content"] == "Visible answer"


def test_think_filter_keeps_text_that_only_looks_like_a_tag_start():
    f = ThinkFilter()
    assert f.feed("a <b> c <t") + f.flush() == "a <b> c <t"
    assert strip_think("<think>x</think>\n\nhi") == "hi"


def test_replace_and_final_text_do_not_double():
    b = ResultBuilder("r")
    b.add_text("Hello ")
    b.add_text("world")
    assert b.final_text("Hello world") is None
    r = b.replace("[moderated]")
    assert content(r) == "[moderated]"
    assert b.final_message().data["message"]["content"] == "[moderated]"


def test_final_message_with_attachments():
    from runner_kit.events import Attachment

    b = ResultBuilder("r")
    b.add_text("see")
    b.add_attachment(Attachment(url="http://127.0.0.1/x.png"))
    msg = b.final_message().data["message"]["content"]
    assert msg[0]["text"] == "see" and msg[1]["image_url"]["url"] == "http://127.0.0.1/x.png"


def test_attachments_reach_the_chat_as_langbot_4_11_2_can_show_them():
    """LangBot 4.11.2 turns a message's content into the chat message (langbot_plugin
    provider/message.py _get_content_platform_message_chain): an image_url only when it is an http(s)
    link (a data: one is dropped without a word), image_base64 as an Image, a file only by link. So an
    inline image goes as image_base64, and an inline file (nothing in the chat could open it) is named
    in the text as not sent, in the person's language."""
    from langbot_plugin.api.entities.builtin.provider.message import Message

    from runner_kit import texts
    from runner_kit.events import Attachment

    png = "data:image/png;base64,iVBORw0KGgo="
    b = ResultBuilder("r")
    b.add_text("here")
    b.add_attachment(Attachment(url=png))
    b.add_attachment(Attachment(url="data:application/pdf;base64,JVBERi0=", kind="file", name="report.pdf"))
    b.add_attachment(Attachment(url="https://files.example/a.zip", kind="file", name="a.zip"))
    message = b.final_message().data["message"]
    chain = Message.model_validate(message).get_content_platform_message_chain()
    kinds = [type(c).__name__ for c in chain]
    assert kinds == ["Plain", "Image", "File"], kinds
    assert chain[1].base64 == png and chain[2].url == "https://files.example/a.zip"
    assert "here" in chain[0].text and "“report.pdf”" in chain[0].text and "Not sent" in chain[0].text
    with texts.to("请把报告发给我", None):
        b = ResultBuilder("r")
        b.add_attachment(Attachment(url="data:application/pdf;base64,JVBERi0=", kind="file", name="报告.pdf"))
        (only,) = b.final_message().data["message"]["content"]
    assert only["type"] == "text" and only["text"].startswith("（未发送：“报告.pdf”")


def test_nothing_to_say_gives_no_message():
    assert ResultBuilder("r").final_message() is None


def _all(results):
    return [content(r) for r in results if r is not None]


def test_think_streaming_is_a_prefix_extension_and_stays_open_until_the_answer():
    b = ResultBuilder("r", policy=StreamPolicy(growth=0, min_chars=0, max_delay=0))
    seen = _all([b.add_think("Let me "), b.add_think("think.\n"), b.add_think("More."), b.add_text("The answer"),
                 b.add_text(" is 42.")])
    for a, nxt in zip(seen, seen[1:], strict=False):
        assert nxt.startswith(a), (a, nxt)
    assert seen[1] == "<think>\nLet me think."  # open while reasoning streams, no close tag yet
    assert "</think>" not in seen[2]
    final = b.final_message().data["message"]["content"]
    assert final == "<think>\nLet me think.\nMore.\n</think>\nThe answer is 42."
    assert final.startswith(seen[-1])


def test_reasoning_after_shown_answer_is_appended_never_inserted_before_it():
    b = ResultBuilder("r", policy=StreamPolicy(growth=0, min_chars=0, max_delay=0))
    seen = _all([b.add_text("Step one done."), b.add_think("now the tool"), b.add_text("Final.")])
    for a, nxt in zip(seen, seen[1:], strict=False):
        assert nxt.startswith(a)
    assert seen[-1] == "Step one done.\n\n<think>\nnow the tool\n</think>\nFinal."


def test_reasoning_only_run_closes_its_block_in_the_final_message():
    b = ResultBuilder("r")
    b.add_think("only thoughts")
    assert b.final_message().data["message"]["content"] == "<think>\nonly thoughts\n</think>"


def test_whitespace_only_answer_is_no_message():
    b = ResultBuilder("r")
    assert b.add_text("  \n ") is None
    assert b.final_message() is None


def test_every_result_stays_under_the_host_cap_with_a_visible_notice():
    import json

    from runner_kit.results import HOST_RESULT_LIMIT, TRUNCATED_NOTICE

    b = ResultBuilder("r")
    out = []
    piece = "汉字" * 500  # 6 bytes each once ASCII-escaped
    for _ in range(200):  # 200 K CJK characters, about 1.2 MiB escaped
        out.append(b.add_text(piece))
    out.append(b.flush())
    final = b.final_message()
    sizes = [len(json.dumps(r.model_dump(mode="json"))) for r in [*filter(None, out), final]]
    assert max(sizes) < HOST_RESULT_LIMIT
    text = final.data["message"]["content"]
    assert b.truncated and text.endswith(TRUNCATED_NOTICE)
    seen = _all(out)
    assert seen[-1] == text, "the last delta and the final message agree"
    for a, nxt in zip(seen, seen[1:], strict=False):
        assert nxt.startswith(a)


def test_partial_answer_keeps_text_and_puts_the_note_on_its_own_line():
    b = ResultBuilder("r")
    b.add_text("Half an ans")
    msg = b.final_message(note="(incomplete)").data["message"]["content"]
    assert msg == "Half an ans\n\n(incomplete)"


def test_preamble_comes_first_and_is_not_an_answer():
    b = ResultBuilder("r")
    b.set_preamble("(new conversation)")
    assert not b.has_output and b.final_message() is None
    b.add_text("hi")
    assert b.final_message().data["message"]["content"] == "(new conversation)\n\nhi"


def test_think_splitter_orders_parts_and_holds_split_markers():
    from runner_kit.results import ThinkSplitter

    s = ThinkSplitter()
    parts = s.feed("Hi <th") + s.feed("ink>pondering</thi") + s.feed("nk>\nAnswer <") + s.flush()
    assert parts == [(False, "Hi "), (True, "pondering"), (False, "Answer "), (False, "<")]
    assert not s.inside
