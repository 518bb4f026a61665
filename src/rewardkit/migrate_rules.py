"""The rule table of :mod:`rewardkit.migrate`: where each verl legacy reward key goes, what is
dropped and why, and verl's defaults (a value equal to one carries no setting).

Data only; :mod:`rewardkit.migrate` applies it.
"""

from __future__ import annotations

from typing import Any

KeyPath = tuple[str, ...]

# -- the key map -------------------------------------------------------------------------------------
# Scalar keys moved one to one (legacy path → path under ``reward:``). Order matters for
# conflicts between two legacy spellings: the first one listed wins.
_MOVES: dict[KeyPath, KeyPath] = {
    ("reward_model", "num_workers"): ("num_workers",),
    ("reward_model", "enable"): ("reward_model", "enable"),
    ("reward_model", "enable_resource_pool"): ("reward_model", "enable_resource_pool"),
    ("reward_model", "n_gpus_per_node"): ("reward_model", "n_gpus_per_node"),
    ("reward_model", "nnodes"): ("reward_model", "nnodes"),
    ("reward_model", "model", "path"): ("reward_model", "model_path"),
    ("reward_model", "model", "fsdp_config", "param_offload"): ("reward_model", "offload"),
    ("custom_reward_function", "path"): ("custom_reward_function", "path"),
    ("custom_reward_function", "name"): ("custom_reward_function", "name"),
    ("sandbox_fusion", "url"): ("sandbox_fusion", "url"),
    ("sandbox_fusion", "max_concurrent"): ("sandbox_fusion", "max_concurrency"),
    ("sandbox_fusion", "memory_limit_mb"): ("sandbox_fusion", "memory_limit_mb"),
    ("reward_model", "sandbox_fusion", "url"): ("sandbox_fusion", "url"),
    ("reward_model", "sandbox_fusion", "max_concurrent"): ("sandbox_fusion", "max_concurrency"),
    ("reward_model", "sandbox_fusion", "memory_limit_mb"): ("sandbox_fusion", "memory_limit_mb"),
}

# Mapping-valued keys moved as a whole (merged key by key into the target).
_DICT_MOVES: dict[KeyPath, KeyPath] = {
    ("custom_reward_function", "reward_kwargs"): ("custom_reward_function", "reward_kwargs"),
    ("reward_model", "reward_kwargs"): ("reward_manager", "kwargs"),
    ("reward_model", "overlong_buffer"): ("reward_manager", "kwargs", "overlong_buffer_cfg"),
}

# Sections whose every child key moves under the target (``inference`` was verl's short-lived
# name for ``rollout``).
_SECTION_MOVES: dict[KeyPath, KeyPath] = {
    ("reward_model", "rollout"): ("reward_model", "rollout"),
    ("reward_model", "inference"): ("reward_model", "rollout"),
}

# Keys that mean something to rewardkit's ``discriminative`` backend only (its strict ``kwargs``).
_DISCRIMINATIVE_MOVES: dict[KeyPath, KeyPath] = {
    ("reward_model", "model", "trust_remote_code"): ("reward_model", "kwargs", "trust_remote_code"),
    ("reward_model", "max_length"): ("reward_model", "kwargs", "max_length"),
    ("reward_model", "micro_batch_size_per_gpu"): ("reward_model", "kwargs", "max_batch_size"),
}

# verl's ``rollout`` settings launch the reward model's vLLM/SGLang server, which rewardkit does not
# do. Their verl defaults (a value equal to one sets nothing). The few rewardkit's ``generative``
# judge understands are mapped in _GENERATIVE_ROLLOUT.
_VERL_ROLLOUT_DEFAULTS: dict[str, Any] = {
    "name": None,
    "dtype": "bfloat16",
    "gpu_memory_utilization": 0.5,
    "enforce_eager": True,
    "cudagraph_capture_sizes": None,
    "free_cache_engine": True,
    "data_parallel_size": 1,
    "expert_parallel_size": 1,
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 1,
    "max_num_batched_tokens": 8192,
    "max_model_len": None,
    "max_num_seqs": 1024,
    "load_format": "auto",
    "layered_summon": False,
    "scheduling_policy": "fcfs",
    "full_determinism": False,
    "seed": 42,
    "multi_stage_wake_up": False,
    "engine_kwargs": {},
    "limit_images": None,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
    "disable_log_stats": True,
    "skip_tokenizer_init": False,
    "ignore_eos": False,
    "temperature": 1.0,
    "top_k": -1,
    "top_p": 1,
    "do_sample": True,
    "n": 1,
    "prompt_length": 2048,
    "response_length": 2048,
    "quantization": None,
    "quantization_config_file": None,
    "mtp": None,
    "disaggregation": None,
}
_GENERATIVE_ROLLOUT = {
    "max_model_len": "context_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
}
_SERVER_REASON = (
    "verl used it to launch the reward model's vLLM/SGLang server; rewardkit launches one only for an "
    "enabled reward model (reward.reward_model.server, like `vllm serve MODEL`) and has no setting for this"
)

