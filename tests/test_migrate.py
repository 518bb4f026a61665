"""Migration of verl's legacy flat reward config, and load_config's messages for malformed configs."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

import rewardkit
from rewardkit.config import RewardConfig, load_config
from rewardkit.errors import ConfigError
from rewardkit.migrate import LegacyConfigWarning, Migration, is_legacy, migrate_file, migrate_legacy

LEGACY = Path(__file__).parent / "data" / "legacy"


def _at(cfg: dict, dotted: str):
    node = cfg["reward"]
    for part in dotted.split("."):
        node = node[part]
    return node


def _migrate(config, **kw) -> tuple[dict, list[str], list[str]]:
    """Migrate, returning (config, messages, the LegacyConfigWarning texts actually issued)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg, messages = migrate_legacy(config, **kw)
    issued = [str(w.message) for w in caught if issubclass(w.category, LegacyConfigWarning)]
    return cfg, messages, issued


# -- one legacy key at a time ----------------------------------------------------------------------

SINGLE_KEYS = [
    ({"reward_model": {"num_workers": 4}}, "reward_model.num_workers", "num_workers", 4),
    (
        {"reward_model": {"reward_manager": "dapo"}},
        "reward_model.reward_manager",
        "reward_manager.name",
        "dapo",
    ),
    (
        {"reward_model": {"reward_loop_source": "register"}},
        "reward_model.reward_loop_source",
        "reward_manager.source",
        "register",
    ),
    ({"reward_model": {"enable": True}}, "reward_model.enable", "reward_model.enable", True),
    (
        {"reward_model": {"enable_resource_pool": True}},
        "reward_model.enable_resource_pool",
        "reward_model.enable_resource_pool",
        True,
    ),
    (
        {"reward_model": {"n_gpus_per_node": 4}},
        "reward_model.n_gpus_per_node",
        "reward_model.n_gpus_per_node",
        4,
    ),
    ({"reward_model": {"nnodes": 2}}, "reward_model.nnodes", "reward_model.nnodes", 2),
    (
        {"reward_model": {"model": {"path": "/m/rm"}}},
        "reward_model.model.path",
        "reward_model.model_path",
        "/m/rm",
    ),
    (
        {"reward_model": {"model": {"fsdp_config": {"param_offload": True}}}},
        "reward_model.model.fsdp_config.param_offload",
        "reward_model.offload",
        True,
    ),
    (
        {"reward_model": {"reward_kwargs": {"max_resp_len": 512, "overlong_buffer_cfg": {"enable": False}}}},
        "reward_model.reward_kwargs",
        "reward_manager.kwargs",
        {"max_resp_len": 512, "overlong_buffer_cfg": {"enable": False}},
    ),
    (
        {"reward_model": {"overlong_buffer": {"enable": False, "len": 64}}},
        "reward_model.overlong_buffer",
        "reward_manager.kwargs.overlong_buffer_cfg",
        {"enable": False, "len": 64},
    ),
    (
        {"custom_reward_function": {"path": "r.py"}},
        "custom_reward_function.path",
        "custom_reward_function.path",
        "r.py",
    ),
    (
        {"custom_reward_function": {"name": "score"}},
        "custom_reward_function.name",
        "custom_reward_function.name",
        "score",
    ),
    (
        {"custom_reward_function": {"reward_kwargs": {"alpha": 0.5}}},
        "custom_reward_function.reward_kwargs",
        "custom_reward_function.reward_kwargs",
        {"alpha": 0.5},
    ),
    (
        {"sandbox_fusion": {"url": "http://127.0.0.1:1/run"}},
        "sandbox_fusion.url",
        "sandbox_fusion.url",
        "http://127.0.0.1:1/run",
    ),
    (
        {"sandbox_fusion": {"max_concurrent": 8}},
        "sandbox_fusion.max_concurrent",
        "sandbox_fusion.max_concurrency",
        8,
    ),
    (
        {"sandbox_fusion": {"memory_limit_mb": 512}},
        "sandbox_fusion.memory_limit_mb",
        "sandbox_fusion.memory_limit_mb",
        512,
    ),
    (
        {"reward_model": {"sandbox_fusion": {"url": "http://127.0.0.1:2/run"}}},
        "reward_model.sandbox_fusion.url",
        "sandbox_fusion.url",
        "http://127.0.0.1:2/run",
    ),
    (
        {"reward_model": {"sandbox_fusion": {"max_concurrent": 3}}},
        "reward_model.sandbox_fusion.max_concurrent",
        "sandbox_fusion.max_concurrency",
        3,
    ),
]


@pytest.mark.parametrize(("legacy", "old", "new", "value"), SINGLE_KEYS, ids=[c[1] for c in SINGLE_KEYS])
def test_each_legacy_key_moves(legacy, old, new, value):
    # A trainer section next to it is ignored, as in a whole verl config.
    cfg, messages, issued = _migrate({**legacy, "trainer": {"total_epochs": 1}})
    assert _at(cfg, new) == value
    expected = f"moved {old} → reward.{new}"
    assert expected in messages
    assert expected in issued  # one LegacyConfigWarning per moved key, same text
    assert "trainer" not in cfg and list(cfg) == ["reward"]
    load_config(cfg)  # what migrate_legacy returns is a valid rewardkit config


def test_result_is_a_named_tuple_and_public():
    result = rewardkit.migrate_legacy({"reward_model": {"num_workers": 2}}, warn=False)
    assert isinstance(result, Migration) and isinstance(result, tuple)
    assert result.config == {"reward": {"num_workers": 2}}
    assert result.messages == ["moved reward_model.num_workers → reward.num_workers"]


def test_warn_false_issues_no_warning_but_returns_messages():
    cfg, messages, issued = _migrate({"reward_model": {"num_workers": 2}}, warn=False)
    assert messages and not issued


def test_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        migrate_legacy({"reward_model": {"num_workers": 2}})
    assert caught and all(Path(w.filename).resolve() == Path(__file__).resolve() for w in caught)


