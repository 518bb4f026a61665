"""Build examples/gsm8k_rollouts.jsonl: synthetic "rollouts" from the GSM8K test split.

The responses are GSM8K's own reference solutions, rewritten the way policy models answer (final
answer after ``####``, in ``\\boxed{}``, as "The answer is N.", with no marker at all), with a
fifth of them given a wrong final answer and a few left empty, so the demo shows every path of the
gsm8k scorer. Deterministic: ``python examples/make_gsm8k_rollouts.py [N]``.
GSM8K is MIT-licensed; see examples/LICENSE-gsm8k.txt.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def make(n: int = 200, seed: int = 0) -> list[dict]:
    """The first ``n`` test problems as rollout records."""
    rng = random.Random(seed)
    records = []
    with open(SOURCE, encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(n), f, strict=False)]
    for i, row in enumerate(rows):
        reasoning, answer = row["answer"].rsplit("####", 1)
        answer = answer.strip().replace(",", "")
        reasoning = re.sub(r"<<[^>]*>>", "", reasoning).strip()
        roll = rng.random()
        final = answer
        if roll < 0.2:
            final = str(int(float(answer)) + rng.choice([-2, -1, 1, 10]))
        style = rng.choice(["hash", "hash", "boxed", "sentence", "bare"])
        if style == "hash":
            response = f"{reasoning}\n#### {final}"
        elif style == "boxed":
            response = f"{reasoning}\nSo the final answer is $\\boxed{{{final}}}$."
        elif style == "sentence":
            response = f"{reasoning}\nThe answer is {final}."
        else:
            response = f"{reasoning} That gives {final}."
        if rng.random() < 0.02:
            response = ""
        records.append(
            {
                "uid": f"gsm8k-test-{i}",
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": row["question"]}],
                "response": response,
                "ground_truth": answer,
                "extra_info": {"split": "test", "index": i, "style": style, "wrong_answer": final != answer},
            }
        )
    return records


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    out = HERE / "gsm8k_rollouts.jsonl"
    with open(out, "w", encoding="utf-8") as f:
        for rec in make(n):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {n} records to {out}")
