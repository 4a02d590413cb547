"""Benchmark: one ``update_actor`` through verl's real actor worker on CPU, DFPO vs verl's ``gspo``.

Same tiny Qwen2, same batch, same micro-batching; world size 1 (gloo), verl's engine worker run
with the test-only CPU platform shim of ``tests/integration/cpu_verl_harness.py``. Reports the
median wall time of ``update_actor`` for DFPO (Min-Replace, exact groups) and GSPO with 1 and with
4 mini-batches, the ratio, and — as the yardstick for DFPO's pre-pass — the time of one no-grad
forward of a mini-batch (``compute_log_prob`` on it). Printed, and written to
``benchmarks/results/update_actor-<UTC time>-<cpu capability>.json`` with the machine, date, commit
and versions (BENCHMARKS.md's table is generated from it: scripts/results_tables.py).

    python scripts/bench_update_actor.py [--prompts 16 --n 8 --repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmark_record import environment, write_result  # noqa: E402

from tests.integration import cpu_verl_harness as h  # noqa: E402

DFPO = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
]
GSPO = [
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.clip_ratio_low=3e-4",
    "actor_rollout_ref.actor.clip_ratio_high=4e-4",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
]


def build(kind: str, model_dir: str, overrides: list[str]):
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from dfpo.verl.workers import DFPOActorRolloutRefWorker

    cfg = h.compose_actor_config(model_dir, overrides)
    cls = DFPOActorRolloutRefWorker if kind == "dfpo" else ActorRolloutRefWorker
    worker = cls(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-len", type=int, nargs=2, default=(32, 96))
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp, h.single_process_group():
        spec = dataclasses.replace(h.TINY_MODEL, hidden_size=64, intermediate_size=128)
        model_dir = h.save_tiny_model(Path(tmp) / "model", seed=0, spec=spec)
        batch = h.make_batch(
            model_dir, h.BatchSpec(num_prompts=args.prompts, n=args.n, response_len=tuple(args.response_len), seed=0)
        )
        record = {
            "benchmark": "update_actor",
            "command": "python scripts/bench_update_actor.py " + " ".join(sys.argv[1:]),
            "environment": environment(),
            "settings": {
                "prompts": args.prompts,
                "n": args.n,
                "response_len": list(args.response_len),
                "micro_batch": args.micro,
                "repeats": args.repeats,
                "threads": torch.get_num_threads(),
                "model": "tiny Qwen2, 2 layers, hidden 64",
            },
            "mini_batches": [],
        }
        print(
            f"# batch: {args.prompts} prompts x {args.n} responses, responses "
            f"{args.response_len[0]}-{args.response_len[1]} tokens, micro-batch {args.micro}"
        )
        print(
            "| mini-batches | GSPO update_actor (s) | DFPO update_actor (s) | DFPO/GSPO | extra per mini-batch (s) | "
            "no-grad forward of a mini-batch (s) |"
        )
        print("|---|---|---|---|---|---|")
        for mini_batches in (1, 4):
            common = [
                f"actor_rollout_ref.rollout.n={args.n}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts // mini_batches}",
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro}",
                f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro}",
                "actor_rollout_ref.actor.ppo_epochs=1",
            ]
            workers = {"gspo": build("verl", model_dir, common + GSPO), "dfpo": build("dfpo", model_dir, common + DFPO)}
            meta = h.update_meta_from_config(workers["gspo"].config)
            data = h.with_update_meta(batch, **meta)
            times: dict[str, list[float]] = {k: [] for k in workers}
            for worker in workers.values():
                worker.update_actor(h.with_update_meta(batch, **meta))  # warm-up
            for _ in range(args.repeats):
                for name, worker in workers.items():  # interleaved: load drift hits both
                    start = time.perf_counter()
                    worker.update_actor(h.with_update_meta(batch, **meta))
                    times[name].append(time.perf_counter() - start)
            mini = h.select_samples(batch, list(range(len(batch) // mini_batches)))
            fwd = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                workers["gspo"].compute_log_prob(h.with_log_prob_meta(mini, calculate_entropy=False))
                fwd.append(time.perf_counter() - start)
            g, d, f = (statistics.median(times["gspo"]), statistics.median(times["dfpo"]), statistics.median(fwd))
            extra = (d - g) / max(mini_batches - 1, 1) if mini_batches > 1 else d - g
            print(f"| {mini_batches} | {g:.3f} | {d:.3f} | {d / g:.3f} | {extra:.3f} | {f:.3f} |")
            record["mini_batches"].append(
                {
                    "mini_batches": mini_batches,
                    "gspo_s": round(g, 4),
                    "dfpo_s": round(d, 4),
                    "extra_per_mini_batch_s": round(extra, 4),
                    "forward_of_a_mini_batch_s": round(f, 4),
                }
            )
            del data
    print(f"wrote {write_result('update_actor', str(torch.backends.cpu.get_cpu_capability()), record)}")


if __name__ == "__main__":
    main()
