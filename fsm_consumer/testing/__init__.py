"""Test aids that ship with the package: the frozen-members scenario.

``_member_process`` (a member in its own process, its consumer writing a history) and ``_freeze_run``
(members of one group, frozen past their session again and again, then ``fsm_consumer.history``'s checker)
are run by the group tests and by ``tools/group-freeze-check``; they are not imported here because the run
needs confluent-kafka, a dev dependency."""

__all__: list[str] = []