def test_null_legacy_keys_are_unset_and_move_nothing():
    # verl's legacy_reward_impl.yaml: every key null.
    cfg, messages, _ = _migrate(
        {
            "custom_reward_function": {"path": None, "name": None},
            "reward_model": {
                "num_workers": None,
                "reward_manager": None,
                "model": {"path": None},
                "rollout": {"name": None},
            },
            "sandbox_fusion": {"url": None, "max_concurrent": None, "memory_limit_mb": None},
        }
    )
    assert cfg == {"reward": {}}
    assert messages == []


def test_dapo_max_resp_len_comes_from_data_when_missing():
    cfg, messages, _ = _migrate(LEGACY / "dapo_recipe_old.yaml")
    kwargs = _at(cfg, "reward_manager.kwargs")
    assert kwargs["overlong_buffer_cfg"] == {"enable": True, "len": 1024, "penalty_factor": 1.0, "log": False}
    assert kwargs["max_resp_len"] == 8192
    assert "moved data.max_response_length → reward.reward_manager.kwargs.max_resp_len" in messages


def test_dapo_reward_kwargs_keep_their_own_max_resp_len():
    cfg, messages, _ = _migrate(LEGACY / "dapo_reward_kwargs.yaml")
    assert _at(cfg, "reward_manager.kwargs.max_resp_len") == 20480
    assert _at(cfg, "reward_manager.name") == "dapo"
    assert _at(cfg, "num_workers") == 16
    assert not any("data.max_response_length" in m for m in messages)


def test_prime_manager_becomes_naive_in_a_process_pool():
    cfg, messages, _ = _migrate({"reward_model": {"reward_manager": "prime"}})
    assert _at(cfg, "reward_manager.name") == "naive"
    assert _at(cfg, "executor") == "process"
    assert any("'prime'" in m and "process pool" in m for m in messages)


def test_enabled_legacy_rm_is_discriminative():
    cfg, messages, _ = _migrate(LEGACY / "gsm8k_fsdp_rm.yaml")
    rm = load_config(cfg).reward_model
    assert (rm.enable, rm.backend, rm.model_path, rm.offload) == (
        True,
        "discriminative",
        "~/models/FsfairX-LLaMA3-RM-v0.1",
        True,
    )
    assert any("backend='discriminative'" in m for m in messages)


def test_served_rm_with_custom_function_is_generative():
    cfg, messages, _ = _migrate(LEGACY / "reward_loop_genrm.yaml")
    config = load_config(cfg)
    assert config.reward_model.backend == "generative"
    assert config.reward_model.rollout == {}  # verl's server-launch settings went to reward_model.server
    assert config.custom_reward_function.reward_kwargs == {"correct_reward": 1.0, "incorrect_reward": -1.0}
    assert any("backend='generative'" in m and "reward_router_address" in m for m in messages)
    assert not any(m.startswith("not carried: reward_model.rollout.name") for m in messages)
    assert any(
        m.startswith("not carried: reward_model.rollout.prompt_length=4096: a generation setting")
        for m in messages
    )


