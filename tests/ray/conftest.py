"""Ray for tests/ray: started once per session (2 logical CPUs, 2 logical GPUs), shut down at the end.

Ray worker processes inherit ``PYTHONPATH`` from the raylet, which inherits it from this process
while ``ray.init`` runs: that is how the test plugin (a real ``rewardkit`` entry point in a
``.dist-info``) becomes visible inside the workers without changing this process's plugins.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

HERE = Path(__file__).resolve().parent
SCORERS = str(HERE / "ray_scorers.py")


def _write_plugin_dist(root: Path) -> None:
    dist = root / "rk_ray_testplugin-0.0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rk-ray-testplugin\nVersion: 0.0.1\n")
    # [verl.plugins] mirrors rewardkit's own pyproject entry point, so Ray workers register
    # rewardkit's verl manager on `import verl` even where the installed rewardkit predates it.
    (dist / "entry_points.txt").write_text(
        "[rewardkit]\nrk_ray_test = rk_ray_testplugin\n\n"
        "[verl.plugins]\nrewardkit = rewardkit.integrations.verl_plugin\n"
    )


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """A local Ray for the whole session; workers see the test plugin."""
    if ray.is_initialized():
        yield ray
        return
    site = tmp_path_factory.mktemp("rk_ray_site")
    _write_plugin_dist(site)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(HERE / "_plugin"), old) if p)
    try:
        ray.init(
            num_cpus=2,
            num_gpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            ignore_reinit_error=True,
        )
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def test_backend(ray_cluster) -> str:
    """The test RM backend's name, after checking that Ray workers discover the test plugin
    (they cannot when another folder started Ray earlier in the session without it)."""

    @ray_cluster.remote(num_cpus=0)
    def discovered() -> bool:
        from rewardkit.plugins import get_registries

        return "rk-test-length" in get_registries().backends

    if not ray_cluster.get(discovered.remote(), timeout=120):
        pytest.skip("Ray was started before tests/ray could put its test plugin on the workers' path")
    return "rk-test-length"


@pytest.fixture(scope="session")
def scorers_path() -> str:
    """Absolute path of the test scorers file."""
    return SCORERS


@pytest.fixture(scope="session")
def crf():
    """``crf(name, **kwargs)``: a custom_reward_function config section for the test scorers file."""

    def section(name: str = "compute_score", **kwargs) -> dict:
        return {"path": SCORERS, "name": name, "reward_kwargs": kwargs}

    return section
