"""Sizes of every measurement: the full run (``python -m bench``) and ``--quick``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class CpuPattern:
    name: str
    tokens: int  # per run
    delay: float  # seconds between tokens (0: the whole answer at once)
    runs: int  # per timed batch


@dataclass
class Params:
    quick: bool = False
    # 1. time to first visible text
    ttft_runs: int = 60
    ttft_tokens: int = 20
    ttft_delay: float = 0.01
    # 2. host traffic
    traffic_sizes: tuple[int, ...] = (100, 1000, 4000)
    paced_sizes: tuple[int, ...] = (100, 1000, 4000)
    paced_delay: float = 0.02  # 50 tokens/s, a typical hosted-LLM rate
    sweep_rates: tuple[float, ...] = (0.0, 200.0, 100.0, 50.0, 25.0)  # tokens/s, 0 = burst
    # 3. CPU per upstream event
    cpu_rounds: int = 7
    cpu_patterns: list[CpuPattern] = field(
        default_factory=lambda: [CpuPattern("paced", 400, 0.001, 3), CpuPattern("burst", 2000, 0.0, 5)]
    )
    # 3b. fixed per-run vs per-event CPU, one run at a time: runs per batch of the 1-token and the
    # conc_tokens answers (the two points of the fit)
    split_runs: int = 150
    # 4. concurrency
    conc_ns: tuple[int, ...] = (50, 200, 500, 1000)
    # 6-second answers (longer than the kit's 5 s wait for a free pooled connection), sparse enough
    # (N=500: ~3,300 events/s) that one core is not saturated by the client floor itself
    conc_tokens: int = 40
    conc_delay: float = 0.15
    # 5. connections
    conn_runs: int = 100
    # 6. coding agents: rounds of (turn, follow-up in the same process, the follow-up as a new run),
    # each with isolation: sandbox and isolation: none; and repetitions of each boundary part alone
    coding_rounds: int = 11
    coding_warmup: bool = True  # one untimed round per mode first
    boundary_reps: int = 30
    # 7. in-process agent loops: tool rounds in the one run of the loop (issue 32: 30, in every mode),
    # and runs of each side per figure
    local_rounds: int = 30
    local_reps: int = 7

    @classmethod
    def quick_run(cls) -> Params:
        return cls(
            quick=True,
            ttft_runs=10,
            paced_sizes=(100,),
            paced_delay=0.01,
            sweep_rates=(0.0, 50.0),
            cpu_rounds=2,
            split_runs=20,
            cpu_patterns=[CpuPattern("paced", 150, 0.001, 2), CpuPattern("burst", 1000, 0.0, 3)],
            conc_ns=(50,),
            conc_tokens=10,
            conc_delay=0.05,
            coding_rounds=1,
            coding_warmup=False,
            boundary_reps=4,
            local_reps=2,
        )

    @classmethod
    def smoke_run(cls) -> Params:
        """The least that still runs every section's every path once (the test suite's check that
        the benchmarks work): ``--quick`` cut down further; its figures mean nothing."""
        return replace(
            cls.quick_run(),
            ttft_runs=3,
            ttft_tokens=5,
            traffic_sizes=(100, 4000),  # the bytes target is read at 4,000 tokens
            paced_sizes=(20,),
            paced_delay=0.005,
            cpu_rounds=1,
            split_runs=3,
            cpu_patterns=[CpuPattern("paced", 30, 0.001, 1), CpuPattern("burst", 100, 0.0, 1)],
            conc_ns=(10,),
            conc_tokens=5,
            conc_delay=0.02,
            conn_runs=10,
            boundary_reps=2,
            local_reps=1,
        )