def test_verl_rollout_and_resource_pool_keys_become_the_server_section():
    """Issue 16: verl's reward-model rollout launched servers; rewardkit now launches them too."""
    from rewardkit.serving import make_launcher

    cfg, messages, _ = _migrate(LEGACY / "reward_loop_genrm.yaml")
    rm = load_config(cfg).reward_model
    s = rm.server
    assert (s.engine, s.gpus_per_replica, s.replicas, s.placement) == (
        "vllm",
        2.0,
        2,
        "standalone",
    )  # 4 GPUs / tp 2
    assert s.engine_args == {"dtype": "bfloat16", "gpu_memory_utilization": 0.8, "enable_sleep_mode": True}
    assert (
        "moved reward_model.rollout.gpu_memory_utilization → reward.reward_model.server.engine_args.gpu_memory_utilization"
        in messages
    )
    argv = make_launcher(rm).command("127.0.0.1", 8000, rm.model_path)
    assert argv[:3] == ["vllm", "serve", "dyyyyyyyy/FAPO-GenRM-4B"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"


def test_a_served_classifier_in_verls_new_layout_is_colocated_sglang():
    cfg, messages, _ = _migrate(
        {
            "reward": {
                "reward_model": {
                    "enable": True,
                    "model_path": "Skywork/RM",
                    "n_gpus_per_node": 8,
                    "rollout": {
                        "name": "sglang",
                        "gpu_memory_utilization": 0.4,
                        "tensor_model_parallel_size": 1,
                        "max_model_len": 8192,
                        "enable_prefix_caching": False,
                        "temperature": 0.7,
                    },
                }
            }
        }
    )
    rm = load_config(cfg).reward_model
    assert rm.server.engine == "sglang" and rm.server.placement == "colocated" and rm.server.replicas == 1
    assert rm.server.gpus_per_replica == 1.0
    assert rm.server.engine_args == {"mem_fraction_static": 0.4, "context_length": 8192}
    assert any("enable_prefix_caching=False: sglang has no such flag" in m for m in messages)
    assert any("server.replicas is 1" in m for m in messages)


def test_a_legacy_served_classifier_gets_the_served_backend():
    cfg, messages, _ = _migrate(
        {
            "reward_model": {
                "enable": True,
                "model": {"path": "RM"},
                "rollout": {"name": "vllm", "tensor_model_parallel_size": 1},
            }
        }
    )
    rm = load_config(cfg).reward_model
    assert (
        rm.backend == "served-classifier" and rm.server.engine == "vllm" and rm.server.gpus_per_replica == 1.0
    )
    assert any("backend='served-classifier'" in m for m in messages)


def test_an_engine_without_a_preset_is_not_carried():
    cfg, messages, _ = _migrate(
        {"reward_model": {"enable": True, "model": {"path": "RM"}, "rollout": {"name": "trtllm"}}}
    )
    assert "server" not in cfg["reward"]["reward_model"]
    assert any("'trtllm': rewardkit has no launcher preset" in m for m in messages)


def test_generative_rollout_keys_map_to_the_judge_settings():
    from rewardkit.backends.generative import GenerativeSettings
    from rewardkit.backends.http import parse_settings

    cfg, messages, _ = _migrate(
        {
            "custom_reward_function": {"path": "judge_fn.py"},
            "reward_model": {
                "enable": True,
                "model": {"path": "Qwen/Judge"},
                "rollout": {
                    "name": "vllm",
                    "temperature": 0.0,
                    "top_p": 0.9,
                    "seed": 7,
                    "base_url": "http://127.0.0.1:9",
                },
                "inference": {"max_model_len": 8192},
            },
        }
    )
    rollout = _at(cfg, "reward_model.rollout")
    assert rollout == {
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 7,
        "base_url": "http://127.0.0.1:9",
        "context_length": 8192,
    }
    assert (
        "moved reward_model.inference.max_model_len → reward.reward_model.rollout.context_length" in messages
    )
    # The real backend accepts what the migration wrote.
    settings = parse_settings(GenerativeSettings, rollout, "generative")
    assert (settings.context_length, settings.temperature, settings.seed) == (8192, 0.0, 7)


def test_discriminative_keys_map_to_the_backend_settings():
    from rewardkit.backends.discriminative import parse_settings

    cfg, messages, _ = _migrate(
        {
            "reward_model": {
                "enable": True,
                "model": {"path": "/m/rm", "trust_remote_code": True},
                "max_length": 4096,
                "micro_batch_size_per_gpu": 8,
                "rollout": {"temperature": 0.3},
            }
        }
    )
    kwargs = _at(cfg, "reward_model.kwargs")
    assert kwargs == {"trust_remote_code": True, "max_length": 4096, "max_batch_size": 8}
    assert (
        "moved reward_model.micro_batch_size_per_gpu → reward.reward_model.kwargs.max_batch_size" in messages
    )
    settings = parse_settings(kwargs)
    assert (settings.trust_remote_code, settings.max_length, settings.max_batch_size) == (True, 4096, 8)
    assert "rollout" not in cfg["reward"]["reward_model"]
    assert any(m.startswith("not carried: reward_model.rollout.temperature=0.3") for m in messages)


def test_backend_set_in_new_layout_is_kept():
    cfg, _, _ = _migrate(
        {"reward": {"reward_model": {"backend": "remote"}}, "reward_model": {"enable": True}}
    )
    assert _at(cfg, "reward_model.backend") == "remote"


# -- verl's three migration bugs, avoided ----------------------------------------------------------


REWARD_FN = (
    "def compute_score(solution_str, ground_truth):\n    return float(solution_str.strip() == ground_truth)\n"
)


@pytest.mark.parametrize("legacy_name", ["absent", None])
def test_bug1_path_only_custom_function_keeps_compute_score(write_module, legacy_name):
    path = write_module("my_reward.py", REWARD_FN)
    crf = {"path": str(path)} if legacy_name == "absent" else {"path": str(path), "name": legacy_name}
    cfg, _, _ = _migrate({"custom_reward_function": crf})
    # verl assigned the whole legacy section, so name became null; here it keeps its default.
    assert "name" not in cfg["reward"]["custom_reward_function"]
    assert load_config(cfg).custom_reward_function.name == "compute_score"
    cfg["reward"]["executor"] = "inline"
    result = rewardkit.compute(
        [{"response": "42", "ground_truth": "42"}, {"response": "7", "ground_truth": "42"}], cfg
    )
    assert result.scores == [1.0, 0.0]


@pytest.mark.parametrize(
    "legacy",
    [
        {"sandbox_fusion": {"url": "http://127.0.0.1:8080/run_code"}},
        {
            "sandbox_fusion": {
                "url": "http://127.0.0.1:8080/run_code",
                "max_concurrent": None,
                "memory_limit_mb": None,
            }
        },
        {
            "reward_model": {
                "sandbox_fusion": {"url": "http://127.0.0.1:8080/run_code", "max_concurrent": None}
            }
        },
    ],
    ids=["url-only", "explicit-nulls", "nested-under-reward_model"],
)
def test_bug2_url_only_sandbox_keeps_default_limits(legacy):
    cfg, _, _ = _migrate(legacy)
    sandbox = load_config(cfg).sandbox_fusion
    assert (sandbox.url, sandbox.max_concurrency, sandbox.memory_limit_mb) == (
        "http://127.0.0.1:8080/run_code",
        64,
        1024,
    )


MANAGER = """
from rewardkit.managers.base import RewardManager
from rewardkit.result import SampleResult


class ShiftedManager(RewardManager):
    def __init__(self, context, shift=0.0):
        super().__init__(context)
        self.shift = shift

    async def score_rules(self, samples):
        return [SampleResult.ok(len(s.response) + self.shift) for s in samples]
"""


def _custom_manager_config(tmp_path: Path, write_module) -> Path:
    manager = write_module("shifted_manager.py", MANAGER)
    reward = write_module("my_reward.py", REWARD_FN)
    text = (LEGACY / "custom_manager.yaml").read_text(encoding="utf-8")
    text = text.replace("MANAGER_PATH", str(manager)).replace("REWARD_PATH", str(reward))
    path = tmp_path / "custom_manager.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_bug3_custom_manager_class_lands_where_the_loader_reads_it(tmp_path, write_module):
    cfg, messages, _ = _migrate(_custom_manager_config(tmp_path, write_module))
    manager = _at(cfg, "reward_manager")
    assert manager["source"] == "importlib"
    assert manager["module"] == {"path": str(tmp_path / "shifted_manager.py"), "name": "ShiftedManager"}
    assert manager["name"] == "ShiftedManager"  # where verl's new loader reads the class
    cfg["reward"]["executor"] = "inline"
    cfg["reward"]["reward_manager"]["kwargs"] = {"shift": 0.5}
    with rewardkit.RewardEngine(cfg) as engine:
        assert type(engine.manager).__name__ == "ShiftedManager"
        result = engine.compute(
            [{"response": "abc", "ground_truth": "x"}, {"response": "", "ground_truth": "x"}]
        )
    assert result.scores == [3.5, 0.5]
    # The same file also carried bugs 1 and 2.
    config = load_config(cfg)
    assert config.custom_reward_function.name == "compute_score"
    assert (config.sandbox_fusion.max_concurrency, config.sandbox_fusion.memory_limit_mb) == (64, 1024)


def test_bug3_class_named_by_reward_manager_alone():
    # Users often set reward_manager=<Class> and no reward_loop_class_name.
    cfg, messages, _ = _migrate(
        {
            "reward_model": {
                "reward_manager": "GsiBatchRewardManager",
                "reward_loop_source": "importlib",
                "reward_loop_module_path": "/x/mgr.py",
            }
        }
    )
    assert _at(cfg, "reward_manager.module.name") == "GsiBatchRewardManager"
    assert _at(cfg, "reward_manager.name") == "GsiBatchRewardManager"


def test_importlib_with_a_stale_manager_name_says_which_one_wins():
    cfg, messages, _ = _migrate(
        {
            "reward_model": {
                "reward_manager": "dapo",
                "reward_loop_source": "importlib",
                "reward_loop_module_path": "/x/mgr.py",
                "reward_loop_class_name": "Mine",
            }
        }
    )
    assert _at(cfg, "reward_manager.name") == "Mine"
    assert any(
        m.startswith("not carried: reward_model.reward_manager='dapo'") and "'Mine'" in m for m in messages
    )


@pytest.mark.parametrize(
    ("legacy", "needle"),
    [
        (
            {"reward_loop_source": "importlib", "reward_loop_class_name": "C"},
            "reward_model.reward_loop_module_path",
        ),
        (
            {"reward_loop_source": "importlib", "reward_loop_module_path": "/m.py"},
            "reward_model.reward_loop_class_name",
        ),
        ({"reward_loop_source": "pip"}, "reward_model.reward_loop_source"),
        ({"reward_manager": ["naive"]}, "reward_model.reward_manager"),
    ],
    ids=["no-module-path", "no-class", "bad-source", "manager-not-a-string"],
)
def test_broken_manager_keys_raise_naming_the_key(legacy, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        migrate_legacy({"reward_model": legacy}, warn=False)


def test_loop_keys_without_importlib_are_reported():
    _, messages, _ = _migrate(
        {
            "reward_model": {
                "reward_loop_source": "register",
                "reward_loop_class_name": "Unused",
                "reward_manager": "naive",
            }
        }
    )
    assert any(m.startswith("not carried: reward_model.reward_loop_class_name='Unused'") for m in messages)


# -- keys that cannot be carried --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("legacy", "needle", "why"),
    [
        ({"reward_model": {"max_concurrent": 4096}}, "reward_model.max_concurrent=4096", "not a key"),
        (
            {"custom_reward_function": {"path": "r.py", "module": "x"}},
            "custom_reward_function.module='x'",
            "not a key",
        ),
        ({"sandbox_fusion": {"timeout": 5}}, "sandbox_fusion.timeout=5", "not a key"),
        ({"reward_model": {"micro_batch_size": 16}}, "reward_model.micro_batch_size=16", "FSDP"),
        (
            {"reward_model": {"micro_batch_size_per_gpu": 16}},
            "reward_model.micro_batch_size_per_gpu=16",
            "reward model is off",
        ),
        ({"reward_model": {"max_length": 4096}}, "reward_model.max_length=4096", "discriminative backend"),
        (
            {"reward_model": {"model": {"external_lib": "my_models"}}},
            "reward_model.model.external_lib='my_models'",
            "transformers",
        ),
        (
            {"reward_model": {"rollout": {"gpu_memory_utilization": 0.9}}},
            "reward_model.rollout.gpu_memory_utilization=0.9",
            "vllm serve",
        ),
        (
            {"reward_model": {"launch_reward_fn_async": True}},
            "reward_model.launch_reward_fn_async=True",
            "asynchronous",
        ),
        (
            {"reward_model": {"model": {"input_tokenizer": "Qwen/Q"}}},
            "reward_model.model.input_tokenizer='Qwen/Q'",
            "decoded text",
        ),
        ({"reward_model": {"profiler": {"enable": True}}}, "reward_model.profiler=", "profiler"),
        (
            {"reward_model": {"model": {"path": "${oc.env:RM_PATH}"}}},
            "reward_model.model.path='${oc.env:RM_PATH}'",
            "interpolation",
        ),
        (
            {"reward_model": {"num_workers": "${nowhere.to_be.found}"}},
            "reward_model.num_workers=",
            "interpolation",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) and "=" not in x else None,
)
def test_uncarriable_keys_are_warned_with_the_reason(legacy, needle, why):
    cfg, messages, issued = _migrate(legacy)
    hits = [m for m in messages if m.startswith(f"not carried: {needle}")]
    assert len(hits) == 1 and why in hits[0]
    assert hits[0] in issued
    load_config(cfg)


def test_keys_at_inert_values_are_summed_up_in_one_message():
    _, messages, _ = _migrate(LEGACY / "gsm8k_fsdp_rm.yaml")
    summary = [m for m in messages if m.startswith("ignored legacy keys")]
    assert len(summary) == 1
    for key in ("reward_model.strategy", "reward_model.profiler", "reward_model.launch_reward_fn_async"):
        assert key in summary[0]
    # A non-default setting gets its own line, not the summary.
    assert any(m.startswith("not carried: reward_model.forward_max_token_len_per_gpu=") for m in messages)
    assert "reward_model.forward_max_token_len_per_gpu" not in summary[0]


def test_interpolations_resolve_against_the_whole_config():
    cfg, _, _ = _migrate(
        {
            "paths": {"models": "/data/models"},
            "trainer": {"n_gpus_per_node": 4},
            "reward_model": {
                "model": {"path": "${paths.models}/rm"},
                "n_gpus_per_node": "${trainer.n_gpus_per_node}",
            },
        }
    )
    assert _at(cfg, "reward_model.model_path") == "/data/models/rm"
    assert _at(cfg, "reward_model.n_gpus_per_node") == 4  # a whole-value reference keeps its type


def test_without_omegaconf_interpolations_are_not_carried_and_say_why(monkeypatch):
    import rewardkit.migrate as migrate

    monkeypatch.setattr(migrate, "_omegaconf", lambda: None)  # omegaconf is an optional dependency
    cfg, messages, _ = _migrate(
        {"paths": {"m": "/m"}, "reward_model": {"model": {"path": "${paths.m}/rm"}, "nnodes": 2}}
    )
    assert "model_path" not in cfg["reward"]["reward_model"] and _at(cfg, "reward_model.nnodes") == 2
    hits = [m for m in messages if m.startswith("not carried: reward_model.model.path=")]
    assert len(hits) == 1 and "install omegaconf" in hits[0]


def test_self_referencing_interpolation_does_not_loop():
    cfg, messages, _ = _migrate({"a": "${a}", "reward_model": {"model": {"path": "${a}"}}})
    assert "model_path" not in cfg["reward"].get("reward_model", {})
    assert any("interpolation" in m for m in messages)


# -- new layout beside legacy keys ------------------------------------------------------------------


def test_new_layout_wins_over_a_conflicting_legacy_key():
    cfg, messages, issued = _migrate({"reward": {"num_workers": 4}, "reward_model": {"num_workers": 16}})
    assert _at(cfg, "num_workers") == 4
    conflict = [m for m in messages if m.startswith("conflict:")]
    assert (
        len(conflict) == 1
        and "reward_model.num_workers=16" in conflict[0]
        and "reward.num_workers=4" in conflict[0]
    )
    assert conflict[0] in issued


def test_legacy_key_wins_over_a_new_value_that_is_only_verls_default():
    # A full verl dump has reward.num_workers: 8 (default) and the user's override in reward_model.
    cfg, messages, _ = _migrate({"reward": {"num_workers": 8}, "reward_model": {"num_workers": 16}})
    assert _at(cfg, "num_workers") == 16
    assert any(
        m.startswith("conflict: reward_model.num_workers=16 replaces reward.num_workers=8") for m in messages
    )


def test_null_in_the_new_layout_is_unset():
    cfg, messages, _ = _migrate(
        {
            "reward": {"custom_reward_function": {"path": None, "name": "compute_score"}},
            "custom_reward_function": {"path": "r.py"},
        }
    )
    assert _at(cfg, "custom_reward_function") == {"path": "r.py", "name": "compute_score"}
    assert not any(m.startswith("conflict") for m in messages)


def test_same_value_in_both_layouts_is_dropped_quietly_but_reported():
    cfg, messages, _ = _migrate({"reward": {"num_workers": 4}, "reward_model": {"num_workers": 4}})
    assert _at(cfg, "num_workers") == 4
    assert messages == ["dropped reward_model.num_workers: same value as reward.num_workers"]


def test_kwargs_merge_key_by_key():
    cfg, messages, _ = _migrate(
        {
            "reward": {"reward_manager": {"name": "dapo", "kwargs": {"max_resp_len": 100}}},
            "reward_model": {
                "reward_kwargs": {"max_resp_len": 200, "overlong_buffer_cfg": {"enable": False}}
            },
        }
    )
    assert _at(cfg, "reward_manager.kwargs") == {
        "max_resp_len": 100,
        "overlong_buffer_cfg": {"enable": False},
    }
    assert any(m.startswith("conflict: reward_model.reward_kwargs.max_resp_len=200") for m in messages)
    assert (
        "moved reward_model.reward_kwargs.overlong_buffer_cfg → reward.reward_manager.kwargs.overlong_buffer_cfg"
        in messages
    )


def test_two_legacy_spellings_first_one_wins():
    cfg, messages, _ = _migrate(
        {
            "sandbox_fusion": {"url": "http://127.0.0.1:1/a"},
            "reward_model": {"sandbox_fusion": {"url": "http://127.0.0.1:2/b"}},
        }
    )
    assert _at(cfg, "sandbox_fusion.url") == "http://127.0.0.1:1/a"
    assert any(
        m.startswith("conflict: reward_model.sandbox_fusion.url='http://127.0.0.1:2/b'")
        and "sandbox_fusion.url=" in m
        for m in messages
    )


def test_verl_new_layout_dump_is_adapted():
    cfg, messages, _ = _migrate(LEGACY / "verl_new_layout.yaml")
    config = load_config(cfg)
    assert config.reward_manager.module.name == "MyManager"  # verl's 'custom_reward_manager' alias replaced
    assert config.reward_manager.kwargs == {"max_resp_len": 4096}  # verl's reward.reward_kwargs
    assert config.num_workers == 4 and config.reward_model.rollout == {}
    assert any(m.startswith("not carried: reward.reward_model.rollout.name='vllm'") for m in messages)
    assert any(
        m.startswith("dropped Hydra class pointers") and "reward.reward_model.rollout._target_" in m
        for m in messages
    )
    assert "_target_" not in yaml.safe_dump(cfg)


def test_verl_compute_score_kwargs_are_reported():
    cfg, messages, _ = _migrate({"reward": {"compute_score_kwargs": {"method": "flexible"}}})
    assert cfg == {"reward": {}}
    assert any(m.startswith("not carried: reward.compute_score_kwargs") for m in messages)


# -- already-new configs ----------------------------------------------------------------------------


def test_rewardkit_config_is_untouched_and_silent():
    data = yaml.safe_load((LEGACY / "rewardkit_new.yaml").read_text(encoding="utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyConfigWarning)
        cfg, messages = migrate_legacy(LEGACY / "rewardkit_new.yaml")
    assert messages == [] and cfg == data


@pytest.mark.parametrize(
    "section",
    [
        {},
        {"custom_reward_function": {"path": "r.py"}},
        {"num_workers": 3, "reward_model": {"enable": True, "backend": "remote"}},
    ],
)
def test_unwrapped_new_section_is_wrapped_silently(section):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyConfigWarning)
        cfg, messages = migrate_legacy(section)
    assert cfg == {"reward": section} and messages == []
    assert not is_legacy(section)


@pytest.mark.parametrize(
    ("config", "legacy"),
    [
        ({"reward_model": {"reward_manager": "dapo"}}, True),
        ({"reward_model": {"num_workers": 4}}, True),
        ({"reward_model": {"model": {"path": "/m"}}}, True),
        ({"reward_model": {"rollout": {"gpu_memory_utilization": 0.5}}}, True),
        ({"custom_reward_function": {"path": "r.py"}, "trainer": {"nnodes": 1}}, True),
        ({"reward": {"num_workers": 2}, "reward_model": {"num_workers": 4}}, True),
        (
            {"reward": {"num_workers": 2}, "reward_model": {"num_workers": None, "model": {"path": None}}},
            False,
        ),
        ({"reward": {"num_workers": 2}}, False),
        ({"custom_reward_function": {"path": "r.py"}}, False),
        ({"reward_model": {"modle_path": "x"}}, False),  # a misspelt new key: load_config says "did you mean"
        ({"reward_model": {"rollout": {"base_url": "http://127.0.0.1:1", "temperature": 0.0}}}, False),
        ({"trainer": {}}, False),
        ([1, 2], False),
    ],
)
def test_is_legacy(config, legacy):
    assert is_legacy(config) is legacy


def test_is_legacy_on_fixtures():
    for name in (
        "gsm8k_fsdp_rm.yaml",
        "dapo_reward_kwargs.yaml",
        "custom_manager.yaml",
        "reward_loop_genrm.yaml",
    ):
        assert is_legacy(yaml.safe_load((LEGACY / name).read_text(encoding="utf-8"))), name
    # verl's all-null legacy groups next to a reward: section move nothing.
    for name in ("rewardkit_new.yaml", "verl_new_layout.yaml"):
        assert not is_legacy(yaml.safe_load((LEGACY / name).read_text(encoding="utf-8"))), name


class _FrozenMapping(Mapping):
    """A read-only mapping that is not a dict, like OmegaConf's DictConfig."""

    def __init__(self, data):
        self._data = {k: _FrozenMapping(v) if isinstance(v, dict) else v for k, v in data.items()}

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_any_mapping_is_accepted_and_not_modified():
    source = _FrozenMapping({"reward_model": {"reward_manager": "batch", "model": {"path": "/m"}}})
    cfg, _, _ = _migrate(source)
    assert cfg == {"reward": {"reward_manager": {"name": "batch"}, "reward_model": {"model_path": "/m"}}}
    assert isinstance(cfg["reward"]["reward_manager"], dict)
    assert source["reward_model"]["reward_manager"] == "batch"


def test_input_dict_is_not_modified():
    source = {"reward": {"num_workers": 8}, "reward_model": {"num_workers": 2, "reward_kwargs": {"a": 1}}}
    snapshot = yaml.safe_dump(source)
    cfg, _, _ = _migrate(source)
    cfg["reward"]["reward_manager"]["kwargs"]["a"] = 2
    assert yaml.safe_dump(source) == snapshot


# -- malformed input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ([1, 2], "must be a mapping, got list"),
        (42, "must be a mapping, got int"),
        ({"reward_model": "dapo"}, "'reward_model' must be a mapping, got str"),
        ({"custom_reward_function": ["r.py"]}, "'custom_reward_function' must be a mapping, got list"),
        ({"sandbox_fusion": "http://x"}, "'sandbox_fusion' must be a mapping, got str"),
        ({"reward_model": {"rollout": [1, 2]}}, "'reward_model.rollout' must be a mapping, got list"),
        ({"reward_model": {"model": "path/to/rm"}}, "'reward_model.model' must be a mapping, got str"),
        ({"reward_model": {"reward_kwargs": 3}}, "'reward_model.reward_kwargs' must be a mapping, got int"),
        ({"reward_model": {"model": {"path": {"a": 1}}}}, "'reward_model.model.path' must be a single value"),
        (
            {"custom_reward_function": {"reward_kwargs": "a=1"}},
            "'custom_reward_function.reward_kwargs' must be a mapping",
        ),
        ({"reward": 5}, "'reward' section must be a mapping, got int"),
        ({1: "x"}, "keys must be strings"),
    ],
)
def test_malformed_input_names_the_key(config, needle):
    with pytest.raises(ConfigError) as info:
        migrate_legacy(config, warn=False)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("legacy", "field", "legacy_key"),
    [
        ({"reward_model": {"num_workers": "eight"}}, "reward.num_workers", "reward_model.num_workers"),
        ({"reward_model": {"num_workers": 0}}, "reward.num_workers", "reward_model.num_workers"),
        (
            {"reward_model": {"n_gpus_per_node": "four"}},
            "reward.reward_model.n_gpus_per_node",
            "reward_model.n_gpus_per_node",
        ),
        (
            {"sandbox_fusion": {"max_concurrent": -1}},
            "reward.sandbox_fusion.max_concurrency",
            "sandbox_fusion.max_concurrent",
        ),
        (
            {"custom_reward_function": {"name": 3}},
            "reward.custom_reward_function.name",
            "custom_reward_function.name",
        ),
    ],
)
def test_wrong_types_name_the_new_field_and_the_legacy_key(legacy, field, legacy_key):
    with pytest.raises(ConfigError) as info:
        migrate_legacy(legacy, warn=False)
    line = next(line for line in str(info.value).splitlines() if field + ":" in line)
    assert f"[from legacy key {legacy_key}]" in line


