"""The rule table of :mod:`rewardkit.migrate`: where each verl legacy reward key goes, what is
dropped and why, and verl's defaults (a value equal to one carries no setting).

Data only; :mod:`rewardkit.migrate` applies it.
"""

from __future__ import annotations

from typing import Any

KeyPath = tuple[str, ...]

# -- the rule table ----------------------------------------------------------------------------------
# Each legacy key path → (kind, argument). Kinds: MOVE a scalar to a path under ``reward:``; DICT a
# mapping merged key by key into the target; SECTION every child key (verl's ``rollout``, and
# ``inference``, its short-lived name) to the server/judge mapping; RM_KWARG a scalar for rewardkit's
# ``discriminative`` backend only (its strict ``kwargs``), decided once the backend is; DROP the key's
# whole subtree, with the reason. Order matters for conflicts between two legacy spellings.
MOVE, DICT, SECTION, RM_KWARG, DROP = "move", "dict", "section", "rm_kwarg", "drop"
FSDP_REASON = (
    "a setting of verl's FSDP reward-model training worker; rewardkit backends load the model "
    "with transformers or talk to a server and do not shard it"
)
RULES: dict[KeyPath, tuple[str, Any]] = {
    ("reward_model", "num_workers"): (MOVE, ("num_workers",)),
    ("reward_model", "enable"): (MOVE, ("reward_model", "enable")),
    ("reward_model", "enable_resource_pool"): (MOVE, ("reward_model", "enable_resource_pool")),
    ("reward_model", "n_gpus_per_node"): (MOVE, ("reward_model", "n_gpus_per_node")),
    ("reward_model", "nnodes"): (MOVE, ("reward_model", "nnodes")),
    ("reward_model", "model", "path"): (MOVE, ("reward_model", "model_path")),
    ("reward_model", "model", "fsdp_config", "param_offload"): (MOVE, ("reward_model", "offload")),
    ("custom_reward_function", "path"): (MOVE, ("custom_reward_function", "path")),
    ("custom_reward_function", "name"): (MOVE, ("custom_reward_function", "name")),
    ("sandbox_fusion", "url"): (MOVE, ("sandbox_fusion", "url")),
    ("sandbox_fusion", "max_concurrent"): (MOVE, ("sandbox_fusion", "max_concurrency")),
    ("sandbox_fusion", "memory_limit_mb"): (MOVE, ("sandbox_fusion", "memory_limit_mb")),
    ("reward_model", "sandbox_fusion", "url"): (MOVE, ("sandbox_fusion", "url")),
    ("reward_model", "sandbox_fusion", "max_concurrent"): (MOVE, ("sandbox_fusion", "max_concurrency")),
    ("reward_model", "sandbox_fusion", "memory_limit_mb"): (MOVE, ("sandbox_fusion", "memory_limit_mb")),
    ("custom_reward_function", "reward_kwargs"): (DICT, ("custom_reward_function", "reward_kwargs")),
    ("reward_model", "reward_kwargs"): (DICT, ("reward_manager", "kwargs")),
    ("reward_model", "overlong_buffer"): (DICT, ("reward_manager", "kwargs", "overlong_buffer_cfg")),
    ("reward_model", "rollout"): (SECTION, ("reward_model", "rollout")),
    ("reward_model", "inference"): (SECTION, ("reward_model", "rollout")),
    ("reward_model", "model", "trust_remote_code"): (
        RM_KWARG,
        ("reward_model", "kwargs", "trust_remote_code"),
    ),
    ("reward_model", "max_length"): (RM_KWARG, ("reward_model", "kwargs", "max_length")),
    ("reward_model", "micro_batch_size_per_gpu"): (RM_KWARG, ("reward_model", "kwargs", "max_batch_size")),
    ("reward_model", "use_reward_loop"): (DROP, "rewardkit always runs its own asynchronous reward loop"),
    ("reward_model", "launch_reward_fn_async"): (DROP, "rewardkit scoring is always asynchronous"),
    ("reward_model", "model", "input_tokenizer"): (
        DROP,
        "rewardkit receives decoded text, so the policy tokenizer is not needed to re-template it",
    ),
    ("reward_model", "strategy"): (DROP, FSDP_REASON),
    ("reward_model", "micro_batch_size"): (DROP, FSDP_REASON),
    ("reward_model", "use_dynamic_bsz"): (DROP, FSDP_REASON),
    ("reward_model", "forward_max_token_len_per_gpu"): (DROP, FSDP_REASON),
    ("reward_model", "ulysses_sequence_parallel_size"): (DROP, FSDP_REASON),
    ("reward_model", "model", "external_lib"): (
        DROP,
        "rewardkit loads reward models with transformers' Auto classes; import a custom model "
        "module yourself (e.g. from a rewardkit plugin) so it registers with transformers",
    ),
    ("reward_model", "model", "use_shm"): (DROP, FSDP_REASON),
    ("reward_model", "model", "use_remove_padding"): (DROP, FSDP_REASON),
    ("reward_model", "model", "use_fused_kernels"): (DROP, FSDP_REASON),
    ("reward_model", "model", "override_config"): (DROP, FSDP_REASON),
    ("reward_model", "model", "fsdp_config"): (DROP, FSDP_REASON),
    ("reward_model", "profiler"): (DROP, "rewardkit does not drive verl's profiler"),
}


