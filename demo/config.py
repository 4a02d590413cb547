"""Settings of the demo run (defaults: the README's run, under 3 minutes on 2 CPU cores)."""

from __future__ import annotations

from dataclasses import dataclass, field

from demo.warm_start import WarmStartConfig

OPTIMIZERS = ("sgd", "adamw")
"""Valid values of :attr:`DemoConfig.optimizer`."""


@dataclass(frozen=True)
class DemoConfig:
    """Everything that determines a demo run; the same config gives the same numbers."""

    seed: int = 0
    """Seeds the model initialisation, the warm start, the prompt schedule and the sampling."""
    steps: int = 30
    """RL steps per method (one rollout batch per step)."""
    prompts_per_step: int = 8
    """Prompts (groups) sampled per step."""
    group_size: int = 8
    """Responses per prompt (verl's rollout.n, the paper's G)."""
    mini_batches: int = 4
    """Optimizer updates per step, each on whole groups; all but the first are off-policy."""
    optimizer: str = "sgd"
    """RL optimizer: "sgd" (every parameter moves in proportion to its gradient) or "adamw" (verl's)."""
    learning_rate: float = 0.1
    """Learning rate of the RL updates."""
    weight_decay: float = 0.0
    """AdamW weight decay (0: every parameter change comes from the policy gradient)."""
    hidden_size: int = 64
    """Width of the tiny Qwen3 policy."""
    grad_clip: float = 1.0
    """Gradient-norm clip per update (verl's actor.grad_clip default)."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """The supervised warm start every method begins from."""

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "group_size", "mini_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (group-relative advantages), got {self.group_size}")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be a multiple of mini_batches ({self.mini_batches}): "
                "every mini-batch holds whole groups"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {self.optimizer!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