def test_validate_false_returns_the_unchecked_config():
    cfg, _ = migrate_legacy({"reward_model": {"num_workers": "eight"}}, warn=False, validate=False)
    assert cfg == {"reward": {"num_workers": "eight"}}


def test_invalid_new_section_is_reported_by_load_config():
    with pytest.raises(ConfigError, match=r"reward\.num_worker: unknown key\. Did you mean 'num_workers'"):
        migrate_legacy({"reward": {"num_worker": 2}, "reward_model": {"reward_manager": "dapo"}}, warn=False)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        migrate_legacy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward_model: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        migrate_legacy(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- reward_model\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"in .*list\.yaml must be a mapping, got list"):
        migrate_legacy(listing)
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert migrate_legacy(empty, warn=False) == ({"reward": {}}, [])


# -- files: migrate → dump → load_config ----------------------------------------------------------


FIXTURES = sorted(p.name for p in LEGACY.glob("*.yaml"))


@pytest.mark.parametrize("name", FIXTURES)
def test_yaml_round_trip(tmp_path, name):
    src = LEGACY / name
    out = tmp_path / "new.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LegacyConfigWarning)
        text = migrate_file(src, out)
        cfg, messages = migrate_legacy(src)
    assert out.read_text(encoding="utf-8") == text
    assert yaml.safe_load(text) == cfg  # the comment header is only comments
    assert load_config(out) == RewardConfig.model_validate(cfg["reward"])
    # Migrating the output again changes nothing and says nothing.
    again, again_messages = migrate_legacy(out)
    assert again == cfg and again_messages == []
    for message in messages:
        assert f"# - {message.splitlines()[0]}" in text


