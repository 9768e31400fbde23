"""Build hook: compile the optional C modules, fsm_consumer/fetch/_cdecode.c (the record decoder),
fsm_consumer/fetch/_cwalk.c (a partition's batches walked in one call), fsm_consumer/transport/_cbuffer.c
(a frame body's buffer, not zeroed first) and fsm_consumer/schemas/_cavro.c (Avro values into Arrow columns).

Optional: without a C compiler (or Python's headers) the build goes on with a warning and the package
is pure Python (fetch/_decode_v2.py's loop decodes every record, bytearray() holds each frame, fastavro
types Avro columns; the same results, slower). The extensions are built in place, next to their sources,
so an editable install and a checkout on PYTHONPATH import them too, and are added to the wheel as
artifacts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULES = {  # module: source
    "fsm_consumer.fetch._cdecode": "fsm_consumer/fetch/_cdecode.c",
    "fsm_consumer.fetch._cwalk": "fsm_consumer/fetch/_cwalk.c",
    "fsm_consumer.transport._cbuffer": "fsm_consumer/transport/_cbuffer.c",
    "fsm_consumer.schemas._cavro": "fsm_consumer/schemas/_cavro.c",
}


class CompiledModules(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        built = _build_in_place(Path(self.root))
        if not built:
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"] += [str(path.relative_to(self.root)) for path in built]


def _build_in_place(root: Path) -> list[Path]:
    try:
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext

        modules = [Extension(name, [source], extra_compile_args=["-O2"]) for name, source in MODULES.items()]
        dist = Distribution({"ext_modules": modules})
        dist.src_root = str(root)
        cmd = build_ext(dist)
        cmd.inplace = True
        cmd.ensure_finalized()
        cmd.run()
        return [root / cmd.get_ext_filename(name) for name in MODULES]
    except Exception as exc:  # noqa: BLE001 - any failure: the pure-Python code serves
        print(f"fsm_consumer: the C modules were not built ({exc}); the pure-Python code is used", file=sys.stderr)
        return []
