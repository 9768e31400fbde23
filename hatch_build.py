"""Build hook: compile fsm_consumer/fetch/_cdecode.c, the optional compiled record decoder.

Optional: without a C compiler (or Python's headers) the build goes on with a warning and the package
is pure Python (fetch/_decode_v2.py's loop decodes every record; the same records, slower). The
extension is built in place, next to its source, so an editable install and a checkout on PYTHONPATH
import it too, and is added to the wheel as an artifact.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "fsm_consumer/fetch/_cdecode.c"
MODULE = "fsm_consumer.fetch._cdecode"


class CompiledDecoder(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        built = _build_in_place(Path(self.root))
        if built is None:
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].append(str(built.relative_to(self.root)))


def _build_in_place(root: Path) -> Path | None:
    try:
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext

        dist = Distribution({"ext_modules": [Extension(MODULE, [SOURCE], extra_compile_args=["-O2"])]})
        dist.src_root = str(root)
        cmd = build_ext(dist)
        cmd.inplace = True
        cmd.ensure_finalized()
        cmd.run()
        return root / cmd.get_ext_filename(MODULE)
    except Exception as exc:  # noqa: BLE001 - any failure: the pure-Python decoder serves
        print(f"fsm_consumer: the compiled decoder was not built ({exc}); the pure-Python one is used", file=sys.stderr)
        return None
