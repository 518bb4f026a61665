"""rewardkit plugin: structured-output rewards.

Scorers (see :mod:`rewardkit_jsonschema.scorers`):

* ``json_valid``: 1.0 when the response is JSON (bare, or inside a fenced code block), else 0.0.
  Data source ``json_valid``.
* ``json_schema``: how well the response's JSON matches the JSON Schema given as ground truth;
  1.0 only when fully valid, partial credit per top-level property otherwise. Data sources
  ``json_schema`` and ``structured_output``.
"""

from rewardkit import hookimpl
from rewardkit_jsonschema.scorers import extract_json, json_schema, json_valid

__version__ = "0.1.0"
__all__ = ["extract_json", "json_schema", "json_valid", "register_scorers", "__version__"]


@hookimpl
def register_scorers(register):
    """Register ``json_valid`` and ``json_schema``."""
    register(json_valid, name="json_valid", data_sources=["json_valid"])
    register(json_schema, name="json_schema", data_sources=["json_schema", "structured_output"])
