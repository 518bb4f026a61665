"""The paths trainers actually call, side by side with verl on the same input.

One GSM8K batch, given to everyone as a verl ``DataProto`` of token ids (left-padded prompts,
256-token right-padded responses; decoding is part of every timing):

1. verl ``NaiveRewardManager`` (the reference: 1.00x);
2. rewardkit's ``RewardKitRewardManager`` called as verl's legacy manager;
3. ``RewardEngine.compute(DataProto, tokenizer=...)`` (before that existed: decode in the driver, then
   ``compute(records)``; the line says which);
4. the floor: id lists + the fast tokenizer's batch decode + the GSM8K regex + one reward-tensor scatter;
5. verl ``NaiveRewardManager`` with rewardkit's ``compute_score`` as ``custom_reward_function``;
6. verl's ``RewardLoopWorker.compute_score_batch`` with ``RewardKitRewardManager`` (``run_single`` per
   sample; capped at ``--per-sample-max``);
7. ``rewardkit.compute(samples)`` called repeatedly with the default config, against a bare loop of the
   same scorer (decoded records, no verl);
8. time per sample at B = 256 .. 65,536 (``--max-b`` caps it) for the DataProto path and the floor.

Timings are medians of ``--repeat`` interleaved runs (each round runs every path once); each ratio is
printed twice, of the medians and of the fastest rounds (steadier where a neighbour adds load). Without verl
the verl paths are skipped with a message. The tokenizer is a byte-level BPE built locally with the
``tokenizers`` library (no downloads).

Run: ``.venv/bin/python benchmarks/bench_trainer_paths.py [--b 4096] [--repeat 5] [--max-b 65536]
[--per-sample-max 1024] [--executor inline]``; quick: ``--b 512 --max-b 2048 --repeat 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import io
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESPONSE_LEN = 256


def _gsm8k_dir() -> Path:
    for base in (REPO.parent, REPO.parent.parent, Path("/work")):
        if (base / "shared" / "data" / "gsm8k" / "test.jsonl").exists():
            return base / "shared" / "data" / "gsm8k"
    raise SystemExit("GSM8K data not found (expected shared/data/gsm8k/{test,train}.jsonl)")


def gsm8k_records(n: int, seed: int = 0) -> list[dict]:
    """``n`` GSM8K records: the reference solution with its answer kept (right) or changed (wrong)."""
    rows = []
    for name in ("test.jsonl", "train.jsonl"):
        with open(_gsm8k_dir() / name, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        body, _, answer = row["answer"].rpartition("####")
        gold = answer.strip()
        if rng.random() < 0.5:
            answer = (
                str(int(gold.replace(",", "")) + rng.randint(1, 9)) if gold.lstrip("-").isdigit() else "0"
            )
        else:
            answer = gold
        out.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": row["question"],
                "response": f"{body.strip()}\nThe answer is #### {answer}",
                "ground_truth": gold,
                "extra_info": {"index": i},
            }
        )
    return out


def build_tokenizer(records: list[dict]):
    """A fast byte-level BPE tokenizer (transformers wrapper) trained on a slice of the texts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=["<pad>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [r["prompt"] for r in records[:2000]] + [r["response"] for r in records[:2000]]
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|endoftext|>")


def to_dataproto(records: list[dict], tokenizer):
    """The records as verl's rollout hands them over: prompts left-padded, responses right-padded to 256."""
    import numpy as np
    import torch
    from verl import DataProto

    tokenizer.padding_side = "left"
    p = tokenizer([r["prompt"] for r in records], padding=True, return_tensors="pt")
    tokenizer.padding_side = "right"
    r = tokenizer(
        [x["response"] for x in records],
        padding="max_length",
        truncation=True,
        max_length=RESPONSE_LEN,
        return_tensors="pt",
    )
    return DataProto.from_dict(
        tensors={
            "prompts": p["input_ids"],
            "responses": r["input_ids"],
            "input_ids": torch.cat([p["input_ids"], r["input_ids"]], dim=1),
            "attention_mask": torch.cat([p["attention_mask"], r["attention_mask"]], dim=1),
        },
        non_tensors={
            "data_source": np.array([x["data_source"] for x in records], dtype=object),
            "reward_model": np.array(
                [{"ground_truth": x["ground_truth"], "style": "rule"} for x in records], dtype=object
            ),
            "extra_info": np.array([dict(x["extra_info"]) for x in records], dtype=object),
            "uid": np.array([str(i) for i in range(len(records))], dtype=object),
        },
    )


def _gsm8k_scorer():
    from rewardkit.plugins import get_registries

    regs = get_registries()
    return regs.scorers.get(regs.scorers.name_for("openai/gsm8k")).fn


_GSM8K = None


def floor(data, tokenizer):
    """The least work any reward path must do: strip padding, batch-decode, regex, one scatter.

    The regex is rewardkit's GSM8K scorer called directly, so the floor agrees with rewardkit exactly.
    """
    global _GSM8K
    _GSM8K = _GSM8K or _gsm8k_scorer()
    import torch

    resp = data.batch["responses"]
    mask = data.batch["attention_mask"][:, -resp.shape[-1] :]
    lengths = mask.sum(-1)
    ids = [row[:n] for row, n in zip(resp.tolist(), lengths.tolist(), strict=True)]
    texts = tokenizer._tokenizer.decode_batch(ids, skip_special_tokens=True)
    gts = data.non_tensor_batch["reward_model"]
    scores = torch.tensor(
        [
            _GSM8K(response=t, ground_truth=g["ground_truth"])["score"]
            for t, g in zip(texts, gts, strict=True)
        ],
        dtype=torch.float32,
    )
    out = torch.zeros(resp.shape, dtype=torch.float32)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    out[rows, lengths[rows] - 1] = scores[rows]
    return out


def bare_loop(records: list[dict]) -> list[float]:
    """The registered GSM8K scorer called once per record in this process: no engine at all."""
    from rewardkit.plugins import get_registries

    regs = get_registries()
    spec = regs.scorers.get(regs.scorers.name_for("openai/gsm8k"))
    return [float(spec.fn(response=r["response"], ground_truth=r["ground_truth"])["score"]) for r in records]


def engine_takes_dataproto() -> bool:
    from rewardkit.engine import RewardEngine

    return "tokenizer" in inspect.signature(RewardEngine.compute).parameters


CLOCK = time.perf_counter


BEST: dict[str, float] = {}  # the fastest round of each path in the last median_times call


def median_times(paths: dict, repeat: int) -> dict[str, float]:
    """Median time of each path over ``repeat`` interleaved rounds (one warm-up round first); the
    fastest round of each goes to :data:`BEST` (a noisy neighbour only ever adds time)."""
    times: dict[str, list[float]] = {k: [] for k in paths}
    for round_ in range(repeat + 1):
        for name, fn in paths.items():
            with contextlib.redirect_stdout(io.StringIO()):
                start = CLOCK()
                fn()
                elapsed = CLOCK() - start
            if round_:
                times[name].append(elapsed)
    BEST.clear()
    BEST.update({k: min(v) for k, v in times.items()})
    return {k: statistics.median(v) for k, v in times.items()}


def report(title: str, times: dict[str, float], ref: str, n: int) -> None:
    print(f"\n== {title} ==  (ratio of medians; of the fastest rounds)")
    for name, t in times.items():
        best = f"{BEST[name] / BEST[ref]:5.2f}x" if name in BEST and ref in BEST else ""
        print(f"  {name:62s} {t * 1e3:9.1f} ms  {t / n * 1e6:7.1f} us/sample  {t / times[ref]:5.2f}x  {best}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--b", type=int, default=4096, help="batch size of the side-by-side table")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds per measurement")
    parser.add_argument("--max-b", type=int, default=65536, help="largest B of the scaling table (0: skip)")
    parser.add_argument("--per-sample-max", type=int, default=1024, help="B cap of the run_single path")
    parser.add_argument("--executor", default="inline", help="rewardkit executor for the manager paths")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: this process's CPU time (steadier on a loaded machine; undercounts work in other processes)",
    )
    parser.add_argument("--gc-b", type=int, default=16384, help="B of the garbage-collection table (0: skip)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    print(
        f"python {sys.version.split()[0]}, {len(os.sched_getaffinity(0))} CPUs, "
        f"load {os.getloadavg()[0]:.1f}, rewardkit executor {args.executor!r}, {args.clock} clock"
    )
    import rewardkit
    from rewardkit.engine import RewardEngine

    records = gsm8k_records(max(args.b, args.max_b, args.gc_b))
    rk_cfg = {"executor": args.executor}

    try:
        import verl
        from verl.workers.reward_manager.naive import NaiveRewardManager
    except Exception as e:  # noqa: BLE001 - verl missing or broken: say so, run what needs no verl
        verl = None
        print(f"verl paths skipped: verl is not importable ({type(e).__name__}: {e})")

    if verl is not None:
        from rewardkit.integrations import verl as rk_verl

        tokenizer = build_tokenizer(records)
        data = to_dataproto(records[: args.b], tokenizer)
        print(f"verl {verl.__version__}; B = {args.b}; prompts {data.batch['prompts'].shape[-1]} tokens wide")
        naive = NaiveRewardManager(tokenizer=tokenizer, num_examine=0)
        rk_manager = rk_verl.RewardKitRewardManager(tokenizer=tokenizer, rewardkit_config=rk_cfg)
        engine = RewardEngine(rk_cfg)
        if engine_takes_dataproto():
            engine_label = "RewardEngine.compute(DataProto, tokenizer=...)"
            engine_path = functools.partial(engine.compute, data, tokenizer=tokenizer)
        else:
            engine_label = "RewardEngine.compute(records) after decoding in the driver"

            def engine_path():
                return engine.compute(rk_manager.records(data)[0])

        crf = NaiveRewardManager(
            tokenizer=tokenizer,
            num_examine=0,
            compute_score=functools.partial(rk_verl.compute_score, rewardkit_config=rk_cfg),
        )
        paths = {
            f"verl {verl.__version__} NaiveRewardManager": lambda: naive(data, return_dict=True),
            "rewardkit RewardKitRewardManager as verl's legacy manager": lambda: rk_manager(
                data, return_dict=True
            ),
            engine_label: engine_path,
            "floor: id lists + decode_batch + regex + reward tensor": lambda: floor(data, tokenizer),
            "verl NaiveRewardManager + rewardkit compute_score (crf)": lambda: crf(data, return_dict=True),
        }
        verl_rewards = naive(data, return_dict=True)["reward_tensor"]
        expected = floor(data, tokenizer)
        agree = float((verl_rewards == expected).all(-1).float().mean())
        print(f"rewardkit's gsm8k scorer and verl's agree on {agree:.1%} (verl misses answers with commas)")
        for name in list(paths)[1:3]:
            got = paths[name]()
            got = got["reward_tensor"] if isinstance(got, dict) else got
            if hasattr(got, "token_level_rewards"):
                got = got.token_level_rewards(data.batch["attention_mask"][:, -RESPONSE_LEN:])
            assert bool((got == expected).all()), f"{name} disagrees with the floor"
        times = median_times(paths, args.repeat)
        report(
            f"side by side, B = {args.b}, medians of {args.repeat} interleaved runs",
            times,
            list(paths)[0],
            args.b,
        )

        m = min(args.b, args.per_sample_max)
        part = data[:m]
        worker = _reward_loop_worker(tokenizer, rk_cfg)
        if worker is not None:
            loop_paths = {
                f"verl NaiveRewardManager (B = {m})": lambda: naive(part, return_dict=True),
                "verl RewardLoopWorker + RewardKitRewardManager.run_single": lambda: asyncio.run(
                    worker.compute_score_batch(part)
                ),
            }
            times = median_times(loop_paths, args.repeat)
            report(f"per-sample reward loop, B = {m}", times, list(loop_paths)[0], m)

    samples = [{k: v for k, v in r.items() if k != "prompt"} for r in records[: args.b]]
    assert rewardkit.compute(samples[:64]).scores == bare_loop(samples[:64])
    plain = {
        "bare loop of the registered gsm8k scorer": lambda: bare_loop(samples),
        "rewardkit.compute(samples), default config, every call": lambda: rewardkit.compute(samples),
    }
    times = median_times(plain, args.repeat)
    report(f"rewardkit.compute without verl, B = {args.b}", times, list(plain)[0], args.b)

    if verl is not None and args.max_b:
        print(f"\n== time per sample by B ({engine_label}; floor; verl naive up to 16,384) ==")
        b = 256
        while b <= args.max_b:
            big = to_dataproto(records[:b], tokenizer)
            row = {"floor": lambda big=big: floor(big, tokenizer)}
            if engine_takes_dataproto():
                row["engine"] = lambda big=big: engine.compute(big, tokenizer=tokenizer)
            else:
                row["engine"] = lambda big=big: engine.compute(rk_manager.records(big)[0])
            if b <= 16384:
                row["verl"] = lambda big=big: naive(big, return_dict=True)
            times = median_times(row, 3 if b <= 16384 else 1)
            cells = "  ".join(f"{k} {t / b * 1e6:6.1f} us" for k, t in times.items())
            ratio = f"  engine/floor {times['engine'] / times['floor']:.2f}x"
            if "verl" in times:
                ratio += f"  engine/verl {times['engine'] / times['verl']:.2f}x"
            print(f"  B = {b:6d}  {cells}{ratio}")
            b *= 4
    if verl is not None and args.gc_b:
        gc_table(to_dataproto(records[: args.gc_b], tokenizer), tokenizer, engine, args.repeat)
    if verl is not None:
        engine.close()
    from rewardkit.integrations.verl import close_engines

    close_engines()


