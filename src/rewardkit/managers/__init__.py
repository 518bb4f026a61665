"""Built-in reward managers, registered as an ordinary plugin."""

from rewardkit.hookspecs import hookimpl


@hookimpl
def register_reward_managers(register):
    """Register the built-in reward managers."""
    register("rewardkit.managers.naive:NaiveRewardManager", name="naive")
    register("rewardkit.managers.batch:BatchRewardManager", name="batch")
    register("rewardkit.managers.dapo:DAPORewardManager", name="dapo")
    register("rewardkit.managers.composite:CompositeRewardManager", name="composite")
