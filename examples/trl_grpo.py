"""GRPO with TRL, rewarded by rewardkit's GSM8K scorer plus a format bonus.

    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --steps 50
    python examples/trl_grpo.py --tiny --steps 1      # offline smoke run with a random 2-layer model

Each rewardkit reward function is an ordinary TRL reward function: TRL logs it as
``rewards/<name>/mean``, and rewardkit adds ``rewardkit/<name>/num_failed`` / ``num_abstained``.
Dataset columns ``ground_truth`` and ``data_source`` reach the scorers; other columns arrive in
``extra_info``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_rows(path: Path, limit: int) -> list[dict]:
    """Chat prompts with their ground truth from rewardkit's GSM8K rollouts file."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            rows.append(
                {
                    "prompt": rec["prompt"],
                    "ground_truth": rec["ground_truth"],
                    "data_source": rec["data_source"],
                }
            )
            if len(rows) >= limit:
                break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="policy model (hub id or local directory)")
    parser.add_argument("--tiny", action="store_true", help="build a random tiny model locally instead")
    parser.add_argument("--data", type=Path, default=HERE / "gsm8k_rollouts.jsonl")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()
    if not args.model and not args.tiny:
        parser.error("give --model or --tiny")

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rewardkit.integrations.trl import RewardFunction

    workdir = Path(args.output_dir or tempfile.mkdtemp(prefix="rewardkit-grpo-"))
    model_path = args.model
    if args.tiny:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from tiny_models import build_tiny_causal_lm

        model_path = str(build_tiny_causal_lm(workdir / "tiny-policy"))

    accuracy = RewardFunction({"executor": "process", "timeout_s": 10}, name="gsm8k")  # routed by data_source
    fmt = RewardFunction(
        {
            "executor": "inline",
            "reward_manager": {"name": "composite"},
            "scorers": [{"name": "regex_format", "kwargs": {"pattern": r".*####\s*-?[\d,.]+"}}],
        },
        name="format",
    )
    dataset = Dataset.from_list(load_rows(args.data, args.rows))
    config = GRPOConfig(
        output_dir=str(workdir / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=32 if args.tiny else 256,
        max_steps=args.steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        reward_weights=[1.0, 0.1],
        use_cpu=args.tiny,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_path),
        processing_class=AutoTokenizer.from_pretrained(model_path),
        reward_funcs=[accuracy, fmt],
        args=config,
        train_dataset=dataset,
    )
    trainer.train()
    for entry in trainer.state.log_history:
        shown = {k: v for k, v in entry.items() if k.startswith(("rewards/", "rewardkit/"))}
        if shown:
            print(shown)
    accuracy.close()
    fmt.close()


if __name__ == "__main__":
    main()