def gc_table(data, tokenizer, engine, repeat: int) -> None:
    """The DataProto path with rewardkit's collector pause, without it, and with the collector off."""
    import gc

    try:
        from rewardkit import gcpause
    except ImportError:
        gcpause = None
    n = len(data)
    saved = gcpause.MIN_BATCH if gcpause else None

    full: dict[tuple[bool, bool], int] = {}

    def run(pause: bool, collector: bool):
        def fn():
            before = gc.get_stats()[2]["collections"]
            if gcpause:
                gcpause.MIN_BATCH = saved if pause else 1 << 62
            if not collector:
                gc.disable()
            try:
                engine.compute(data, tokenizer=tokenizer) if engine_takes_dataproto() else engine.compute(
                    _records_of(data, tokenizer)
                )
            finally:
                gc.enable()
                # A pause defers collections: the next allocations may run one, so count it here.
                _ = [[] for _ in range(20_000)]
                if gcpause:
                    gcpause.MIN_BATCH = saved
                key = (pause, collector)
                full[key] = full.get(key, 0) + gc.get_stats()[2]["collections"] - before

        return fn

    paths = {"gc on, no pause": run(False, True), "gc off (caller)": run(False, False)}
    if gcpause:
        paths["gc on, rewardkit's pause (default)"] = run(True, True)
    times = median_times(paths, repeat)
    report(f"garbage collection, engine on a DataProto, B = {n}", times, "gc on, no pause", n)
    counts = ", ".join(
        f"{k}: {full.get(key, 0)}"
        for k, key in zip(paths, [(False, True), (False, False), (True, True)], strict=False)
    )
    print(f"  full collections in {repeat + 1} calls each: {counts}")


def _records_of(data, tokenizer):
    from rewardkit.integrations.verl import RewardKitRewardManager

    return RewardKitRewardManager(tokenizer=tokenizer, rewardkit_config={"executor": "inline"}).records(data)[
        0
    ]


def _reward_loop_worker(tokenizer, rk_cfg):
    """verl's RewardLoopWorker holding a RewardKitRewardManager, without its tokenizer download."""
    try:
        from omegaconf import OmegaConf
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    except Exception as e:  # noqa: BLE001
        print(f"\nRewardLoopWorker path skipped ({type(e).__name__}: {e})")
        return None
    from rewardkit.integrations.verl import RewardKitRewardManager

    worker = object.__new__(RewardLoopWorker)  # its __init__ loads a tokenizer from a model path
    worker.config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://rewardkit.integrations.verl"}}}
    )
    worker.reward_router_address = None
    worker.reward_manager = RewardKitRewardManager(tokenizer=tokenizer, rewardkit_config=rk_cfg)
    return worker


if __name__ == "__main__":
    main()
