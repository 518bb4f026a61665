"""Tiny reward models built once per session, and an independent reference forward pass."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import build_tiny_classifier  # noqa: E402

MULTI_LABELS = ["helpful", "harmless", "honest"]


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory):
    """A 1-label llama reward model with its tokenizer (chat template starts with BOS)."""
    return build_tiny_classifier(tmp_path_factory.mktemp("disrm") / "rm")


@pytest.fixture(scope="session")
def multi_rm_dir(tmp_path_factory):
    """A 3-label llama classifier named helpful / harmless / honest."""
    return build_tiny_classifier(
        tmp_path_factory.mktemp("disrm") / "multi", num_labels=3, labels=MULTI_LABELS, seed=1
    )


class Reference:
    """Scores computed without the backend: unbatched forward passes of independently built inputs."""

    def __init__(self, path):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=torch.float32).eval()

    def messages(self, prompt, response):
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if isinstance(prompt, str) and not prompt:
            msgs = []
        return [*msgs, {"role": "assistant", "content": response}]

    def ids(self, prompt, response):
        # The template writes BOS itself, so the text is tokenized without adding another.
        text = self.tokenizer.apply_chat_template(self.messages(prompt, response), tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def logits_of_ids(self, ids):
        with torch.no_grad():
            return self.model(input_ids=torch.tensor([ids])).logits[0]

    def logits(self, prompt, response):
        return self.logits_of_ids(self.ids(prompt, response))


@pytest.fixture(scope="session")
def make_reference():
    """The :class:`Reference` class, for models built inside a test."""
    return Reference


@pytest.fixture(scope="session")
def reference(tiny_rm_dir):
    """Reference forward passes of the 1-label model."""
    return Reference(tiny_rm_dir)


@pytest.fixture(scope="session")
def multi_reference(multi_rm_dir):
    """Reference forward passes of the 3-label model."""
    return Reference(multi_rm_dir)


@pytest.fixture
def make_backend(tiny_rm_dir):
    """Build a DiscriminativeRM from kwargs (closed at the end of the test)."""
    from rewardkit.backends.discriminative import DiscriminativeRM
    from rewardkit.config import RewardModelConfig

    made = []

    def make(path=None, offload=False, **kwargs):
        cfg = RewardModelConfig(
            enable=True,
            backend="discriminative",
            model_path=str(path or tiny_rm_dir),
            offload=offload,
            kwargs=kwargs,
        )
        backend = DiscriminativeRM(cfg)
        made.append(backend)
        return backend

    yield make
    for b in made:
        b.close()


@pytest.fixture
def reference_cls():
    """The :class:`Reference` class, for tests that build their own model (test folders share no module names)."""
    return Reference
