"""Reward options: the keyword arguments verl passes from ``reward.custom_reward_function.reward_kwargs``.

Unknown keys are rejected with the list of valid ones (a typo must not silently fall back
to a default).  The only other keys accepted are those verl itself adds to every call.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from reward.code_tests import CODE_MODES
from reward.outcome import check_score_mode
from reward.response_format import PLAIN, check_response_format
from reward.sandbox.slots import check_max_runs

CODE_BACKENDS: tuple[str, ...] = ("local", "sandbox_fusion")
VERL_CALL_KWARGS: frozenset[str] = frozenset({"reward_router_address", "reward_model_tokenizer"})
"""Keys verl 0.9.1's reward managers add on their own; accepted and ignored."""


@dataclass(frozen=True)
class RewardOptions:
    """Every knob of the reward, with its default.

    Attributes:
        response_format: where the final answer is (:mod:`reward.response_format`): ``plain`` (the
            whole response), ``qwen3_thinking`` (after ``</think>``; Qwen3 with thinking on,
            Qwen3-Next-Thinking) or ``harmony`` (GPT-OSS's final channel). In the thinking formats a
            response with no final region, or cut off at the length cap, scores 0 as ``unfinished``.
            Set per model in ``dfpo/config/base_model/*.yaml``.
        score_mode: ``binary`` (score 1 correct / 0 otherwise) or ``signed`` (+1 / -1, DAPO style).
        code_mode: ``all_pass`` (1 only when every test passes) or ``fraction`` (pass rate).
        math_timeout_s: hard wall-clock limit of one math answer check, counted from the start
            of the call (waiting for a math-verify worker included).
        math_workers: math-verify worker processes kept (default min(4, CPUs)); fixed at first
            use.  Under load, up to max(3 x, 8) are forked while needed.
        code_test_timeout_s: CPU seconds per test (LiveCodeBench's 6 s, there wall-clock): the CPU
            time of the test's process, so a program's verdict does not depend on what runs beside
            it; a wall-clock backstop 3 times as long ends a program that sleeps or blocks.
        code_problem_budget_s: cap on the CPU seconds for all tests of one problem; default
            ``None``: LiveCodeBench's own, ``(code_test_timeout_s + 1) * tests + 5`` seconds, with a
            wall-clock backstop 3 times as long.  Every limit counts from the moment the run gets
            its sandbox slot: waiting for one is not part of it.
        code_concurrency: sandboxed programs run at once on this host, all reward processes
            together (host-wide slots); default ``None``: the environment variable
            ``REWARD_SANDBOX_MAX_RUNS``, else the cores this process may use (its CPU affinity,
            lowered to its cgroup's CPU quota).  More than the cores makes programs share them,
            which only the wall-clock backstops notice.
        code_queue_timeout_s: how long one call may wait for a sandbox slot, from the call's start
            (default 600 s); a call that gets none scores 0 as ``sandbox_error`` with
            ``scorer_failed`` = 1, with no verdict on the program.
        code_memory_mb: address-space limit per sandboxed process.
        code_output_mb: largest output one test may write.
        code_backend: ``local`` (this machine's sandbox) or ``sandbox_fusion`` (HTTP server).
        sandbox_fusion_url: the SandboxFusion server's ``run_code`` endpoint, e.g. ``http://host:8080/run_code``.
        sandbox_fusion_concurrency: parallel requests per problem to SandboxFusion.
        call_timeout_s: whole-call bound of one ``compute_score`` call (:mod:`reward.guard`), a
            last line of defence; past it the response scores 0 with reason ``timeout`` and
            ``scorer_failed`` = 1. Default ``None``: the longest the scorer itself takes for the
            response plus 60 s (the math check's limit; for code, the wait for a sandbox slot, the
            run's wall-clock backstop and its teardown: ``CodeLimits.call_bound_s``).
    """

    response_format: str = PLAIN
    score_mode: str = "binary"
    code_mode: str = "all_pass"
    math_timeout_s: float = 10.0
    math_workers: int | None = None
    code_test_timeout_s: float = 6.0
    code_problem_budget_s: float | None = None
    code_memory_mb: int = 2048
    code_output_mb: int = 16
    code_concurrency: int | None = None
    code_queue_timeout_s: float = 600.0
    code_backend: str = "local"
    sandbox_fusion_url: str | None = None
    sandbox_fusion_concurrency: int = 4
    call_timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_response_format(self.response_format)
        check_score_mode(self.score_mode)
        if self.code_mode not in CODE_MODES:
            raise ValueError(f"code_mode={self.code_mode!r} is not supported; use one of {CODE_MODES}")
        if self.code_backend not in CODE_BACKENDS:
            raise ValueError(f"code_backend={self.code_backend!r} is not supported; use one of {CODE_BACKENDS}")
        if self.code_backend == "sandbox_fusion" and not self.sandbox_fusion_url:
            raise ValueError("code_backend='sandbox_fusion' needs sandbox_fusion_url (e.g. http://host:8080/run_code)")
        for name in (
            "math_timeout_s",
            "code_test_timeout_s",
            "code_problem_budget_s",
            "code_memory_mb",
            "code_output_mb",
            "code_queue_timeout_s",
            "call_timeout_s",
        ):
            value = getattr(self, name)
            if value is None and name in ("code_problem_budget_s", "call_timeout_s"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"reward option {name} must be a positive number, got {value!r}")
        if self.code_concurrency is not None:
            check_max_runs(self.code_concurrency, "reward option code_concurrency")
        if self.math_workers is not None and (not isinstance(self.math_workers, int) or self.math_workers < 1):
            raise ValueError(f"reward option math_workers must be a positive integer, got {self.math_workers!r}")
        if not isinstance(self.sandbox_fusion_concurrency, int) or self.sandbox_fusion_concurrency < 1:
            raise ValueError(
                f"sandbox_fusion_concurrency must be a positive integer, got {self.sandbox_fusion_concurrency!r}"
            )

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> RewardOptions:
        """Build from ``compute_score``'s extra keyword arguments."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known - VERL_CALL_KWARGS)
        if unknown:
            raise ValueError(
                f"unknown reward option(s) {unknown} in reward.custom_reward_function.reward_kwargs; "
                f"valid options: {sorted(known)}"
            )
        return cls(**{key: value for key, value in kwargs.items() if key in known})
