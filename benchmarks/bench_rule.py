"""Rule-based scoring throughput: the ``process`` executor against in-process loops, and hang-proofing.

Side by side in one run, on GSM8K-style (real questions and answers from ../shared/data/gsm8k) and
MATH-style (synthetic ``\\boxed{}`` answers checked with math-verify) batches:

1. a plain Python loop calling the scorer (what verl's NaiveRewardManager does), rewardkit's
   ``inline`` executor, and the ``process`` executor (warm pool): samples/s and ratios;
2. pool start-up: the first batch of a fresh ``process`` engine against ``inline``;
3. the GSM8K batch with 1% of samples hanging forever: wall time against the per-sample deadline
   (the ``inline`` executor would never return, so it is not run);
4. verl's own NaiveRewardManager when verl is importable (skipped with a message otherwise).

Run: ``.venv/bin/python benchmarks/bench_rule.py [--n 4096] [--math-n 256] [--workers N] [--timeout 1.0] [--hang 0.01]``
(``--math-n 4096`` runs the MATH batch at full size: several minutes on 2 cores, math-verify is slow.)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
REPEAT = 3  # timed runs per measurement; the best is reported

HANGING_SCORER = textwrap.dedent(
    """
    import time

    from rewardkit.scorers import gsm8k


    def compute_score(solution_str, ground_truth, extra_info):
        if extra_info.get("hang"):
            time.sleep(3600)
        return gsm8k.compute_score(solution_str, ground_truth)
    """
)


def gsm8k_batch(n: int, seed: int = 0) -> list[dict]:
    """``n`` GSM8K samples: the reference solution (right) or the same with a changed answer (wrong)."""
    rows = []
    for name in ("test.jsonl", "train.jsonl"):
        with open(GSM8K / name, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        body, _, answer = row["answer"].rpartition("####")
        answer = answer.strip()
        if rng.random() < 0.5:
            answer = (
                str(int(answer.replace(",", "")) + rng.randint(1, 9)) if answer.lstrip("-").isdigit() else "0"
            )
        out.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": row["question"],
                "response": f"{body.strip()}\nThe answer is #### {answer}",
                "ground_truth": row["answer"]
                .rpartition("####")[2]
                .strip(),  # as verl's preprocessing stores it
                "extra_info": {"i": i},
            }
        )
    return out


def math_batch(n: int, seed: int = 0) -> list[dict]:
    """``n`` MATH-style samples with boxed answers: fractions, decimals, integers, sqrt, intervals.

    Different seeds give different numbers, so no run profits from math-verify's caches warmed by another.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 400), rng.randint(2, 400)
        kind = i % 5
        if kind == 0:
            gold, pred = f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{a * 2}}}{{{b * 2}}}"
        elif kind == 1:
            gold, pred = f"{a / 4:g}", f"\\frac{{{a}}}{{4}}"
        elif kind == 2:
            gold, pred = str(a * b), str(a * b + rng.choice([0, 1]))
        elif kind == 3:
            gold, pred = f"{a}\\sqrt{{{b}}}", f"{a}\\sqrt{{{b}}}"
        else:
            gold, pred = f"[{a}, {a + b})", f"[{a},{a + b})"
        out.append(
            {
                "data_source": "lighteval/MATH",
                "prompt": f"Problem {i}",
                "response": f"We compute step by step ... so the answer is $\\boxed{{{pred}}}$.",
                "ground_truth": gold,
                "extra_info": {"i": i},
            }
        )
    return out


def timed(fn, repeat: int = 1):
    """(best wall time over ``repeat`` runs, last value): the best run is the least disturbed by other load."""
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def plain_loop(samples: list[dict]) -> list[float]:
    """The baseline: call the registered scorer once per sample in this process, no isolation."""
    from rewardkit.plugins import get_registries

    regs = get_registries()
    out = []
    for s in samples:
        spec = regs.scorers.get(regs.scorers.name_for(s["data_source"]))
        r = spec.fn(response=s["response"], ground_truth=s["ground_truth"])
        out.append(float(r["score"] if isinstance(r, dict) else r))
    return out


