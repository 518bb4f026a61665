"""Tiny, CPU-only, seeded models and a tokenizer for tests and benchmarks (built in seconds, no downloads).

Import it as ``from tiny_models import ...`` in tests (pytest puts ``tests/`` on ``sys.path``) or as
``tests.tiny_models`` from the repository root (benchmarks). Every builder saves with
``save_pretrained`` so the directory loads through the real ``from_pretrained`` path:

* :func:`build_tokenizer`: a byte-level BPE tokenizer (any unicode text round-trips) that adds
  ``<s>`` in front of every encoding, with ``<|im_start|>`` / ``<|im_end|>`` chat tokens and a
  ChatML-like Jinja chat template that *also* starts with ``<s>`` (so a naive
  ``tokenizer(template_text)`` gives a duplicated BOS, as with many real RMs).
* :func:`build_tiny_classifier`: ``AutoModelForSequenceClassification`` (reward-model head).
* :func:`build_tiny_bert_classifier`: a BERT classifier with a WordPiece tokenizer that wraps every
  input as ``[CLS] ... [SEP]`` (its head reads the ``[CLS]`` position).
* :func:`build_tiny_causal_lm`: ``LlamaForCausalLM`` (a policy for trainer-integration tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK, IM_START, IM_END]

#: The chat template saved with the tokenizer: BOS, then ChatML turns.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? The answer is 72.",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "Let's think step by step. First, 12 / 60 = 0.2 per minute, then 0.2 * 50 = 10. #### 10",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 3.14 -7 42 2026",
    "You are a helpful assistant. Please answer the question. Sure! Here is my answer:",
    "system user assistant reward model score helpful harmless honest correct wrong",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Solve: x^2 - 5x + 6 = 0, so x = 2 or x = 3. \\boxed{2}",
    "Unicode: café, naïve, 数学, Привет, 🙂 — all fine.",
]


def build_tokenizer(path: str | Path | None = None, vocab_size: int = 400):
    """A fast byte-level BPE tokenizer trained on a small in-memory corpus; saved to ``path`` when given.

    Returns a ``transformers.PreTrainedTokenizerFast`` with ``bos/eos/pad/unk`` tokens, the chat
    tokens and :data:`CHAT_TEMPLATE`. Its post-processor prepends ``<s>`` to every encoding.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        fast.save_pretrained(str(path))
    return fast


def _llama_config(tokenizer, **overrides):
    from transformers import LlamaConfig

    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        # Larger than the usual 0.02 so a tiny random model's scores differ visibly between inputs.
        initializer_range=0.2,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


def build_tiny_classifier(
    path: str | Path,
    num_labels: int = 1,
    arch: str = "llama",
    *,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    **config_overrides,
):
    """A seeded 2-layer sequence-classification model (hidden 32) with its tokenizer, saved to ``path``.

    ``arch`` is ``"llama"`` or ``"gpt2"``. ``labels`` names the heads (``id2label``); by default
    ``num_labels == 1`` is a reward head and more heads are named ``label_0, label_1, ...``.
    ``config_overrides`` replace model-config fields (e.g. ``hidden_size=256`` for benchmarks).
    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, GPT2Config

    path = Path(path)
    tokenizer = build_tokenizer(path)
    if labels is not None:
        if len(labels) != num_labels:
            raise ValueError(f"{len(labels)} label names for num_labels={num_labels}")
        names = list(labels)
    else:
        names = ["score"] if num_labels == 1 else [f"label_{i}" for i in range(num_labels)]
    label_kwargs = dict(
        num_labels=num_labels,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    if arch == "llama":
        config = _llama_config(tokenizer, **label_kwargs, **config_overrides)
    elif arch == "gpt2":
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=2048,
            initializer_range=0.2,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **label_kwargs,
            **config_overrides,
        )
    else:
        raise ValueError(f"unknown arch {arch!r}; use 'llama' or 'gpt2'")
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    model.eval()
    model.save_pretrained(str(path))
    return path


def build_tiny_causal_lm(path: str | Path, *, seed: int = 0):
    """A seeded 2-layer ``LlamaForCausalLM`` (hidden 32) with the same tokenizer, saved to ``path``.

    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    path = Path(path)
    tokenizer = build_tokenizer(path)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(tokenizer))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.eval()
    model.save_pretrained(str(path))
    return path


def build_tiny_bert_classifier(path: str | Path, *, seed: int = 0):
    """A seeded 2-layer ``BertForSequenceClassification`` (hidden 32, one label) with a WordPiece
    tokenizer (``[CLS] text [SEP]``, no chat template), saved to ``path``. Returns ``path``."""
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig, BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    words = sorted({w.strip(".,?!:;$#()\\").lower() for line in _CORPUS for w in line.split()} - {""})
    chars = sorted({c for line in _CORPUS for c in line.lower() if not c.isspace()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars), *words]
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), model_max_length=512)
    tokenizer.save_pretrained(str(path))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
        initializer_range=0.2,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    model.eval()
    model.save_pretrained(str(path))
    return path


def padded_rollout(tokenizer, pairs, prompt_len: int, response_len: int):
    """Token id lists as verl's rollout lays them out: left-padded prompts, right-padded responses ending
    in EOS (an empty response is all padding), and the attention mask over both.

    ``pairs`` are ``(prompt, response)`` texts; returns ``(prompts, responses, masks)`` as lists of lists.
    """
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    prompts, responses, masks = [], [], []
    for prompt, response in pairs:
        p = tokenizer(prompt)["input_ids"][-prompt_len:]
        r = (
            (tokenizer(response, add_special_tokens=False)["input_ids"] + [eos])[:response_len]
            if response
            else []
        )
        prompts.append([pad] * (prompt_len - len(p)) + p)
        responses.append(r + [pad] * (response_len - len(r)))
        masks.append(
            [0] * (prompt_len - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (response_len - len(r))
        )
    return prompts, responses, masks


def cpu_grpo_config(output_dir: str | Path, *, max_steps: int, **overrides):
    """TRL ``GRPOConfig`` for a few real GRPO steps of a tiny model on CPU: batch 4, 2 generations of
    8 tokens, no saving, no reporting, deterministic; ``overrides`` replace or add fields."""
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=max_steps,
        logging_steps=1,
        learning_rate=1e-4,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return GRPOConfig(**{**settings, **overrides})
