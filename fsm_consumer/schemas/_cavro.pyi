# The compiled Avro column decoder's signatures (schemas/_cavro.c): see _avro_columns.compiled_column.
from typing import Any

class Columns:
    def __init__(self, spec: tuple[tuple[int, tuple[int, ...]], ...]) -> None: ...
    def decode(
        self,
        program: Any,
        consts: tuple[bytes | None, ...],
        schema_id: int,
        valid: Any,
        offsets: Any,
        data: Any,
        array_offset: int,
        start: int,
        stop: int,
    ) -> tuple[int, int, Any]: ...
    def append_null(self) -> None: ...
    def finish(self) -> list[tuple[int, int, bytes | None, bytes, bytes]]: ...
