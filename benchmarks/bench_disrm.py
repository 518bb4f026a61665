"""Discriminative RM throughput: token-budget, length-sorted micro-batches vs naive fixed-size batches.

A batch of mixed-length samples (default 256, about 8..512 tokens each) is scored with the same
model and the same forward function:

* ``naive``: batches of ``--batch-size`` samples in input order, each padded to its longest sample;
* ``packed``: length-sorted micro-batches under ``--token-budget`` padded tokens (what
  :class:`DiscriminativeRM` does), forward passes only;
* ``floor``: the same tokens with no padding at all (all ids concatenated and cut into full rows
  of the longest sample's width, batched under the same budget): the raw forward cost. Rows
  without padding also need no attention mask, which some attention kernels reward;
* ``rm.score()``: the backend end to end (rendering, tokenizing, packing, forward).

Timings are the best of ``--repeats`` runs, interleaved so that load from other processes hits
every variant alike. Prints samples/s for each and the ratios. Run: ``.venv/bin/python benchmarks/bench_disrm.py``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

WORDS = [
    "the",
    "answer",
    "is",
    "72",
    "because",
    "48",
    "plus",
    "24",
    "makes",
    "and",
    "Natalia",
    "sold",
    "clips",
]


def make_records(tokenizer, n: int, lo: int, hi: int, seed: int) -> list[dict]:
    """Records of about ``uniform(lo, hi)`` tokens each once rendered (template included), in random order."""
    rng = random.Random(seed)
    cost = {w: len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) for w in WORDS}
    overhead = len(
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "Q0?"}, {"role": "assistant", "content": ""}], tokenize=False
            ),
            add_special_tokens=False,
        )["input_ids"]
    )
    out = []
    for i in range(n):
        target, words, used = rng.randint(lo, hi) - overhead, [], 0
        while True:
            w = rng.choice(WORDS)
            if used + cost[w] > target:
                break
            words.append(w)
            used += cost[w]
        out.append({"prompt": f"Q{i % 10}?", "response": " ".join(words)})
    return out


def best_of_interleaved(repeats: int, fns: dict) -> dict[str, float]:
    """The fastest of ``repeats`` timed runs of each function, in seconds; runs alternate between the
    functions so that load from other processes hits them alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--min-tokens", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=16, help="naive batches")
    ap.add_argument("--token-budget", type=int, default=8192, help="packed batches")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from tiny_models import build_tiny_classifier

    from rewardkit.backends.discriminative import DiscriminativeRM, pack_batches
    from rewardkit.batch import to_samples
    from rewardkit.config import RewardModelConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_classifier(
            Path(tmp) / "rm",
            hidden_size=args.hidden,
            intermediate_size=4 * args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=max(1, args.hidden // 32),
            num_key_value_heads=max(1, args.hidden // 32),
            initializer_range=0.02,
        )
        cfg = RewardModelConfig(
            enable=True,
            backend="discriminative",
            model_path=str(path),
            kwargs={"token_budget": args.token_budget, "device": args.device, "max_length": args.max_tokens},
        )
        rm = DiscriminativeRM(cfg)
        rm.load()
        samples = to_samples(make_records(rm.tokenizer, args.samples, args.min_tokens, args.max_tokens, 0))
        ids = [rm.encode(s)[0] for s in samples]
        lengths = [len(x) for x in ids]
        total = sum(lengths)
        width = max(lengths)

        def naive():
            out = []
            for i in range(0, len(ids), args.batch_size):
                out.append(rm._forward(ids[i : i + args.batch_size]))
            return torch.cat(out)

        packing = pack_batches(lengths, args.token_budget)
        packed_padded = sum(len(b) * max(lengths[i] for i in b) for b in packing)

        def packed():
            for b in packing:
                rm._forward([ids[i] for i in b])

        def score():
            return rm.score(samples)

        stream = [t for x in ids for t in x]
        rows = [stream[i : i + width] for i in range(0, len(stream), width)]
        rows_per_batch = max(1, args.token_budget // width)

        def floor():
            for i in range(0, len(rows), rows_per_batch):
                rm._forward(rows[i : i + rows_per_batch])

        check = 64  # warm-up, and a check that both ways give the same scores
        naive_scores = torch.cat(
            [rm._forward(ids[i : i + args.batch_size]) for i in range(0, check, args.batch_size)]
        )
        packed_scores = [r.score for r in rm.score(samples[:check])]  # length-sorted inside
        naive_scores = naive_scores[:, 0].tolist()
        diff = max(abs(a - b) for a, b in zip(naive_scores, packed_scores, strict=True))
        t = best_of_interleaved(
            args.repeats, {"naive": naive, "packed": packed, "floor": floor, "score": score}
        )
        t_naive, t_packed, t_floor, t_score = t["naive"], t["packed"], t["floor"], t["score"]
        naive_padded = sum(
            len(ids[i : i + args.batch_size]) * max(lengths[i : i + args.batch_size])
            for i in range(0, len(ids), args.batch_size)
        )
        rm.close()

    n = len(samples)
    print(
        f"discriminative RM: {n} samples, {min(lengths)}..{max(lengths)} tokens (mean {total / n:.0f}), "
        f"llama hidden={args.hidden} layers={args.layers}, device={rm.device}, torch threads={torch.get_num_threads()}"
    )
    print(f"  max |score(naive) - score(packed)| = {diff:.2e}")
    rows_fmt = "  {:<44} {:>9.1f} samples/s  {:>7.3f} s  padding {:>5.1%}"
    print(
        rows_fmt.format(
            f"naive: fixed batches of {args.batch_size}, input order",
            n / t_naive,
            t_naive,
            1 - total / naive_padded,
        )
    )
    print(
        rows_fmt.format(
            f"packed: token budget {args.token_budget}, length-sorted",
            n / t_packed,
            t_packed,
            1 - total / packed_padded,
        )
    )
    print(rows_fmt.format("floor: same tokens, no padding", n / t_floor, t_floor, 0.0))
    print(
        rows_fmt.format(
            "rm.score(): packed + rendering + tokenizing", n / t_score, t_score, 1 - total / packed_padded
        )
    )
    print(
        f"  packed / naive speed-up: {t_naive / t_packed:.2f}x; packed is {t_packed / t_floor:.2f}x the floor "
        f"({len(packing)} batches per run)"
    )


if __name__ == "__main__":
    main()
