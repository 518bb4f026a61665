"""Maths reward accuracy and speed on labelled real model solutions, next to math-verify used plainly.

Data: ``../shared/data/math-dev/`` beside the repository (or ``$REWARDKIT_SHARED_DATA/math-dev``):

* ``processbench_gsm8k.jsonl``: 400 GSM8K solutions by 12 open models, labelled by people;
* ``qwen25math_math_cot.jsonl``: 800 MATH solutions labelled by Qwen2.5-Math's rule-based grader.

For every set, in one run: agreement with the labels (accuracy, false negatives, false positives)
and samples/s in a bare loop, for

* ``rk-math``: rewardkit's ``math`` scorer (default options), and ``rk-math-strict`` (``strict_box=True``);
* ``rk-gsm8k``: rewardkit's ``gsm8k`` scorer (GSM8K set only);
* ``mv-plain``: math-verify used plainly: ``verify(parse("\\boxed{gold}"), parse(response))``;
* ``verl-mv``: verl 0.9.1's ``math_verify`` reward logic run in-process (no process pool), the speed
  reference (skipped when verl is not importable).

Then, per data source verl routes to its own reward (``openai/gsm8k``, ``HuggingFaceH4/MATH-500``,
``math``, ``aime*``, ``numina_*``): agreement of verl's ``default_compute_score`` and of rewardkit's
routed scorer with the labels, and on how many rows their verdicts differ. Last, the ``math``
scorer through the ``process`` executor with ``--workers`` warm workers, as a ratio of a bare loop.

Every disagreement of ``rk-math`` / ``rk-gsm8k`` / ``mv-plain`` with the label is written to
``--out`` (JSONL: set, id, scorer, label, verdict, gold, what was extracted, response tail).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_math_accuracy.py [--out FILE] [--workers 2] [--repeat 2]``
(``--out`` defaults to ``math_disagreements.jsonl`` in the temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """``math-dev`` beside the repository (``../shared/data``), or under ``$REWARDKIT_SHARED_DATA``."""
    env = os.environ.get("REWARDKIT_SHARED_DATA")
    base = Path(env) if env else REPO.parent / "shared" / "data"
    return base / "math-dev"


def load(name: str) -> list[dict]:
    with open(data_dir() / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def mv_plain() -> Callable[[str, str], tuple[bool, str]]:
    """math-verify with its defaults, gold wrapped in ``\\boxed{}`` (timeouts off, as in a worker)."""
    from math_verify import parse, verify

    def check(response: str, gold: str) -> tuple[bool, str]:
        if response is None:
            return False, ""
        g = parse("\\boxed{" + gold + "}", parsing_timeout=None)
        p = parse(response, parsing_timeout=None)
        ok = bool(g and p and verify(g, p, timeout_seconds=None))
        return ok, str(p[-1]) if p else ""

    return check


def verl_mv() -> Callable[[str, str], tuple[bool, str]] | None:
    """verl's math_verify reward logic in-process, or ``None`` without verl."""
    try:
        from verl.utils.reward_score.math_verify import _verify_in_subprocess
    except Exception:  # noqa: BLE001 - verl is optional here
        return None

    def check(response: str, gold: str) -> tuple[bool, str]:
        if response is None:
            return False, ""
        return _verify_in_subprocess("\\boxed{" + gold + "}", response) == 1.0, ""

    return check


def rk(name: str, **kwargs) -> Callable[[str, str], tuple[bool, str]]:
    from rewardkit.scorers import gsm8k, math_boxed

    fn = {"math": math_boxed.compute_score, "gsm8k": gsm8k.compute_score}[name]

    def check(response: str, gold: str) -> tuple[bool, str]:
        if response is None:  # the start of a timed run: nothing cached from an earlier one
            math_boxed.clear_caches()
            return False, ""
        out = fn(response, gold, **kwargs)
        how = out.get("extracted_by", "")
        return bool(out["acc"]), f"{how}: {out.get('pred')}" if how else str(out.get("pred"))

    return check


def cold(check) -> None:
    """Forget what earlier runs cached (rewardkit's parse caches, math-verify's and sympy's), so
    no scorer is timed on another's warm caches."""
    import sympy.core.cache
    from math_verify import parser

    check(None, "")
    for name in dir(parser):
        fn = getattr(parser, name)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()
    sympy.core.cache.clear_cache()


def run(rows: list[dict], check) -> tuple[list[tuple[bool, str]], float]:
    cold(check)
    t0 = time.perf_counter()
    out = [check(r["response"], r["ground_truth"]) for r in rows]
    return out, time.perf_counter() - t0


#: (data source, dev set): verl 0.9.1 routes each data source to its own reward; rewardkit to its scorer.
VERL_ROUTES = [
    ("openai/gsm8k", "processbench_gsm8k"),
    ("HuggingFaceH4/MATH-500", "qwen25math_math_cot"),
    ("math", "qwen25math_math_cot"),
    ("aime2024", "qwen25math_math_cot"),
    ("aime2024", "processbench_gsm8k"),
    ("numina_olympiads", "qwen25math_math_cot"),
]


