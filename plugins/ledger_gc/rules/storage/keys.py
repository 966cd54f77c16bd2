"""The S3 key layout of the store: build keys, and parse any key back (pure, no I/O).

The layout is fixed by DESIGN.md ("S3 layout")::

    <prefix>/<ml-name>/ledgers/<ledger id, 20 digits>/<block name>

* ``<prefix>`` is configuration and may be empty, in which case keys start directly
  with the managed-ledger name (no leading slash).
* ``<ml-name>`` is a managed-ledger name, ``<tenant>/<namespace>/persistent/<topic>``:
  exactly four non-empty segments, the third literally ``persistent`` (the only domain
  the store has). Segments hold what Pulsar puts in them: a tenant or namespace has
  ASCII letters, digits and ``- = : . _`` (Pulsar's ``NamedEntity`` rule); the topic is
  the URL-encoded local name (Java's ``URLEncoder``: letters, digits, ``. - * _``, ``+``
  for a space and ``%XX`` for every other byte). Every such name is used verbatim in
  znode paths, S3 keys, reports and metric labels.
* The ledger id is zero-padded to 20 digits so that keys sort in ledger order and one
  ledger's directory is never a string prefix of another's.
* **Block names** (our choice; DESIGN.md leaves it to us) are the id of the block's first
  entry, zero-padded to 20 digits, plus ``.blk``: ``00000000000000000042.blk`` holds
  entries 42, 43, ... up to the next block's first entry. The padding makes a plain
  LIST return a ledger's blocks in entry order, and the name alone says which block to
  open for an entry id, without reading any object.

Anything that does not match this exactly is *foreign*. Foreign keys are reported and
never deleted (DESIGN.md), so the parser is deliberately strict: a 19-digit id, an extra
path level, a ``.tmp`` file or a directory marker are all foreign. When in doubt, foreign:
a wrongly foreign key costs a line in a report, a wrongly accepted one could cost data
that is not ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: Width of the zero-padded ledger ids and first-entry ids in keys.
ID_WIDTH = 20
#: Ledger and entry ids are Java longs (BookKeeper, Pulsar): never negative in a key.
MAX_ID = 2**63 - 1
#: The directory, below a managed ledger, that holds its ledgers' data.
LEDGERS_DIR = "ledgers"
#: The suffix of a block object's name.
BLOCK_SUFFIX = ".blk"
#: The third segment of every managed-ledger name the store knows.
PERSISTENT_DOMAIN = "persistent"

# Reasons a key is foreign. Constants so that callers and tests can compare them.
OUTSIDE_PREFIX = "outside prefix"
NOT_ML_PATH = "not a managed-ledger path"
NOT_LEDGER_DATA = "not under the managed ledger's ledgers/ directory"
NO_LEDGER_ID = "no ledger id"
LEDGER_ID_NOT_20_DIGITS = "ledger id not 20 digits"
LEDGER_ID_OUT_OF_RANGE = "ledger id out of range"
NO_BLOCK_NAME = "no block name"
BLOCK_NAME_NOT_RECOGNISED = "block name not recognised"
ENTRY_ID_OUT_OF_RANGE = "first entry id out of range"
EXTRA_PATH_LEVEL = "extra path level"

# re.ASCII: without it \d and \w accept non-ASCII digits and letters ("٣", "²").
#: A tenant or namespace segment, and a topic segment, as regular expressions that Python
#: and Java (Spark) both read the same way (the orphan scan's classifier reuses them).
NAMED_ENTITY_PATTERN = r"[A-Za-z0-9=:._-]+"
ENCODED_TOPIC_PATTERN = r"(?:[A-Za-z0-9.*_+-]|%[0-9A-Fa-f]{2})+"
_NAMED_ENTITY = re.compile(NAMED_ENTITY_PATTERN, re.ASCII)
_ENCODED_TOPIC = re.compile(ENCODED_TOPIC_PATTERN, re.ASCII)
_ID = re.compile(rf"[0-9]{{{ID_WIDTH}}}", re.ASCII)
_BLOCK = re.compile(rf"([0-9]{{{ID_WIDTH}}}){re.escape(BLOCK_SUFFIX)}", re.ASCII)


@dataclass(frozen=True)
class ParsedKey:
    """What an object key is: a ledger block, or foreign (with the reason).

    For a block, ``ml_name``, ``ledger_id``, ``block`` and ``first_entry_id`` are set and
    ``reason`` is None. For a foreign key, ``reason`` says why; ``ml_name`` and
    ``ledger_id`` are filled in when the key lies inside a recognisable managed ledger
    (or ledger) directory, so that a report can say where the stray object is. They are
    context only: a foreign key never belongs to the store, whatever directory it is in.
    """

    key: str
    kind: Literal["block", "foreign"]
    ml_name: str | None = None
    ledger_id: int | None = None
    block: str | None = None
    first_entry_id: int | None = None
    reason: str | None = None

    @property
    def is_block(self) -> bool:
        """True when the key is one of the store's block objects."""
        return self.kind == "block"

    @property
    def is_foreign(self) -> bool:
        """True when the key does not belong to the store (never deleted)."""
        return self.kind == "foreign"


