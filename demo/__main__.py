"""``python -m demo``: the learning tax on a CPU in a few minutes (see :mod:`demo`)."""

from __future__ import annotations

import time

STARTED = time.perf_counter()
"""When the process began importing the demo (the reported run time includes the imports)."""

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from demo.compared_methods import METHOD_KEYS, select_methods  # noqa: E402
from demo.config import OPTIMIZERS, DemoConfig  # noqa: E402
from demo.outputs import format_table, write_figure, write_json  # noqa: E402
from demo.training import run_demo  # noqa: E402
from demo.warm_start import WarmStartConfig  # noqa: E402

DEFAULTS = DemoConfig()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description="Train a tiny causal LM with GRPO, GSPO, GRPO-fix, DFPO and its ablations (verl's loss functions) "
        "and measure the cancellation residual and the drift on a template header shared by every response.",
    )
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed)
    parser.add_argument("--steps", type=int, default=DEFAULTS.steps, help="RL steps per method")
    parser.add_argument("--prompts-per-step", type=int, default=DEFAULTS.prompts_per_step)
    parser.add_argument("--group-size", type=int, default=DEFAULTS.group_size, help="responses per prompt (G)")
    parser.add_argument(
        "--mini-batches",
        type=int,
        default=DEFAULTS.mini_batches,
        help="updates per step (all but the first off-policy)",
    )
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=DEFAULTS.optimizer)
    parser.add_argument("--lr", type=float, default=DEFAULTS.learning_rate, help="RL learning rate")
    parser.add_argument("--warm-start-steps", type=int, default=DEFAULTS.warm_start.steps)
    parser.add_argument(
        "--methods", default=",".join(METHOD_KEYS), help=f"comma-separated subset of {','.join(METHOD_KEYS)}"
    )
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"), help="directory for the PNG and the JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for this tiny model)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        cfg = DemoConfig(
            seed=args.seed,
            steps=args.steps,
            prompts_per_step=args.prompts_per_step,
            group_size=args.group_size,
            mini_batches=args.mini_batches,
            optimizer=args.optimizer,
            learning_rate=args.lr,
            warm_start=WarmStartConfig(steps=args.warm_start_steps),
        )
        methods = select_methods([k.strip() for k in args.methods.split(",") if k.strip()])
    except ValueError as err:
        print(f"python -m demo: {err}", file=sys.stderr)
        return 2
    result = run_demo(cfg, methods)
    print()
    print(format_table(result))
    json_path = write_json(result, args.out / "learning_tax_demo.json")
    png_path = write_figure(result, args.out / "learning_tax_demo.png")
    print()
    print(f"[demo] figure: {png_path.resolve()}")
    print(f"[demo] numbers: {json_path.resolve()}")
    print(f"[demo] finished in {time.perf_counter() - STARTED:.0f}s (imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