def test_migrate_file_without_destination_only_returns_text(tmp_path):
    src = tmp_path / "old.yaml"
    src.write_text("reward_model:\n  reward_manager: batch\n  num_workers: 2\n", encoding="utf-8")
    text = migrate_file(src, warn=False)
    assert text.startswith(f"# rewardkit config migrated from {src}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.yaml"]
    assert load_config(yaml.safe_load(text)).reward_manager.name == "batch"


def test_load_config_points_legacy_configs_to_the_migration():
    with pytest.raises(ConfigError, match="migrate-config"):
        load_config(str(LEGACY / "dapo_reward_kwargs.yaml"))


def test_migrated_real_world_config_scores(write_module):
    # End to end: the whole gsm8k dump with its RM turned off and a custom function, scored.
    data = yaml.safe_load((LEGACY / "gsm8k_fsdp_rm.yaml").read_text(encoding="utf-8"))
    data["reward_model"]["enable"] = False
    data["custom_reward_function"]["path"] = str(write_module("r.py", REWARD_FN))
    cfg, _, _ = _migrate(data)
    cfg["reward"]["executor"] = "inline"
    result = rewardkit.compute([{"response": "1", "ground_truth": "1"}], cfg)
    assert result.scores == [1.0] and not math.isnan(result.scores[0])


