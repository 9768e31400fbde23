"""Which registry subject holds a topic's reader schema: Confluent's default TopicNameStrategy."""

from __future__ import annotations


def subject_for(topic: str, subject: str | None, is_key: bool) -> str:
    return subject if subject else f"{topic}-{'key' if is_key else 'value'}"
