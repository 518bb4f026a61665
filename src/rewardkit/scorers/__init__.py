"""Built-in scorers, registered as an ordinary plugin.

Scorer modules import their heavy dependencies (math-verify, aiohttp...) inside the functions, so
registering them costs nothing at start-up. See docs/scorers.md for each scorer's options.
"""

from rewardkit.hookspecs import hookimpl

#: data sources each built-in scorer claims (exact names or shell-style patterns).
DATA_SOURCES = {
    "gsm8k": ["openai/gsm8k", "gsm8k"],
    "math": [
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "HuggingFaceH4/MATH-500",
        "math",
        "numina_*",
    ],
    # verl routes aime* to math_dapo: DAPO recipes evaluate on AIME with "Answer:" lines and ±1 rewards.
    "math_dapo": ["math_dapo", "math_dapo_reasoning", "aime*"],
    "code": [
        "code",
        "codecontests",
        "deepmind/code_contests",
        "apps",
        "codeparrot/apps",
        "taco",
        "BAAI/TACO",
        "codeforces",
        "livecodebench*",
        "mbpp",
        "google-research-datasets/mbpp",
    ],
}


@hookimpl
def register_scorers(register):
    """Register the built-in rule-based scorers with the data sources verl users already use.

    ``cheap``: pure regex/arithmetic scorers that cannot hang; not ``math`` (math-verify's sympy can
    run away), ``code`` (runs programs), ``regex_format`` (a configured pattern can backtrack) or
    ``cosine_length`` (it runs a base scorer, which may be ``math`` or ``code``).
    """
    from rewardkit.scorers import code, format, gsm8k, length, math_boxed, math_dapo

    register(gsm8k.compute_score, name="gsm8k", data_sources=DATA_SOURCES["gsm8k"], cheap=True)
    register(math_boxed.compute_score, name="math", data_sources=DATA_SOURCES["math"])
    register(math_dapo.compute_score, name="math_dapo", data_sources=DATA_SOURCES["math_dapo"], cheap=True)
    register(code.compute_score, name="code", data_sources=DATA_SOURCES["code"])
    register(format.think_format, name="think_format", cheap=True)
    register(format.boxed_format, name="boxed_format", cheap=True)
    register(format.regex_format, name="regex_format")
    register(length.cosine_length, name="cosine_length")
