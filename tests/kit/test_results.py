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
    assert r.data["chunk"]["content"] == " world"


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


def test_nothing_to_say_gives_no_message():
    assert ResultBuilder("r").final_message() is None
