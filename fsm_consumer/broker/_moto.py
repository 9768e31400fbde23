"""A throwaway S3 endpoint (moto) on 127.0.0.1 for Tansu's ``s3://`` storage engine.

moto runs as a separate process, not ``ThreadedMotoServer``: moto's backends are
process-global, so an in-process server would share (and be reset by) any
``mock_aws`` used elsewhere in the same test run.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from ._errors import S3StorageError
from ._logtail import tail
from ._ports import LOOPBACK, free_loopback_port
from ._process import GuardedProcess

# moto accepts any credentials; fixed dummies make the broker's env explicit.
_ACCESS_KEY = "fsm-consumer-local"
_SECRET_KEY = "fsm-consumer-local-secret"
_REGION = "us-east-1"

# Bypass any *_PROXY settings: this endpoint is always on loopback.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LocalS3:
    """A moto S3 server with one bucket, started on construction."""

    def __init__(self, bucket: str, *, log_dir: Path, start_timeout: float = 20.0) -> None:
        self.bucket = bucket
        self.port = free_loopback_port()
        self.log_path = log_dir / "moto.log"
        self._process = GuardedProcess(
            [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)], log_path=self.log_path
        )
        try:
            self._create_bucket(start_timeout)
        except BaseException:
            self._process.stop()
            raise

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    def tansu_env(self) -> dict[str, str]:
        """Environment Tansu 0.6 (Rust ``object_store``) needs to use this endpoint.

        Found by experiment: without AWS_ALLOW_HTTP every request fails with
        ``BadScheme``; without credentials object_store falls back to the EC2
        metadata service (169.254.169.254); region is optional (us-east-1).
        AWS_ENDPOINT_URL works as well as AWS_ENDPOINT.
        """
        return {
            "AWS_ACCESS_KEY_ID": _ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": _SECRET_KEY,
            "AWS_DEFAULT_REGION": _REGION,
            "AWS_ENDPOINT": self.endpoint_url,
            "AWS_ALLOW_HTTP": "true",
        }

    def list_keys(self, prefix: str = "") -> list[str]:
        """Object keys in the bucket (first 1000), e.g. to see what Tansu wrote."""
        url = f"{self.endpoint_url}/{self.bucket}?list-type=2&prefix={urllib.parse.quote(prefix)}"
        with _opener.open(url, timeout=5) as response:
            root = ET.fromstring(response.read())
        return [el.text or "" for el in root.iter() if el.tag.endswith("}Key") or el.tag == "Key"]

    def stop(self) -> None:
        self._process.stop()

    def _create_bucket(self, timeout: float) -> None:
        # Creating the bucket doubles as the readiness probe: moto needs ~0.6 s to import.
        request = urllib.request.Request(f"{self.endpoint_url}/{self.bucket}", method="PUT")
        deadline = time.monotonic() + timeout
        while True:
            try:
                with _opener.open(request, timeout=1.0):
                    return
            except urllib.error.HTTPError as exc:
                raise S3StorageError(
                    f"moto refused to create bucket {self.bucket!r}: HTTP {exc.code} {exc.read()[:300]!r}"
                ) from exc
            except OSError as exc:  # not listening yet
                if not self._process.alive():
                    raise S3StorageError(
                        f"moto server exited with code {self._process.returncode}; "
                        f"end of its log:\n{tail(self.log_path)}"
                    ) from exc
                if time.monotonic() > deadline:
                    raise S3StorageError(
                        f"moto server on {self.endpoint_url} not ready after {timeout:.1f}s; "
                        f"end of its log:\n{tail(self.log_path)}"
                    ) from exc
                time.sleep(0.02)
