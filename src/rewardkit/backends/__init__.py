"""Built-in RM backends, registered as an ordinary plugin.

They are registered lazily (``"module:Class"``) so that loading plugins imports neither torch
nor transformers; the class is imported when a config asks for it.
"""

from rewardkit.hookspecs import hookimpl


@hookimpl
def register_rm_backends(register):
    """Register the built-in reward-model backends."""
    register("rewardkit.backends.generative:GenerativeRM", name="generative")
    register("rewardkit.backends.remote:RemoteRM", name="remote")
    register("rewardkit.backends.discriminative:DiscriminativeRM", name="discriminative")
    register("rewardkit.backends.served_classifier:ServedClassifierRM", name="served-classifier")
