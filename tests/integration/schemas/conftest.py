"""The schema registry of the schema tests: Apicurio Registry (Confluent's API under ``ccompat``), started once
per session on loopback. Without its files the tests skip saying which command fetches them; with
FSM_REQUIRE_REGISTRY=1 (CI) they fail instead."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fsm_consumer.broker import RegistryNotFoundError, SchemaRegistry


@pytest.fixture(scope="session")
def registry() -> Iterator[SchemaRegistry]:
    try:
        registry = SchemaRegistry()
        registry.start()
    except RegistryNotFoundError as exc:
        if os.environ.get("FSM_REQUIRE_REGISTRY") == "1":
            pytest.fail(f"a schema registry is required here (FSM_REQUIRE_REGISTRY=1) but: {exc}")
        pytest.skip(f"no schema registry to test against: {exc}")
    try:
        yield registry
    finally:
        registry.stop()
