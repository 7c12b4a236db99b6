"""Small shared pieces: the answer tokens, the clock, percentiles, result serialisation."""

from __future__ import annotations

import json
import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any

# LLM-sized word pieces (4.5 characters on average), ASCII so bytes == characters
_VOCAB = (
    "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
    " A", " stream", "ing", " answer", " arrives", " token", " by", " token", ",", " and",
    " every", " piece", " is", " small", ";", " some", " are", " longer", " than", " others", "\n",
)  # fmt: skip


def tokens(n: int) -> list[str]:
    """The ``n`` answer tokens every benchmark streams (deterministic)."""
    return [_VOCAB[i % len(_VOCAB)] for i in range(n)]


def answer(n: int) -> str:
    return "".join(tokens(n))


def prefix_lengths(toks: Sequence[str]) -> list[int]:
    """``out[k]`` = characters in the first ``k`` tokens."""
    out = [0]
    for t in toks:
        out.append(out[-1] + len(t))
    return out


def tokens_in(prefix: list[int], chars: int) -> int:
    """How many whole tokens a cumulative text of ``chars`` characters holds."""
    k = bisect_left(prefix, chars)
    if k < len(prefix) and prefix[k] == chars:
        return k
    return k - 1


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns: one system-wide clock, comparable across processes on this machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def pct(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (linear interpolation between closest ranks)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    return pct(values, 50)


def wire_bytes(result: Any, sequence: int) -> int:
    """Bytes of one RunnerResult as the plugin runtime sends it to the host.

    langbot_plugin/cli/run/handler.py (run_runner): each result gets ``sequence`` via
    ``result.model_copy(update={"sequence": n})`` and is forwarded as
    ``ActionResponse.success(result.model_dump(mode="json"))``; runtime/io/handler.py
    (_encode_message) then writes ``json.dumps(...)`` of it (default ``ensure_ascii=True``).
    Counted here: the result payload, not the fixed ActionResponse envelope around it.
    """
    dumped = result.model_copy(update={"sequence": sequence}).model_dump(mode="json")
    return len(json.dumps(dumped).encode("utf-8"))


def rtype(result: Any) -> str:
    return getattr(result.type, "value", result.type)


def delta_text(result: Any) -> str:
    return result.data["chunk"]["all_content"] or ""