# -- load_config's messages for malformed new-style configs -----------------------------------------


@pytest.mark.parametrize(
    ("section", "line"),
    [
        ({"num_worker": 4}, "reward.num_worker: unknown key. Did you mean 'num_workers'?"),
        (
            {"reward_manager": {"nmae": "dapo"}},
            "reward.reward_manager.nmae: unknown key. Did you mean 'name'?",
        ),
        (
            {"reward_model": {"modle_path": "x"}},
            "reward.reward_model.modle_path: unknown key. Did you mean 'model_path'?",
        ),
        ({"sandbox_fusion": {"max_concurent": 2}}, "Did you mean 'max_concurrency'?"),
        (
            {"reward_model": {"n_gpus_per_node": "four"}},
            "reward.reward_model.n_gpus_per_node: Input should be a valid integer",
        ),
        ({"timeout_s": -1}, "reward.timeout_s: Input should be greater than 0"),
        ({"scorers": {"gsm8k": "heavy"}}, "reward.scorers.0.weight: Input should be a valid number"),
        ({"reward_manager": {"source": "importlib"}}, "reward_manager.module.path is not set"),
    ],
)
def test_load_config_messages(section, line):
    with pytest.raises(ConfigError) as info:
        load_config({"reward": section})
    assert line in str(info.value)


