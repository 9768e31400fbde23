"""Key-ordered parallel processing inside one consumer (seed 004's parallelising factor).

``ParallelConsumer(consumer, handler, parallelism=16, ordering="key")`` hands the consumer's records to
worker threads (or one event loop for an ``async def`` handler): records of one key one at a time in
offset order, different keys at once. Committed offsets never pass a record that is not done; records
completed beyond that gap travel in the commit metadata (``PartitionProgress``), so a restart or a new
owner does not handle them again.
"""

from ._errors import HandlerFailedError
from ._parallel import ParallelConsumer
from ._progress import METADATA_LIMIT, PartitionProgress

__all__ = ["HandlerFailedError", "METADATA_LIMIT", "ParallelConsumer", "PartitionProgress"]