# verl's rollout keys that launch the reward model's server: → reward.reward_model.server.engine_args,
# under the flag name of each engine (None: the engine has no such flag).
_SERVER_ENGINE_ARGS: dict[str, dict[str, str | None]] = {
    "dtype": {"vllm": "dtype", "sglang": "dtype"},
    "gpu_memory_utilization": {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static"},
    "enforce_eager": {"vllm": "enforce_eager", "sglang": "disable_cuda_graph"},
    "max_num_batched_tokens": {"vllm": "max_num_batched_tokens", "sglang": "chunked_prefill_size"},
    "max_num_seqs": {"vllm": "max_num_seqs", "sglang": "max_running_requests"},
    "max_model_len": {"vllm": "max_model_len", "sglang": "context_length"},
    "enable_chunked_prefill": {"vllm": "enable_chunked_prefill", "sglang": None},
    "enable_prefix_caching": {"vllm": "enable_prefix_caching", "sglang": None},
    "load_format": {"vllm": "load_format", "sglang": "load_format"},
    "quantization": {"vllm": "quantization", "sglang": "quantization"},
}
# Their product is one replica's GPUs (verl's rollout world size).
_SERVER_TOPOLOGY = ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
_SERVER_KEYS = {"name", "engine_kwargs", "free_cache_engine", *_SERVER_ENGINE_ARGS, *_SERVER_TOPOLOGY}

_GENERATION_REASON = (
    "a generation setting of verl's rollout config; a reward-model server (reward.reward_model.server) "
    "does not take it"
)

_MANAGER_KEYS = ("reward_manager", "reward_loop_source", "reward_loop_module_path", "reward_loop_class_name")

_FSDP_REASON = (
    "a setting of verl's FSDP reward-model training worker; rewardkit backends load the model "
    "with transformers or talk to a server and do not shard it"
)
# Legacy keys rewardkit has no use for, with the reason (a key's whole subtree is dropped).
_DROPS: dict[KeyPath, str] = {
    ("reward_model", "use_reward_loop"): "rewardkit always runs its own asynchronous reward loop",
    ("reward_model", "launch_reward_fn_async"): "rewardkit scoring is always asynchronous",
    ("reward_model", "model", "input_tokenizer"): (
        "rewardkit receives decoded text, so the policy tokenizer is not needed to re-template it"
    ),
    ("reward_model", "strategy"): _FSDP_REASON,
    ("reward_model", "micro_batch_size"): _FSDP_REASON,
    ("reward_model", "use_dynamic_bsz"): _FSDP_REASON,
    ("reward_model", "forward_max_token_len_per_gpu"): _FSDP_REASON,
    ("reward_model", "ulysses_sequence_parallel_size"): _FSDP_REASON,
    ("reward_model", "model", "external_lib"): (
        "rewardkit loads reward models with transformers' Auto classes; import a custom model "
        "module yourself (e.g. from a rewardkit plugin) so it registers with transformers"
    ),
    ("reward_model", "model", "use_shm"): _FSDP_REASON,
    ("reward_model", "model", "use_remove_padding"): _FSDP_REASON,
    ("reward_model", "model", "use_fused_kernels"): _FSDP_REASON,
    ("reward_model", "model", "override_config"): _FSDP_REASON,
    ("reward_model", "model", "fsdp_config"): _FSDP_REASON,
    ("reward_model", "profiler"): "rewardkit does not drive verl's profiler",
}
# Values of dropped keys that carry no setting (verl's own defaults); they are summed up in one message.
_INERT_DROPS: dict[KeyPath, tuple[Any, ...]] = {
    ("reward_model", "use_reward_loop"): (True,),
    ("reward_model", "strategy"): ("fsdp", "fsdp2"),
    ("reward_model", "ulysses_sequence_parallel_size"): (1,),
}

# Defaults of verl's *new* ``reward:`` layout. A new-layout value equal to one of these carries no
# user intent (verl's full config dumps contain them), so a legacy value set beside it wins, as it
# does in verl itself. Any other new-layout value wins over the legacy one.
_VERL_NEW_DEFAULTS: dict[KeyPath, Any] = {
    ("num_workers",): 8,
    ("reward_manager", "name"): "naive",
    ("reward_manager", "source"): "register",
    ("reward_manager", "module", "name"): "custom_reward_manager",
    ("custom_reward_function", "name"): "compute_score",
    ("reward_model", "enable"): False,
    ("reward_model", "enable_resource_pool"): False,
    ("reward_model", "n_gpus_per_node"): 8,
    ("reward_model", "nnodes"): 0,
    ("sandbox_fusion", "max_concurrency"): 64,
    ("sandbox_fusion", "memory_limit_mb"): 1024,
}
# verl dumps its rollout defaults into the new layout too: a legacy sampling setting beats them (#13).
_VERL_NEW_DEFAULTS.update(
    {
        ("reward_model", "rollout", new): _VERL_ROLLOUT_DEFAULTS[old]
        for old, new in _GENERATIVE_ROLLOUT.items()
        if old in _VERL_ROLLOUT_DEFAULTS
    }
)

# Keys of verl's new layout (and rewardkit's deprecated spellings) that rewardkit names otherwise.
_RENAMED: dict[KeyPath, str] = {
    ("sandbox_fusion", "max_concurrent"): "max_concurrency",
    ("reward_model", "rollout", "max_in_flight"): "max_concurrency",
    ("reward_model", "rollout", "min_in_flight"): "min_concurrency",
    ("reward_model", "rollout", "deadline_s"): "batch_timeout_s",
}

# verl managers with no rewardkit counterpart of the same name.
_MANAGER_RENAMES = {
    "prime": ("naive", "process", "verl's 'prime' manager was the naive one run in a process pool"),
}

#: rewardkit's own manager names (a legacy name outside these and _MANAGER_RENAMES is checked).
_BUILTIN_MANAGERS = frozenset({"naive", "batch", "dapo", "composite"})
