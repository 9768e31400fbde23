"""Values of the fsm_kafka options: the error that names an option, and the parsers of its plain values
(booleans, integers, durations as Spark writes them, JSON)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Spark's Utils.timeStringAsMs units
_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME = re.compile(r"^(\d+)\s*([a-z]*)$")


class KafkaOptionError(ValueError):
    """A read option is missing, unknown or has a value that is not allowed; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"fsm_kafka option '{option}': {message}")
        self.option = option


def _bool(option: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise KafkaOptionError(option, f"{value!r} is not a boolean (true or false)")
    return text == "true"


def _long(option: str, value: str, *, minimum: int, what: str = "an integer") -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise KafkaOptionError(option, f"{value!r} is not {what}") from None
    if number < minimum:
        raise KafkaOptionError(option, f"{value!r} must be >= {minimum}")
    return number


def _time_ms(option: str, value: str) -> int:
    """A duration as Spark's ``Utils.timeStringAsMs`` reads it: a number and a unit (us, ms, s, m/min, h,
    d); a bare number is milliseconds."""
    match = _TIME.match(str(value).strip().lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS):
        raise KafkaOptionError(option, f"{value!r} is not a duration (e.g. 30s, 5m, 1h, or milliseconds)")
    return math.ceil(int(match.group(1)) * _TIME_UNITS.get(match.group(2) or "ms", 1))


def _json(option: str, value: str, example: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise KafkaOptionError(option, f"malformed JSON ({exc}): expected e.g. {example}, got {value!r}") from None
