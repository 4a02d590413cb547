"""Benchmark: forward+backward of DFPO's loss vs verl 0.9.1's built-in ``gspo`` loss, same tensors.

Both losses run on the same (B, T) log-prob tensors in the same process, alternating, and the
median time of each is reported with the ratio DFPO/GSPO; printed, and written to
``benchmarks/results/loss-<UTC time>-<cpu capability>.json`` with the machine, date, commit and
versions (BENCHMARKS.md's table is generated from it: scripts/results_tables.py). Usage:

    python scripts/bench_loss.py                     # default grid, CPU
    python scripts/bench_loss.py --shapes 64x4096 512x16384 --repeats 7 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmark_record import environment, write_result  # noqa: E402


def make_inputs(batch: int, length: int, group_size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old = -torch.rand(batch, length, generator=g) * 3
    new = old + 0.01 * torch.randn(batch, length, generator=g)
    group_index = torch.arange(batch) // group_size
    rewards = torch.randint(0, 2, (batch,), generator=g).float()
    adv_seq = rewards - rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size)
    return old, new, adv_seq.unsqueeze(1) * mask, mask, group_index


def time_fn(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["64x4096", "256x8192", "512x16384"], help="BxT list")
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import verl  # noqa: F401  (registers dfpo through the plugin entry point)
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from dfpo import compute_dfpo_loss
    from dfpo.launch.compose import actor_config_from

    gspo = get_policy_loss_fn("gspo")
    cfg = actor_config_from(["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])

    record = {
        "benchmark": "loss",
        "command": "python scripts/bench_loss.py " + " ".join(sys.argv[1:]),
        "environment": environment(),
        "settings": {"group_size": args.group_size, "repeats": args.repeats, "threads": args.threads},
        "shapes": [],
    }
    print("| B x T | GSPO fwd+bwd (ms) | DFPO min_replace (ms) | ratio | DFPO orth_proj (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes:
        batch, length = (int(x) for x in shape.split("x"))
        old, new, adv, mask, groups = make_inputs(batch, length, args.group_size)

        # the closures bind this shape's inputs (default arguments), not the loop's last ones
        def run_gspo(new=new, old=old, adv=adv, mask=mask):
            lp = new.clone().requires_grad_(True)
            loss, _ = gspo(old, lp, adv, mask, "seq-mean-token-mean", cfg, None)
            loss.backward()

        def run_dfpo(transform, new=new, old=old, adv=adv, mask=mask, groups=groups):
            def run():
                lp = new.clone().requires_grad_(True)
                loss, _ = compute_dfpo_loss(old, lp, adv, mask, groups, transform=transform)
                loss.backward()

            return run

        runs = {"gspo": run_gspo, "min_replace": run_dfpo("min_replace"), "orth_proj": run_dfpo("orth_proj")}
        for fn in runs.values():
            fn()  # warm-up
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleave so drift in machine load hits all equally
            for name, fn in runs.items():
                samples[name] += time_fn(fn, 1)
        med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
        record["shapes"].append(
            {"batch": batch, "length": length, "median_ms": {k: round(v, 2) for k, v in med.items()}}
        )
        print(
            f"| {batch} x {length} | {med['gspo']:.1f} | {med['min_replace']:.1f} | "
            f"{med['min_replace'] / med['gspo']:.3f} "
            f"| {med['orth_proj']:.1f} | {med['orth_proj'] / med['gspo']:.3f} |"
        )
    print(f"wrote {write_result('loss', str(torch.backends.cpu.get_cpu_capability()), record)}")


if __name__ == "__main__":
    main()
