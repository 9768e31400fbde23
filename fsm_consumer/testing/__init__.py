"""Test aids that ship with the package: the fault scenarios of issue 25.

``_member_process`` (a member in its own process, its consumer writing a history; a poll loop or a
``ParallelConsumer``), ``_processes`` (starting, watching and stopping such processes), ``_produce`` (the
topic and a steady producer), ``_freeze_run`` (members frozen past their session again and again),
``_churn_run`` (members killed with SIGKILL and replaced) and ``_rereads`` (the re-reads the rules allow);
each run ends with ``fsm_consumer.history``'s checker. They are run by the group tests, by
``tools/group-freeze-check`` and by ``tools/faults``; they are not imported here because a run needs
confluent-kafka, a dev dependency."""

__all__: list[str] = []