def throughput(name: str, make, n: int, workers: int, repeat: int = REPEAT) -> None:
    """Time the plain loop, ``inline`` and ``process`` on batches ``make(n, seed)``, each on its own seed."""
    import rewardkit

    base = {"dedup": False, "timeout_s": 30.0, "num_workers": workers}
    print(f"\n== {name}: {n} samples, {workers} worker(s) ==")
    warm, b1, b2, b3 = make(32, 99), make(n, 1), make(n, 2), make(n, 3)  # warm: a chunk for every worker
    plain_loop(warm)  # import the scorer's dependencies, as the engines below do
    loop_s, _ = timed(lambda: plain_loop(b1), repeat)
    with rewardkit.RewardEngine({**base, "executor": "inline"}) as inline:
        inline.compute(warm)  # load scorer modules
        inline_s, inline_r = timed(lambda: inline.compute(b2), repeat)
    with rewardkit.RewardEngine({**base, "executor": "process"}) as proc:
        cold_s, _ = timed(lambda: proc.compute(warm))
        proc_s, proc_r = timed(lambda: proc.compute(b3), repeat)
        same = proc.compute(b2[:64]).scores
    assert same == inline_r.scores[:64] == plain_loop(b2[:64]), "executors disagree"
    assert proc_r.num_failed == 0, proc_r.metrics
    print(f"  plain loop (verl-style)  {n / loop_s:9.0f} samples/s   {loop_s:6.2f} s   1.00x")
    print(
        f"  inline executor          {n / inline_s:9.0f} samples/s   {inline_s:6.2f} s   {loop_s / inline_s:.2f}x"
    )
    print(
        f"  process executor (warm)  {n / proc_s:9.0f} samples/s   {proc_s:6.2f} s   {loop_s / proc_s:.2f}x"
    )
    print(
        f"  process / inline ratio: {inline_s / proc_s:.2f}x   (pool start + first 32 samples: {cold_s:.2f} s)"
    )
    print(f"  mean score {sum(proc_r.scores) / n:.3f}")


def startup(workers: int) -> None:
    import rewardkit

    one = [{"data_source": "openai/gsm8k", "response": "#### 1", "ground_truth": "1"}]
    print(f"\n== start-up: first batch of 1 sample on a new engine, {workers} worker(s) ==")
    for label, executor in (
        ("inline", "inline"),
        ("process (1st engine)", "process"),
        ("process (2nd engine)", "process"),
    ):
        with rewardkit.RewardEngine({"executor": executor, "num_workers": workers}) as engine:
            first, _ = timed(lambda e=engine: e.compute(one))
            again, _ = timed(lambda e=engine: e.compute(one))
        print(f"  {label:22s} first call {first * 1000:8.1f} ms   next call {again * 1000:6.1f} ms")


