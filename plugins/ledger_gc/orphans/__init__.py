"""Three-phase orphan removal (Kafka KIP-370's design over DESIGN.md's store).

``run_orphan_cycle(settings, ...)`` runs one cycle (snapshot, scan, diff, initialize and
correct, delete, report) and returns its ``CycleReport``; ``cycle.py`` has each step
for the DAG. Where the decisions are made: ``classify.py`` (what an object is),
``guards.py`` (when not to act), ``phases.py`` (registration, correction, deletion).
"""

from ledger_gc.orphans.cycle import OrphanCycleError, run_orphan_cycle
from ledger_gc.orphans.options import CycleOptions
from ledger_gc.orphans.report import CycleReport

__all__ = ["CycleOptions", "CycleReport", "OrphanCycleError", "run_orphan_cycle"]
