"""Built-in scorers, registered as an ordinary plugin.

Scorer modules import their heavy dependencies (math-verify...) inside the functions, so
registering them costs nothing at start-up.
"""

from rewardkit.hookspecs import hookimpl


@hookimpl
def register_scorers(register):
    """Register the built-in rule-based scorers with the data sources verl users already use."""