def hanging(samples: list[dict], workers: int, timeout: float, fraction: float) -> None:
    import rewardkit

    rng = random.Random(1)
    n_hang = max(1, round(len(samples) * fraction))
    hang_at = set(rng.sample(range(len(samples)), n_hang))
    batch = [{**s, "extra_info": {**s["extra_info"], "hang": i in hang_at}} for i, s in enumerate(samples)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hanging_gsm8k.py"
        path.write_text(HANGING_SCORER, encoding="utf-8")
        cfg = {
            "executor": "process",
            "num_workers": workers,
            "timeout_s": timeout,
            "dedup": False,
            "custom_reward_function": {"path": str(path)},
        }
        print(
            f"\n== {len(batch)} GSM8K samples, {n_hang} hang forever, timeout_s={timeout}, {workers} worker(s) =="
        )
        with rewardkit.RewardEngine(cfg) as engine:
            engine.compute(batch[:8] if not (hang_at & set(range(8))) else batch[-8:])
            wall, result = timed(lambda: engine.compute(batch))
            stats = dict(engine.executor.stats)
    reasons = result.metrics
    timeouts = int(reasons.get("reward/failed/timeout", 0))
    ok = int(reasons.get("reward/num_ok", 0))
    floor = n_hang * timeout / workers
    print(
        f"  wall {wall:.2f} s ({wall / n_hang:.2f} s per hang); hung samples x deadline / workers = {floor:.2f} s; "
        f"ratio {wall / floor:.2f}"
    )
    print(
        f"  results: {ok} ok, {timeouts} timeout, {result.num_failed - timeouts} other failures (of {len(batch)})"
    )
    print(f"  workers killed {stats['killed']}, started {stats['started']}")
    wrong = [i for i in hang_at if result.reasons[i] != "timeout"]
    assert not wrong and timeouts == n_hang and ok == len(batch) - n_hang, "hang isolation failed"


def _verl_batch(samples: list[dict], DataProto):
    """The samples as verl sees them: token ids from a small byte-level BPE tokenizer trained on them."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=["<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([s["prompt"] for s in samples] + [s["response"] for s in samples], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
    fast.padding_side = "left"
    p = fast([s["prompt"] for s in samples], padding=True, return_tensors="pt")
    fast.padding_side = "right"
    r = fast([s["response"] for s in samples], padding=True, return_tensors="pt")
    data = DataProto.from_dict(
        tensors={
            "prompts": p["input_ids"],
            "responses": r["input_ids"],
            "input_ids": torch.cat([p["input_ids"], r["input_ids"]], dim=1),
            "attention_mask": torch.cat([p["attention_mask"], r["attention_mask"]], dim=1),
        },
        non_tensors={
            "data_source": np.array([s["data_source"] for s in samples], dtype=object),
            "reward_model": np.array([{"ground_truth": s["ground_truth"]} for s in samples], dtype=object),
            "extra_info": np.array([dict(s["extra_info"]) for s in samples], dtype=object),
        },
    )
    texts = fast.batch_decode(r["input_ids"], skip_special_tokens=True)
    return fast, data, texts


def verl_side_by_side(samples: list[dict], workers: int, timeout: float, n_hang: int) -> None:
    """verl's NaiveRewardManager (decode + default_compute_score per sample, in this process) vs rewardkit."""
    import rewardkit

    print(f"\n== verl NaiveRewardManager vs rewardkit, {len(samples)} GSM8K samples ==")
    try:
        from verl import DataProto
        from verl.workers.reward_manager.naive import NaiveRewardManager
    except Exception as e:  # noqa: BLE001 - verl missing or broken: say so and go on
        print(f"  skipped: verl is not importable here ({type(e).__name__}: {e})")
        return
    import verl

    tokenizer, data, texts = _verl_batch(samples, DataProto)
    manager = NaiveRewardManager(tokenizer=tokenizer, num_examine=0)
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints examples
        verl_s, out = timed(lambda: manager(data, return_dict=True), REPEAT)
    verl_scores = out["reward_tensor"].sum(dim=-1).tolist()
    decoded = [{**s, "response": t} for s, t in zip(samples, texts, strict=True)]
    with rewardkit.RewardEngine({"executor": "process", "num_workers": workers, "dedup": False}) as engine:
        engine.compute(decoded[:8])
        rk_s, result = timed(lambda: engine.compute(decoded), REPEAT)
    agree = sum(a == b for a, b in zip(verl_scores, result.scores, strict=True)) / len(samples)
    n = len(samples)
    print(
        f"  verl {verl.__version__} NaiveRewardManager  {n / verl_s:9.0f} samples/s   {verl_s:6.2f} s (decoding included)"
    )
    print(f"  rewardkit process executor   {n / rk_s:9.0f} samples/s   {rk_s:6.2f} s   {verl_s / rk_s:.2f}x")
    print(f"  same score on {agree:.1%} of samples")

    # Hanging samples: verl's compute_score_timeout (SIGALRM, main thread only) gives 0.0 after the
    # timeout, one sample after another; rewardkit's workers fail them as `timeout`, in parallel.
    hang_src = HANGING_SCORER.replace(
        "solution_str, ground_truth, extra_info", "data_source, solution_str, ground_truth, extra_info"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hang_verl.py"
        path.write_text(hang_src, encoding="utf-8")
        from rewardkit.scoring import load_function

        fn, _ref = load_function(str(path))
        part = data[: min(n, 1024)]  # verl waits out each hang in turn: keep this part short
        m = len(part)
        hung = list(range(0, m, max(1, m // n_hang)))[:n_hang]
        for i in hung:
            part.non_tensor_batch["extra_info"][i] = {**part.non_tensor_batch["extra_info"][i], "hang": True}
        slow = NaiveRewardManager(
            tokenizer=tokenizer, num_examine=0, compute_score=fn, compute_score_timeout=timeout
        )
        with contextlib.redirect_stdout(io.StringIO()):
            verl_hang_s, out = timed(lambda: slow(part, return_dict=True))
        zeros = sum(out["reward_tensor"][i].sum().item() == 0.0 for i in hung)
    print(
        f"  {m} samples with {len(hung)} hanging, timeout {timeout}s: verl {verl_hang_s:.2f} s "
        f"({verl_hang_s / len(hung):.2f} s per hang, one after another; {zeros} of them scored 0.0, silently)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None, help="default: CPUs available")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-sample deadline in the hang run")
    parser.add_argument("--hang", type=float, default=0.01, help="fraction of hanging samples")
    parser.add_argument(
        "--math-n", type=int, default=256, help="MATH batch size (math-verify takes ~10-40 ms a sample here)"
    )
    args = parser.parse_args()
    workers = args.workers or len(os.sched_getaffinity(0))
    print(
        f"python {sys.version.split()[0]}, {len(os.sched_getaffinity(0))} CPUs available, load {os.getloadavg()[0]:.1f}"
    )
    gsm = gsm8k_batch(args.n)
    startup(workers)
    throughput("GSM8K", gsm8k_batch, args.n, workers)
    if args.math_n:
        throughput("MATH (math-verify)", math_batch, args.math_n, workers, repeat=1)
    hanging(gsm, workers, args.timeout, args.hang)
    verl_side_by_side(gsm, workers, args.timeout, max(1, round(min(len(gsm), 1024) * args.hang)))


if __name__ == "__main__":
    main()
