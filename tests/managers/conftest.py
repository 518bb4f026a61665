"""Test scorers for the reward managers, in a file (so worker processes load them by path), and a
registry that holds them next to the built-in managers and executors."""

from __future__ import annotations

import textwrap

import pytest

from rewardkit.plugins import Registries, get_registries
from rewardkit.registry import ScorerRegistry
from rewardkit.scoring import ScorerSpec, load_function

SCORERS = textwrap.dedent(
    """
    import os


    def exact(response, ground_truth):
        return float(response == ground_truth)


    def record(response, ground_truth, extra_info):
        with open(extra_info["log"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\\t{response}\\n")
        return float(response == ground_truth)


    def half(response):
        return 0.5


    def has_x(response):
        return 1.0 if "x" in response else 0.0


    def abstain_on_empty(response):
        return None if response == "" else 2.0


    def fail_on_bad(response):
        if "bad" in response:
            raise RuntimeError("bad response")
        return 1.0


    def with_extra(response):
        return {"score": 1.0, "acc": True, "pred": response[:3]}


    def batch_exact(solution_strs, ground_truths, extra_infos):
        log = extra_infos[0].get("log") if extra_infos and extra_infos[0] else None
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{len(solution_strs)}\\n")
        return [float(a == b) for a, b in zip(solution_strs, ground_truths)]


    def batch_wrong_length(solution_strs):
        return [1.0]


    def batch_hang(solution_strs):
        import time

        time.sleep(3600)
    """
)

#: (registered name, function name, batch)
REGISTERED = [
    ("t_exact", "exact", False),
    ("t_record", "record", False),
    ("t_half", "half", False),
    ("t_has_x", "has_x", False),
    ("t_abstain", "abstain_on_empty", False),
    ("t_fail", "fail_on_bad", False),
    ("t_batch", "batch_exact", True),
]


@pytest.fixture(scope="session")
def scorer_file(tmp_path_factory):
    """Path of the module holding the test scorers."""
    path = tmp_path_factory.mktemp("manager_scorers") / "mscorers.py"
    path.write_text(SCORERS, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def registries(scorer_file) -> Registries:
    """The built-in plugins' managers and executors, plus the test scorers registered by name."""
    base = get_registries()
    scorers = ScorerRegistry()
    for entry in base.scorers:
        scorers.add(entry.name, entry.obj, entry.provider, **entry.meta)
    for name, fn_name, batch in REGISTERED:
        fn, ref = load_function(str(scorer_file), fn_name)
        sources = [f"ds_{name}"] if not batch else []
        scorers.add(
            name,
            ScorerSpec(name, fn, ref, tuple(sources), batch, "tests"),
            "tests",
            data_sources=tuple(sources),
            batch=batch,
        )
    return Registries(
        scorers=scorers,
        managers=base.managers,
        backends=base.backends,
        executors=base.executors,
        plugins=base.plugins,
        pm=base.pm,
    )


@pytest.fixture
def engine(registries):
    """``engine(config_dict)``: a RewardEngine over the test registries, closed after the test."""
    from rewardkit.engine import RewardEngine

    made = []

    def make(cfg: dict) -> RewardEngine:
        cfg = {"executor": "inline", **cfg}
        e = RewardEngine(cfg, registries=registries)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture
def crf(scorer_file):
    """``crf(name)``: a custom_reward_function config section for one of the test scorers."""

    def make(name: str, **reward_kwargs) -> dict:
        return {"path": str(scorer_file), "name": name, "reward_kwargs": reward_kwargs}

    return make
