"""A verl ``custom_reward_function`` file that scores every sample through rewardkit.

Point verl at it::

    reward:
      custom_reward_function:
        path: examples/verl_custom_reward.py
        name: compute_score

Samples are routed by ``data_source`` to rewardkit's scorers (``openai/gsm8k`` -> gsm8k,
``lighteval/MATH`` -> math, ...), in a process pool with a per-sample deadline, so a scorer that
hangs or crashes fails that one sample instead of stalling training. The returned dict carries
``status`` / ``reason`` next to ``score``, and verl logs them in ``reward_extra_info``.

``pkg://rewardkit.integrations.verl`` with ``reward_kwargs: {rewardkit_config: FILE}`` does the
same without a file of your own; this file shows how to pin the config in code.
"""

from rewardkit.integrations.verl import compute_score as _rewardkit_score

#: The rewardkit config used for every call (one engine is built per process and reused).
REWARDKIT_CONFIG = {
    "executor": "process",  # isolation + deadlines; "inline" for the fastest in-process scoring
    "timeout_s": 10.0,
    "failure_score": 0.0,  # what verl receives for a failed sample (its status says "failed")
}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's reward-function signature; extra keyword arguments from verl are ignored."""
    return _rewardkit_score(
        data_source, solution_str, ground_truth, extra_info, rewardkit_config=REWARDKIT_CONFIG
    )


if __name__ == "__main__":
    print(compute_score("openai/gsm8k", "6 * 7 = 42\n#### 42", "42"))
    print(compute_score("openai/gsm8k", "I think it is 41. #### 41", "42"))