def by_kind(kind: str) -> dict[KeyPath, Any]:
    """The rules of one kind: legacy path → its target path (or, for DROP, its reason)."""
    return {path: arg for path, (k, arg) in RULES.items() if k == kind}


# Views of the table by kind (docs/config.md's key table is checked against them).
MOVES, DICT_MOVES, SECTION_MOVES = by_kind(MOVE), by_kind(DICT), by_kind(SECTION)
DISCRIMINATIVE_MOVES, DROPS = by_kind(RM_KWARG), by_kind(DROP)

# Values of dropped keys that carry no setting (verl's own defaults); they are summed up in one message.
INERT_DROPS: dict[KeyPath, tuple[Any, ...]] = {
    ("reward_model", "use_reward_loop"): (True,),
    ("reward_model", "strategy"): ("fsdp", "fsdp2"),
    ("reward_model", "ulysses_sequence_parallel_size"): (1,),
}
# verl's defaults for an FSDP reward-model worker: a subtree holding only these sets nothing.
FSDP_DEFAULTS = {
    "wrap_policy": {"min_num_params": 0},
    "param_offload": False,
    "reshard_after_forward": True,
    "fsdp_size": -1,
    "forward_prefetch": False,
}

# verl's ``rollout`` settings launch the reward model's vLLM/SGLang server, which rewardkit does not
# do. Their verl defaults (a value equal to one sets nothing). The few rewardkit's ``generative``
# judge understands are mapped in GENERATIVE_ROLLOUT.
VERL_ROLLOUT_DEFAULTS: dict[str, Any] = {
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
GENERATIVE_ROLLOUT = {
    "max_model_len": "context_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
}
SERVER_REASON = (
    "verl used it to launch the reward model's vLLM/SGLang server; rewardkit launches one only for an "
    "enabled reward model (reward.reward_model.server, like `vllm serve MODEL`) and has no setting for this"
)

# verl's rollout keys that launch the reward model's server: → reward.reward_model.server.engine_args,
# under the flag name of each engine (None: the engine has no such flag).
SERVER_ENGINE_ARGS: dict[str, dict[str, str | None]] = {
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
SERVER_TOPOLOGY = ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
SERVER_KEYS = {"name", "engine_kwargs", "free_cache_engine", *SERVER_ENGINE_ARGS, *SERVER_TOPOLOGY}

UNKNOWN_REASON = (
    "not a key verl's reward migration knows; move it by hand if it matters (custom reward managers "
    "take options in reward.reward_manager.kwargs)"
)
GENERATION_REASON = (
    "a generation setting of verl's rollout config; a reward-model server (reward.reward_model.server) "
    "does not take it"
)

MANAGER_KEYS = ("reward_manager", "reward_loop_source", "reward_loop_module_path", "reward_loop_class_name")

# Defaults of verl's *new* ``reward:`` layout. A new-layout value equal to one of these carries no
# user intent (verl's full config dumps contain them), so a legacy value set beside it wins, as it
# does in verl itself. Any other new-layout value wins over the legacy one.
VERL_NEW_DEFAULTS: dict[KeyPath, Any] = {
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
VERL_NEW_DEFAULTS.update(
    {
        ("reward_model", "rollout", new): VERL_ROLLOUT_DEFAULTS[old]
        for old, new in GENERATIVE_ROLLOUT.items()
        if old in VERL_ROLLOUT_DEFAULTS
    }
)

# Keys of verl's new layout (and rewardkit's deprecated spellings) that rewardkit names otherwise.
RENAMED: dict[KeyPath, str] = {
    ("sandbox_fusion", "max_concurrent"): "max_concurrency",
    ("reward_model", "rollout", "max_in_flight"): "max_concurrency",
    ("reward_model", "rollout", "min_in_flight"): "min_concurrency",
    ("reward_model", "rollout", "deadline_s"): "batch_timeout_s",
}

# verl managers with no rewardkit counterpart of the same name.
MANAGER_RENAMES = {
    "prime": ("naive", "process", "verl's 'prime' manager was the naive one run in a process pool"),
}

#: rewardkit's own manager names (a legacy name outside these and MANAGER_RENAMES is checked).
BUILTIN_MANAGERS = frozenset({"naive", "batch", "dapo", "composite"})

# Keys directly under verl's legacy ``reward_model`` section.
LEGACY_RM_KEYS = {p[1] for p in RULES if p[0] == "reward_model"} | set(MANAGER_KEYS)
# verl rollout keys that rewardkit never reads (temperature, top_p and seed are also the judge's).
VERL_ONLY_ROLLOUT = set(VERL_ROLLOUT_DEFAULTS) - set(GENERATIVE_ROLLOUT.values())

# -- what the migration says -------------------------------------------------------------------------
# ``str.format`` templates of :mod:`rewardkit.migrate`'s longer messages, by name; ``value`` and
# ``existing`` arrive already shortened.
OMEGACONF_HINT = " (install omegaconf to resolve ${...} references)"
SAYS: dict[str, str] = {
    "parent_taken": "conflict: {old}={value} not carried: reward.{where} is already {existing}, not a mapping",
    "set_first": "conflict: {old}={value} not carried: {first}={existing} already set reward.{target}",
    "beats_default": (
        "conflict: {old}={value} replaces reward.{target}={existing} (verl's default there; verl's own "
        "migration lets the legacy key win too)"
    ),
    "new_wins": "conflict: {old}={value} not carried: reward.{target}={existing} is set in the new layout, which wins",
    "unresolved": (
        "not carried: {old}={value}: it holds an interpolation rewardkit cannot resolve here; set "
        "reward.{target} by hand{hint}"
    ),
    "not_str": "legacy key 'reward_model.{key}' must be a string, got {type}: {value}",
    "bad_source": "legacy key 'reward_model.reward_loop_source' must be 'register' or 'importlib', got {source!r}",
    "no_module_path": (
        "legacy key 'reward_model.reward_loop_source' is 'importlib' but "
        "'reward_model.reward_loop_module_path' is not set"
    ),
    "no_class": (
        "legacy key 'reward_model.reward_loop_source' is 'importlib' but neither "
        "'reward_model.reward_loop_class_name' nor 'reward_model.reward_manager' names the class"
    ),
    "name_beside_class": (
        "not carried: reward_model.reward_manager={name!r}: with reward_loop_source=importlib "
        "the manager is the class {cls!r} from {path!r}"
    ),
    "not_our_manager": (
        "check reward.reward_manager: class {cls!r} in {path!r} {why}; rewardkit loads only "
        "subclasses of rewardkit.managers.base.RewardManager, so the engine will refuse it. "
        "Port it (score_rules), or keep verl's reward loop and call rewardkit.integrations.verl"
    ),
    "importlib_only": (
        "not carried: reward_model.{key}={value!r}: only used when reward_model.reward_loop_source is 'importlib'"
    ),
    "renamed_manager": (
        "renamed reward_model.reward_manager={name!r} → reward.reward_manager.name={new!r} "
        "with reward.executor={executor!r}: {why}"
    ),
    "unknown_manager": (
        "check reward.reward_manager.name={name!r}: not a rewardkit built-in manager ({builtins}); a verl "
        "manager registered in verl is unknown to rewardkit unless a rewardkit plugin registers that name"
    ),
    "score_kwargs": (
        "not carried: reward.compute_score_kwargs={value}: rewardkit passes options to built-in scorers "
        "per scorer (reward.scorers[*].kwargs); add them there"
    ),
    "module_alias": (
        "set reward.reward_manager.module.name={name!r} (was 'custom_reward_manager', verl's module alias): "
        "rewardkit reads the class name there"
    ),
    "judge": (
        "set reward.reward_model.backend='generative': in verl's reward loop a served reward model next to "
        "custom_reward_function is a generative judge your function called through reward_router_address; "
        "rewardkit calls it itself and adds its score as component 'rm' beside your function's: check "
        "reward.reward_model.weight and the backend's kwargs"
    ),
    "classifier": (
        "set reward.reward_model.backend='discriminative': verl's reward model without a custom function "
        "was a sequence-classification model"
    ),
    "classifier_and_fn": (
        "; verl's legacy workers then used the model's score alone and ignored custom_reward_function, "
        "while rewardkit adds both: check this is what you want"
    ),
    "no_preset": (
        "not carried: {old}={engine!r}: rewardkit has no launcher preset for it; set "
        "reward.reward_model.server with engine: command"
    ),
    "one_replica": (
        "reward.reward_model.server.replicas is 1: verl sized a colocated reward model by the trainer's "
        "pool; set it to that pool's GPUs / gpus_per_replica"
    ),
    "keep_awake": (
        "not carried: {old}=False: rewardkit puts colocated servers to sleep between batches; set "
        "reward.reward_model.server.placement: standalone to keep them awake"
    ),
    "served_classifier": (
        "set reward.reward_model.backend='served-classifier': verl served this sequence-classification model "
        "and scored through /classify; rewardkit launches reward.reward_model.server and does the same"
    ),
    "rm_kwarg": "only rewardkit's discriminative backend uses it (this reward model {state})",
    "inert": "ignored legacy keys left at values that set nothing in rewardkit: {keys}",
}
# The parallelism flags of each engine, in SERVER_TOPOLOGY's order.
SERVER_TOPOLOGY_FLAGS = {
    "vllm": ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size"),
    "sglang": ("tp_size", "dp_size", "pp_size"),
}