def validate_ml_name(name: str) -> str:
    """Return ``name`` if it is a valid managed-ledger name, else raise ValueError.

    Valid: ``<tenant>/<namespace>/persistent/<topic>``, four non-empty segments as Pulsar
    names them (see the module docstring); ``.`` and ``..`` alone are refused: they would
    read as relative paths to every tool that treats keys as paths.
    """
    if not isinstance(name, str):
        raise ValueError(f"managed-ledger name must be a string, got {type(name).__name__}")
    segments = name.split("/")
    if len(segments) != 4:
        raise ValueError(
            f"managed-ledger name {name!r} has {len(segments)} segment(s); expected "
            "tenant/namespace/persistent/topic"
        )
    for position, segment in zip(("tenant", "namespace", "domain", "topic"), segments, strict=True):
        if not segment:
            raise ValueError(f"managed-ledger name {name!r} has an empty {position}")
        if segment in (".", ".."):
            raise ValueError(f"managed-ledger name {name!r}: {position} may not be {segment!r}")
        if position == "topic":
            if not _ENCODED_TOPIC.fullmatch(segment):
                raise ValueError(
                    f"managed-ledger name {name!r}: topic {segment!r} is not a URL-encoded "
                    "name (ASCII letters, digits, . - * _ +, and %XX for other bytes)"
                )
        elif not _NAMED_ENTITY.fullmatch(segment):
            raise ValueError(
                f"managed-ledger name {name!r}: {position} {segment!r} has characters other "
                "than ASCII letters, digits and - = : . _"
            )
    if segments[2] != PERSISTENT_DOMAIN:
        raise ValueError(
            f"managed-ledger name {name!r}: third segment is {segments[2]!r}, expected "
            f"{PERSISTENT_DOMAIN!r}"
        )
    return name


def namespace_of(ml_name: str) -> str:
    """The ``tenant/namespace`` a managed ledger belongs to (validates the name)."""
    tenant, namespace, _, _ = validate_ml_name(ml_name).split("/")
    return f"{tenant}/{namespace}"


def ml_dir(prefix: str, ml_name: str) -> str:
    """The key prefix of everything a managed ledger owns: ``<prefix>/<ml-name>/``.

    It ends with "/" so that listing it never matches another topic whose name merely
    starts with this one (``topic`` vs ``topic-2``).
    """
    return f"{_base(prefix)}{validate_ml_name(ml_name)}/"


def ledger_dir(prefix: str, ml_name: str, ledger_id: int) -> str:
    """The key prefix of one ledger's blocks: ``<prefix>/<ml-name>/ledgers/<id:020d>/``."""
    return f"{ml_dir(prefix, ml_name)}{LEDGERS_DIR}/{_format_id(ledger_id, 'ledger id')}/"


def block_name(first_entry_id: int) -> str:
    """The name of the block whose first entry is ``first_entry_id``: ``<id:020d>.blk``."""
    return f"{_format_id(first_entry_id, 'first entry id')}{BLOCK_SUFFIX}"


def block_key(prefix: str, ml_name: str, ledger_id: int, first_entry_id: int) -> str:
    """The key of a block object (see the module docstring for the naming)."""
    return f"{ledger_dir(prefix, ml_name, ledger_id)}{block_name(first_entry_id)}"


def parse_key(prefix: str, key: str) -> ParsedKey:
    """Classify an object key: a block of the store, or foreign with the reason.

    A key outside ``prefix`` is reported as foreign too ("outside prefix"); the caller
    decides whether it cares. Never raises for any string ``key``.
    """
    base = _base(prefix)
    if not key.startswith(base):
        return ParsedKey(key, "foreign", reason=OUTSIDE_PREFIX)
    parts = key[len(base) :].split("/")
    if len(parts) < 4:
        return ParsedKey(key, "foreign", reason=NOT_ML_PATH)
    ml_name = "/".join(parts[:4])
    try:
        validate_ml_name(ml_name)
    except ValueError:
        return ParsedKey(key, "foreign", reason=NOT_ML_PATH)

    def foreign(reason: str, ledger_id: int | None = None) -> ParsedKey:
        return ParsedKey(key, "foreign", ml_name=ml_name, ledger_id=ledger_id, reason=reason)

    if len(parts) == 4 or parts[4] != LEDGERS_DIR:
        return foreign(NOT_LEDGER_DATA)
    if len(parts) == 5 or parts[5] == "":
        return foreign(NO_LEDGER_ID)
    if not _ID.fullmatch(parts[5]):
        return foreign(LEDGER_ID_NOT_20_DIGITS)
    ledger_id = int(parts[5])
    if ledger_id > MAX_ID:
        return foreign(LEDGER_ID_OUT_OF_RANGE)
    if len(parts) == 6 or parts[6] == "":
        # "<...>/ledgers/<id>" as an object, or the "<...>/<id>/" directory marker that
        # some tools create: neither is a block.
        return foreign(EXTRA_PATH_LEVEL if len(parts) > 7 else NO_BLOCK_NAME, ledger_id)
    if len(parts) > 7:
        return foreign(EXTRA_PATH_LEVEL, ledger_id)
    match = _BLOCK.fullmatch(parts[6])
    if not match:
        return foreign(BLOCK_NAME_NOT_RECOGNISED, ledger_id)
    first_entry_id = int(match.group(1))
    if first_entry_id > MAX_ID:
        return foreign(ENTRY_ID_OUT_OF_RANGE, ledger_id)
    return ParsedKey(
        key,
        "block",
        ml_name=ml_name,
        ledger_id=ledger_id,
        block=parts[6],
        first_entry_id=first_entry_id,
    )


def _base(prefix: str) -> str:
    """``"prefix/"`` for a non-empty prefix, ``""`` for none (no leading slash then).

    Surrounding slashes are dropped, as ``Settings`` does, so "ledgers", "/ledgers/" and
    "ledgers/" all mean the same prefix.
    """
    stripped = prefix.strip("/")
    return f"{stripped}/" if stripped else ""


def _format_id(value: int, what: str) -> str:
    # bool is an int subclass; True as a ledger id is always a bug.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_ID:
        raise ValueError(f"{what} {value} is outside 0..{MAX_ID}")
    return f"{value:0{ID_WIDTH}d}"