@pytest.mark.parametrize(
    ("section", "hint"),
    [
        (
            {"reward_manager": {"source": "importlib", "module": {"path": "m.py", "nmae": "C"}}},
            "Did you mean 'name'?",
        ),
        ({"scorers": [{"name": "gsm8k", "wieght": 2}]}, "Did you mean 'weight'?"),
    ],
)
def test_load_config_did_you_mean_below_optional_and_list_fields(section, hint):
    with pytest.raises(ConfigError) as info:
        load_config({"reward": section})
    assert hint in str(info.value)


# -- the fixtures build engines, and the docs cannot drift -------------------------------------------


@pytest.mark.parametrize(
    ("name", "manager", "backend"),
    [
        ("dapo_recipe_old.yaml", "DAPORewardManager", None),
        ("dapo_reward_kwargs.yaml", "DAPORewardManager", None),
        ("gsm8k_fsdp_rm.yaml", "NaiveRewardManager", "DiscriminativeRM"),
        ("rewardkit_new.yaml", "NaiveRewardManager", None),
    ],
)
def test_migrated_fixture_builds_an_engine(name, manager, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LegacyConfigWarning)
        cfg, _ = migrate_legacy(LEGACY / name)
    cfg["reward"]["executor"] = "inline"
    engine = rewardkit.RewardEngine(cfg)  # resolves manager, backend and executor names
    try:
        assert engine._manager_cls.__name__ == manager
        assert engine._executor_cls.__name__ == "InlineExecutor"
        assert engine.config.reward_model.enable is (backend is not None)
        if backend is not None:
            assert engine._backend_cls.__name__ == backend
    finally:
        engine.close()


DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"