def verl_routing(sets: dict[str, list[dict]]) -> None:
    """Per data source: verl's ``default_compute_score`` against rewardkit's routed scorer."""
    try:
        from verl.utils.reward_score import default_compute_score
    except Exception as e:  # noqa: BLE001 - verl is optional here
        print(f"verl routing: skipped ({type(e).__name__}: {e})")
        return
    from rewardkit.plugins import get_registries

    registry = get_registries().scorers
    print(
        f"\n{'data source':24} {'set':20} {'rk scorer':10} {'verl agree':>10} {'rk agree':>8} {'differ':>6}"
    )
    for ds, set_name in VERL_ROUTES:
        rows = sets[set_name]
        name = registry.name_for(ds)
        fn = registry.get(name).fn
        v_ok = r_ok = differ = 0
        for r in rows:
            theirs = default_compute_score(ds, r["response"], r["ground_truth"])
            theirs = theirs["acc"] if isinstance(theirs, dict) else theirs > 0
            ours = bool(fn(r["response"], r["ground_truth"])["acc"])
            v_ok += bool(theirs) == r["label"]
            r_ok += ours == r["label"]
            differ += bool(theirs) != ours
        n = len(rows)
        print(f"{ds:24} {set_name[:20]:20} {name:10} {v_ok / n:10.2%} {r_ok / n:8.2%} {differ:6}")


def executor_ratio(rows: list[dict], workers: int) -> None:
    """The ``math`` scorer through the ``process`` executor (warm workers) against a bare loop.

    Both are warmed on other (synthetic) answers first, so neither scores the dev rows from a warm
    cache; the ratio is the executor's throughput over the one-process loop's.
    """
    from rewardkit import RewardEngine
    from rewardkit.scorers import math_boxed

    warm = [
        {"response": f"so \\boxed{{\\frac{{{i}}}{{7}}}}", "ground_truth": f"{i}/7", "data_source": "math"}
        for i in range(1, 200)
    ]
    batch = [
        {"response": r["response"], "ground_truth": r["ground_truth"], "data_source": "math"} for r in rows
    ]
    math_boxed.clear_caches()
    for w in warm:
        math_boxed.compute_score(w["response"], w["ground_truth"])
    t0 = time.perf_counter()
    loop_acc = [math_boxed.compute_score(b["response"], b["ground_truth"])["acc"] for b in batch]
    loop_s = time.perf_counter() - t0
    with RewardEngine({"executor": "process", "num_workers": workers, "timeout_s": 30}) as engine:
        engine.compute(warm)  # starts the workers and warms them
        t0 = time.perf_counter()
        result = engine.compute(batch)
        pool_s = time.perf_counter() - t0
    same = sum((s == 1.0) == a for s, a in zip(result.scores, loop_acc, strict=True))
    print(
        f"\nprocess executor, {workers} workers, {len(batch)} samples: {len(batch) / pool_s:.1f}/s against "
        f"{len(batch) / loop_s:.1f}/s in a bare loop: {loop_s / pool_s:.2f}x ({same}/{len(batch)} same verdicts)"
    )


def main(argv: list[str] | None = None) -> int:
    """Print the accuracy / speed table and write the disagreements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = os.path.join(tempfile.gettempdir(), "math_disagreements.jsonl")
    ap.add_argument("--out", default=default_out, help="where the disagreements go (JSONL)")
    ap.add_argument("--repeat", type=int, default=2, help="timed passes per scorer (best kept)")
    ap.add_argument("--no-verl-routing", action="store_true", help="skip the per-data-source verl table")
    ap.add_argument("--workers", type=int, default=2, help="process-executor workers (0: skip that part)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N rows of each set")
    args = ap.parse_args(argv)
    if not data_dir().is_dir():
        print(f"no data at {data_dir()} (set REWARDKIT_SHARED_DATA)", file=sys.stderr)
        return 2
    sets = {
        "processbench_gsm8k": load("processbench_gsm8k.jsonl"),
        "qwen25math_math_cot": load("qwen25math_math_cot.jsonl"),
    }
    scorers: dict[str, Callable | None] = {
        "rk-math": rk("math"),
        "rk-math-strict": rk("math", strict_box=True),
        "rk-gsm8k": rk("gsm8k"),
        "mv-plain": mv_plain(),
        "verl-mv": verl_mv(),
    }
    dump = {"rk-math", "rk-gsm8k", "mv-plain"}
    print(f"{'set':22} {'scorer':15} {'agree':>7} {'FN':>4} {'FP':>4} {'samples/s':>10} {'x verl-mv':>9}")
    with open(args.out, "w", encoding="utf-8") as out:
        for set_name, rows in sets.items():
            if args.limit:
                rows = rows[: args.limit]
            active = {
                n: c
                for n, c in scorers.items()
                if c is not None and not (n == "rk-gsm8k" and "gsm8k" not in set_name)
            }
            # An untimed pass first: it gives the verdicts and warms what a long-lived worker keeps
            # warm anyway (imports, the LaTeX parser's tables), for every scorer alike.
            verdicts = {n: run(rows, c)[0] for n, c in active.items()}
            speed = {n: 0.0 for n in active}
            for _ in range(args.repeat):  # timed passes, each with cold result caches; best kept
                for n, c in active.items():
                    speed[n] = max(speed[n], len(rows) / run(rows, c)[1])
            for name in active:
                fn = fp = 0
                for r, (ok, got) in zip(rows, verdicts[name], strict=True):
                    if ok == r["label"]:
                        continue
                    fn += r["label"]
                    fp += not r["label"]
                    if name in dump:
                        rec = {
                            "set": set_name,
                            "id": r["id"],
                            "scorer": name,
                            "label": r["label"],
                            "gold": r["ground_truth"],
                            "got": got[:200],
                            "tail": r["response"][-400:],
                        }
                        out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                agree = 1 - (fn + fp) / len(rows)
                ratio = speed[name] / speed["verl-mv"] if "verl-mv" in speed else float("nan")
                print(f"{set_name:22} {name:15} {agree:7.2%} {fn:4} {fp:4} {speed[name]:10.1f} {ratio:9.2f}")
    print(f"disagreements: {args.out}")
    if not args.no_verl_routing:
        verl_routing(sets)
    if args.workers:
        executor_ratio([r for rows in sets.values() for r in rows], args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
