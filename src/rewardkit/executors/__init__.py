"""Built-in executors, registered as an ordinary plugin."""

from rewardkit.hookspecs import hookimpl


@hookimpl
def register_executors(register):
    """Register the built-in executors."""
    register("rewardkit.executors.inline:InlineExecutor", name="inline")
    register("rewardkit.executors.process:ProcessExecutor", name="process")
    register("rewardkit.executors.ray:RayExecutor", name="ray")
    register("rewardkit.executors.auto:AutoExecutor", name="auto")
