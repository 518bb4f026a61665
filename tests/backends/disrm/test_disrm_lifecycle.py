"""DiscriminativeRM lifecycle: load / wake_up / sleep / close, offload through the engine, CUDA."""

from __future__ import annotations

import threading

import pytest
import torch

import rewardkit
from rewardkit.batch import to_samples

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def devices(backend) -> set[str]:
    return {p.device.type for p in backend.model.parameters()} | {
        b.device.type for b in backend.model.buffers()
    }


def test_states_transitions_and_idempotence_on_cpu(make_backend):
    backend = make_backend(device="cpu")
    assert backend.state == "unloaded" and backend.model is None
    backend.load()
    backend.load()
    assert backend.state == "awake" and devices(backend) == {"cpu"}
    backend.sleep()
    backend.sleep()
    assert backend.state == "asleep" and devices(backend) == {"cpu"}
    backend.wake_up()
    backend.wake_up()
    assert backend.state == "awake"
    backend.close()
    backend.close()
    assert backend.state == "closed" and backend.model is None
    assert backend.transitions == ["load", "sleep", "wake_up", "close"]
    with pytest.raises(RuntimeError, match="closed"):
        backend.wake_up()
    with pytest.raises(RuntimeError, match="closed"):
        backend.score(to_samples([{"response": "x"}]))


def test_close_before_load_and_sleep_before_load(make_backend):
    backend = make_backend()
    backend.sleep()
    assert backend.state == "unloaded" and backend.transitions == []
    backend.close()
    assert backend.transitions == ["close"]


def test_scoring_wakes_a_sleeping_or_unloaded_backend(make_backend):
    backend = make_backend()
    (r,) = backend.score(to_samples([{"response": "x"}]))
    assert r.status == "ok" and backend.transitions == ["load"]
    backend.sleep()
    (again,) = backend.score(to_samples([{"response": "x"}]))
    assert again.score == pytest.approx(r.score, abs=1e-6)
    assert backend.transitions == ["load", "sleep", "wake_up"]


def test_offload_loads_asleep(make_backend):
    backend = make_backend(offload=True)
    backend.load()
    assert backend.state == "asleep" and devices(backend) == {"cpu"}
    assert backend.transitions == ["load", "sleep"]


def test_engine_with_offload_wakes_before_and_sleeps_after(tiny_rm_dir):
    cfg = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "discriminative",
            "model_path": str(tiny_rm_dir),
            "offload": True,
        },
    }
    seen_states = []
    with rewardkit.RewardEngine(cfg) as engine:
        backend = engine.backend
        original = backend.score

        def spy(samples):
            seen_states.append(backend.state)
            return original(samples)

        backend.score = spy
        first = engine.compute([{"prompt": "p", "response": "r"}])
        second = engine.compute([{"prompt": "p", "response": "r"}, {"response": ""}])
        assert engine.compute([]).scores == []
        assert backend.state == "asleep"
        assert seen_states == ["awake", "awake"], "the model must be awake while it scores"
        assert backend.transitions == ["load", "sleep", "wake_up", "sleep", "wake_up", "sleep"]
        assert first.scores[0] == pytest.approx(second.scores[0], abs=1e-6)
    assert backend.state == "closed" and backend.transitions[-1] == "close"


def test_engine_without_offload_stays_awake(tiny_rm_dir):
    cfg = {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": "discriminative", "model_path": str(tiny_rm_dir)},
    }
    with rewardkit.RewardEngine(cfg) as engine:
        engine.compute([{"response": "a"}])
        engine.compute([{"response": "b"}])
        assert engine.backend.transitions == ["load"] and engine.backend.state == "awake"
        engine.sleep()
        engine.wake_up()
        assert engine.backend.transitions == ["load", "sleep", "wake_up"]


def test_sleep_during_scoring_waits_for_the_batch(make_backend):
    backend = make_backend(token_budget=256)
    backend.load()
    samples = to_samples([{"prompt": "p" * (i % 50), "response": "word " * (i % 97)} for i in range(120)])
    results = []
    worker = threading.Thread(target=lambda: results.extend(backend.score(samples)))
    worker.start()
    backend.sleep()  # blocks on the backend lock until the batch is done, or runs before it starts
    worker.join()
    assert [r.status for r in results] == ["ok"] * 120
    assert backend.state in ("asleep", "awake")
    assert backend.transitions[:2] == ["load", "sleep"]


def test_sleep_empties_the_cuda_cache_when_cuda_is_present(make_backend, monkeypatch):
    # No GPU here: pretend one exists to check that sleep asks torch to hand memory back.
    backend = make_backend(device="cpu")
    backend.load()
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    backend.sleep()
    backend.sleep()
    assert calls == ["synchronize", "empty_cache"]
    assert devices(backend) == {"cpu"}


def test_cuda_requested_without_cuda_is_a_clear_error(make_backend):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from rewardkit.errors import ConfigError

    with pytest.raises(ConfigError, match="CUDA is not available"):
        make_backend(device="cuda").load()


@pytest.mark.cuda
@cuda
def test_cuda_sleep_returns_memory_and_wake_restores_it(make_backend):
    backend = make_backend(device="cuda")
    backend.load()
    assert devices(backend) == {"cuda"}
    awake, reserved_awake = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    backend.sleep()
    assert devices(backend) == {"cpu"}
    asleep = torch.cuda.memory_allocated()
    param_bytes = sum(p.numel() * p.element_size() for p in backend.model.parameters())
    assert awake - asleep >= param_bytes * 0.9
    # empty_cache handed the freed blocks back to the driver: a colocated trainer can have them
    assert torch.cuda.memory_reserved() < reserved_awake
    backend.wake_up()
    assert devices(backend) == {"cuda"}
    assert torch.cuda.memory_allocated() - asleep >= param_bytes * 0.9


@pytest.mark.cuda
@cuda
def test_cuda_scores_equal_cpu_scores(make_backend):
    records = [{"prompt": "q" * i, "response": "answer " * (3 * i)} for i in range(20)]
    cpu = make_backend(device="cpu").score(to_samples(records))
    gpu = make_backend(device="cuda", dtype="float32", token_budget=300).score(to_samples(records))
    assert [r.score for r in gpu] == pytest.approx([r.score for r in cpu], abs=1e-3)
