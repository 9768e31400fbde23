"""The transport unit tests' fixtures; ``fake_broker`` (the module) is importable in importlib mode."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_broker import FakeBroker, ScriptedPeer  # noqa: E402  (after the path insertion)

from fsm_consumer.transport import KafkaTransport  # noqa: E402


@pytest.fixture
def fake_broker() -> Iterator[Callable[..., FakeBroker]]:
    made: list[FakeBroker] = []

    def make(*args: Any, **kwargs: Any) -> FakeBroker:
        made.append(FakeBroker(*args, **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.close()


@pytest.fixture
def transports() -> Iterator[Callable[..., KafkaTransport]]:
    made: list[KafkaTransport] = []

    def make(config: dict[str, Any], **kwargs: Any) -> KafkaTransport:
        made.append(KafkaTransport(config, **kwargs))
        return made[-1]

    yield make
    for t in made:
        t.close()


@pytest.fixture
def scripted_peer() -> Iterator[Callable[..., ScriptedPeer]]:
    made: list[ScriptedPeer] = []

    def make(script: Callable[[ScriptedPeer, Any], None]) -> ScriptedPeer:
        made.append(ScriptedPeer(script))
        return made[-1]

    yield make
    for peer in made:
        peer.close()