def _fields(model, prefix=""):
    import typing

    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        yield prefix + name, name
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (arg, *typing.get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    yield from _fields(inner, f"{prefix}{name}.")


def test_docs_describe_every_config_field():
    text = DOCS.read_text(encoding="utf-8")
    missing = [path for path, name in _fields(RewardConfig) if f"`{name}`" not in text]
    assert not missing, f"docs/config.md lacks {missing}"


def test_docs_example_is_a_valid_config():
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("## A complete example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = load_config(yaml.safe_load(block))
    assert config.executor == "process" and [s.key for s in config.scorers] == ["math", "fmt"]


def test_docs_migration_table_names_every_legacy_key():
    from rewardkit import migrate

    text = DOCS.read_text(encoding="utf-8")
    table = text.split("### Key by key", 1)[1]
    for path in (*migrate._MOVES, *migrate._DICT_MOVES, *migrate._DISCRIMINATIVE_MOVES):
        dotted = ".".join(path)
        short = dotted.split(".", 1)[1] if dotted.startswith("reward_model.sandbox_fusion.") else dotted
        assert dotted in table or short in table or dotted.rsplit(".", 1)[0] + ".*" in table, dotted
    for key in migrate._MANAGER_KEYS:
        assert f"reward_model.{key}" in table


# -- Hydra overrides from a verl run script ------------------------------------------------------------


def test_overrides_of_a_run_script_migrate():
    from rewardkit.migrate import overrides_to_config

    args = [
        "algorithm.adv_estimator=grpo",
        "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096",
        "++reward_model.reward_kwargs.max_resp_len=20480",
        'custom_reward_function.path="/x/my reward.py"',
        "+custom_reward_function.reward_kwargs={alpha:0.5,mode:strict}",
        "trainer.logger=['console','wandb']",
        "sandbox_fusion.url=http://127.0.0.1:8080/run_code",
        "reward_model.num_workers=null",
        "~reward_model.model",
        "",
    ]
    data = overrides_to_config(args)
    assert data["trainer"]["logger"] == ["console", "wandb"]
    assert data["reward_model"]["reward_kwargs"]["overlong_buffer_cfg"] == {"enable": True, "len": 4096}
    cfg, messages, _ = _migrate(data)
    config = load_config(cfg)
    assert config.reward_manager.name == "dapo"
    assert config.reward_manager.kwargs["max_resp_len"] == 20480
    assert config.custom_reward_function.path == "/x/my reward.py"
    assert config.custom_reward_function.reward_kwargs == {"alpha": 0.5, "mode": "strict"}
    assert config.sandbox_fusion.url == "http://127.0.0.1:8080/run_code"
    assert config.num_workers is None


@pytest.mark.parametrize("bad", ["reward_model.reward_manager", "=dapo", "reward model=x", "9lives=1"])
def test_malformed_override_is_named(bad):
    from rewardkit.migrate import overrides_to_config

    with pytest.raises(ConfigError, match="not a Hydra override"):
        overrides_to_config([bad])


def test_override_below_a_value_is_an_error():
    from rewardkit.migrate import overrides_to_config

    with pytest.raises(ConfigError, match="reward_model"):
        overrides_to_config(["reward_model=3", "reward_model.num_workers=2"])


def test_data_parallel_rollout_spells_out_each_parallel_size():
    cfg, _, _ = _migrate(
        {
            "reward_model": {
                "enable": True,
                "enable_resource_pool": True,
                "n_gpus_per_node": 8,
                "nnodes": 1,
                "model": {"path": "RM"},
                "rollout": {"name": "vllm", "tensor_model_parallel_size": 2, "data_parallel_size": 2},
            }
        }
    )
    s = load_config(cfg).reward_model.server
    assert (s.gpus_per_replica, s.replicas) == (4.0, 2)
    assert s.engine_args == {"tensor_parallel_size": 2, "data_parallel_size": 2, "pipeline_parallel_size": 1}


# -- issue 13: a verl manager carried over is warned about at migration -------------------------------

VERL_MANAGER = """
from verl.workers.reward_manager.abstract import AbstractRewardManager

class MyVerlManager(AbstractRewardManager):
    def __call__(self, data, return_dict=False):
        return data
"""


def test_a_verl_manager_class_is_warned_about_at_migration(write_module):
    path = write_module("verl_manager.py", VERL_MANAGER)
    legacy = {
        "reward_model": {
            "reward_loop_source": "importlib",
            "reward_loop_module_path": str(path),
            "reward_loop_class_name": "MyVerlManager",
        }
    }
    cfg, messages, issued = _migrate(legacy)
    hits = [m for m in messages if m.startswith("check reward.reward_manager: class 'MyVerlManager'")]
    assert len(hits) == 1 and "looks like a verl reward manager" in hits[0] and hits[0] in issued
    with pytest.raises(ConfigError, match="not a rewardkit RewardManager subclass"):
        rewardkit.RewardEngine(cfg)  # what the warning announced


def test_a_rewardkit_manager_class_is_not_warned_about(tmp_path, write_module):
    _, messages, _ = _migrate(_custom_manager_config(tmp_path, write_module))
    assert not [m for m in messages if m.startswith("check reward.reward_manager")]


def test_a_verl_registered_manager_name_is_warned_about():
    cfg, messages, _ = _migrate({"reward_model": {"reward_manager": "my_verl_manager"}})
    assert _at(cfg, "reward_manager.name") == "my_verl_manager"
    assert any(
        m.startswith("check reward.reward_manager.name='my_verl_manager': not a rewardkit built-in")
        for m in messages
    )
    _, messages, _ = _migrate({"reward_model": {"reward_manager": "dapo"}})
    assert not [m for m in messages if m.startswith("check reward.reward_manager")]


def test_legacy_rollout_temperature_beats_the_default_verl_dumped_into_the_new_layout():
    legacy = {
        "reward": {"reward_model": {"rollout": {"temperature": 1.0}}},  # verl's dumped default
        "reward_model": {"enable": True, "model": {"path": "m"}, "rollout": {"temperature": 0.7}},
        "custom_reward_function": {"path": "r.py"},
    }
    cfg, messages = migrate_legacy(legacy, warn=False, validate=False)
    assert _at(cfg, "reward_model.rollout.temperature") == 0.7
    assert any("replaces reward.reward_model.rollout.temperature=1.0" in m for m in messages)
    legacy["reward"]["reward_model"]["rollout"]["temperature"] = 0.3  # a value the user chose wins
    cfg, _ = migrate_legacy(legacy, warn=False, validate=False)
    assert _at(cfg, "reward_model.rollout.temperature") == 0.3
