"""Three-phase orphan removal (Kafka KIP-370's design over DESIGN.md's store).

``cycle.run_orphan_cycle(settings, ...)`` runs one cycle (survey, initialize and
correct, delete, report) and returns its ``CycleReport`` (``report.py``); ``cycle.py``
has each step for the DAG. Where the decisions are made: ``rules/orphans/`` (what an
object is, when not to act, registration, correction, deletion).

This init imports nothing: importing one module of the engine must not import the
whole engine (import what you use from the module that defines it).
"""
