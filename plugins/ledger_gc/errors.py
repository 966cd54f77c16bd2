"""The errors ledger-gc raises.

Each error names the thing that failed and, where there is one, the fix. A GC must never
mistake "I could not read" for "there is nothing": every read failure is an exception,
never an empty result.
"""

from __future__ import annotations


class LedgerGcError(Exception):
    """Base of every error ledger-gc raises on purpose."""


class ConfigError(LedgerGcError):
    """A setting is missing or malformed."""


# --- metadata (ZooKeeper) -------------------------------------------------------------


class MetadataError(LedgerGcError):
    """The metadata store failed."""


class MetadataUnavailableError(MetadataError):
    """ZooKeeper could not be reached, or the session was lost mid-operation.

    Callers must treat this as "unknown", never as "empty": no decision to delete may be
    taken from a read that raised it.
    """


class MetadataAccessError(MetadataError):
    """ZooKeeper refused an operation (``NoAuth``): the identity ledger-gc connects as
    lacks a permission on a znode. The message names the identity, the permission, the
    znode and who has it; ``permission`` and ``znode`` say the same for callers."""

    def __init__(
        self, message: str, *, identity: str = "", permission: str = "", znode: str = ""
    ) -> None:
        super().__init__(message)
        self.identity = identity
        self.permission = permission
        self.znode = znode


class MetadataFormatError(MetadataError):
    """A znode's bytes are not a valid record (corrupt, truncated, wrong type)."""


class UnsupportedCompressionError(MetadataFormatError):
    """A record uses a compression codec whose library is not installed."""


class RecordTooLargeError(MetadataError):
    """A record would not fit in one ZooKeeper write, even compressed; nothing was sent."""


class ConcurrentUpdateError(MetadataError):
    """A compare-and-set kept losing to other writers and ran out of retries."""


class ManagedLedgerNotFoundError(MetadataError):
    """The managed ledger's znode does not exist."""


class CursorNotFoundError(MetadataError):
    """The cursor's znode does not exist."""


class AlreadyExistsError(MetadataError):
    """A znode that was to be created exists already."""


# --- storage (S3) ---------------------------------------------------------------------


class StorageError(LedgerGcError):
    """The object store failed."""


class BucketNotFoundError(StorageError):
    """The configured bucket does not exist or is not accessible."""


class BlockFormatError(StorageError):
    """A block object is corrupt: bad magic, bad checksum, truncated."""


class DeleteFailedError(StorageError):
    """Some keys of a bulk delete were not deleted; ``failed`` maps key to reason."""

    def __init__(self, message: str, failed: dict[str, str]) -> None:
        super().__init__(message)
        self.failed = failed


# --- managed ledger -------------------------------------------------------------------


class ManagedLedgerError(LedgerGcError):
    """A managed-ledger operation failed."""


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger (or cursor) was closed; open it again to use it."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another writer took over this managed ledger; this handle may no longer write.

    Pulsar fences the old owner the same way: its next metadata update finds that the
    current ledger is no longer its own.
    """


class InvalidPositionError(ManagedLedgerError):
    """A position is outside the managed ledger's entries."""


# --- safety ---------------------------------------------------------------------------


class StoppedError(LedgerGcError):
    """The run was asked to stop (SIGTERM) and stopped between two units of work."""


class AuditUnavailableError(LedgerGcError):
    """The audit log cannot be written; no deletion is made without its record."""


class SafetyRefusalError(LedgerGcError):
    """A safety guard refused a destructive run; the message says why and how to force."""
