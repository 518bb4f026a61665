"""Call ``rewardkit serve`` the way OpenRLHF's remote reward model client does.

Start the server, then run this script::

    rewardkit serve --default-scorer gsm8k --port 5000 --strip-token '</s>' &
    python examples/openrlhf_remote_rm.py http://127.0.0.1:5000/get_reward

(``--config reward.yaml`` instead serves any rewardkit config; OpenRLHF sends no data source, so
the config needs a ``default_scorer`` or ``custom_reward_function``.)

In OpenRLHF, pass the same URL as ``--remote_rm_url``; the request and response below are the
ones it sends and reads (``query`` = prompt + response, ``prompts``, ``labels`` -> ``rewards``,
``scores``, ``extra_logs``; rewardkit adds per-sample ``status``, ``reasons`` and ``errors``).
"""

import json
import sys
import urllib.request


def get_rewards(
    url: str, queries: list[str], prompts: list[str], labels: list[str], token: str | None = None
):
    """POST one batch to ``/get_reward`` and return the parsed JSON answer."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps({"query": queries, "prompts": prompts, "labels": labels}).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000/get_reward"
    prompt = "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n"
    answer = get_rewards(
        url,
        queries=[prompt + "6 * 7 = 42\n#### 42</s>", prompt + "#### 41</s>"],
        prompts=[prompt, prompt],
        labels=["42", "42"],
    )
    print(json.dumps(answer, indent=2))
