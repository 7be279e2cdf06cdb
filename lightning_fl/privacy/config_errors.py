"""One-line messages for a mistyped ``model.dp`` (what jsonargparse reports at length).

``model.dp`` and its ``adaptive`` entry are plain option groups; jsonargparse checks their option
names and types while parsing, before any of our code runs, and reports a mistake as a multi-line
account of every type it tried. :func:`dp_config_error` turns it into one line naming the field and,
for an unknown option, the options there are.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

from lightning_fl.privacy.config import DifferentialPrivacy
from lightning_fl.privacy.stages import AdaptiveClipping

__all__ = ["dp_config_error"]

# Phrases of jsonargparse 4.53 (pinned in requirements.lock); tests/privacy/test_dp_runs.py covers them.
_PARSER_KEY = re.compile(r'Parser key "([^"]+)":')
_UNKNOWN_OPTION = re.compile(r"Option '([^']+)' is not accepted")
_OPTIONS = {
    "model.dp": [p for p in inspect.signature(DifferentialPrivacy).parameters if p != "self"],
    "model.dp.adaptive": [f.name for f in dataclasses.fields(AdaptiveClipping)],
}


def dp_config_error(report: str) -> str | None:
    """The one-line message for jsonargparse's parse-error ``report`` about ``model.dp``, else ``None``.

    Example:
        >>> dp_config_error('Parser key "model.dp":\\n  - Problem with given class_path '
        ...                 "'lightning_fl.privacy.DifferentialPrivacy':\\n        Option 'z' is not accepted")
        ... # doctest: +ELLIPSIS
        'model.dp.z is not an option of model.dp; its options are: noise_multiplier, target_epsilon, ...'
    """
    keys = _PARSER_KEY.findall(report)
    if not keys or keys[0] != "model.dp":
        return None
    field = ".".join(keys)
    if option := _UNKNOWN_OPTION.search(report):
        options = ", ".join(_OPTIONS.get(field, []))
        return f"{field}.{option.group(1)} is not an option of {field}; its options are: {options}"
    reasons = [line.strip(" -") for line in report.splitlines()
               if line.strip() and not line.strip().startswith(("Parser key", "Does not validate", "Subtypes",
                                                                  "Errors:", "Given value", "- Expected a <class 'NoneType'>",
                                                                  "- Problem with given class_path"))]
    return f"{field}: {reasons[0] if reasons else 'invalid value'}"
