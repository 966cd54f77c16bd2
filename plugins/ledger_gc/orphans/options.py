"""What one orphan run was asked to do, apart from the settings it runs with.

Its own module (not ``cycle``'s) because the report, the Airflow tasks and the CLI all
build or read it, and the cycle imports the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger_gc.rules.orphans.guards import FORCEABLE, METADATA_READ, STALE_RUN

if TYPE_CHECKING:
    from ledger_gc.config.policy import Policy

#: What ``force`` does: ``ledgergc orphans --force``'s help and the DAG's ``force`` param.
FORCE_HELP = (
    f"go past every safety guard's refusal but {METADATA_READ} and {STALE_RUN}: "
    f"{', '.join(FORCEABLE)} (a forced run still deletes only what outlives the grace "
    "window, retention and the live re-check)"
)


@dataclass(frozen=True)
class CycleOptions:
    """What a run was asked to do (CLI flags, DAG params)."""

    dry_run: bool | None = None  # None: dry unless LEDGERGC_DELETE_ENABLED
    force: bool = False
    inventory: str | None = None
    offload_inventory: str | None = None

    def deleting(self, policy: Policy) -> bool:
        """Deletion needs the setting on and no dry run (DESIGN.md: off until configured)."""
        return policy.delete_enabled and not self.dry_run
