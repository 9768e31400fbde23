"""One error policy: how every failure is handled (the table), how long to wait before trying again
(per-key backoff), and what the user is told (the public exception, cause chained)."""

from ._backoff import Backoffs
from ._table import Action, broker_lacks, classify, describe, keeps_coordinator, public_error

__all__ = ["Action", "Backoffs", "broker_lacks", "classify", "describe", "keeps_coordinator", "public_error"]
