"""Where BookKeeper keeps a ledger's metadata znode (pure).

BookKeeper's ledger managers (``HierarchicalLedgerManager``, the default of Pulsar, and
``LongHierarchicalLedgerManager``, ``FlatLedgerManager``) name a ledger's znode from its
id alone, below the ledgers root (``LEDGERGC_BK_LEDGERS_ROOT``, default ``/ledgers``):

* hierarchical: an id below 2^31-1 as ``%010d`` split 2-4-4 (``00/0012/L3456``), a larger
  one as ``%019d`` split 3-4-4-4-4 (``000/0000/0042/9496/L7296``);
* long hierarchical: every id split 3-4-4-4-4;
* flat: ``L%010d`` directly below the root.

The reverse (``ledger_id_of``) accepts a path only when the id's own path is exactly that
path: a znode that merely looks like a ledger (``L12`` where ``L0000000012`` belongs, a
short-layout name for a long id) is *not a ledger* and is never deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

HIERARCHICAL = "hierarchical"
LONG_HIERARCHICAL = "longhierarchical"
FLAT = "flat"
LAYOUTS = (HIERARCHICAL, LONG_HIERARCHICAL, FLAT)

#: Ids below this go to the short (2-4-4) hierarchical path (Java's Integer.MAX_VALUE).
SHORT_ID_LIMIT = 2**31 - 1
MAX_LEDGER_ID = 2**63 - 1

#: Children of the ledgers root (or, for the flat layout, its znodes) that are
#: BookKeeper's own bookkeeping, never ledgers.
SPECIAL_ZNODES = frozenset(
    {
        "available",
        "cookies",
        "LAYOUT",
        "INSTANCEID",
        "underreplication",
        "idgen",
        "idgen-long",
    }
)


def is_special(name: str) -> bool:
    """BookKeeper's own znodes below the root (``ID-*`` are the flat id generator's)."""
    return name in SPECIAL_ZNODES or name.startswith("ID-")


def relative_path(ledger_id: int, layout: str) -> str:
    """The ledger's znode path below the root, without a leading ``/``."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"{ledger_id} is not a BookKeeper ledger id")
    if layout == FLAT:
        return f"L{ledger_id:010d}"
    if layout == HIERARCHICAL and ledger_id < SHORT_ID_LIMIT:
        digits = f"{ledger_id:010d}"
        return f"{digits[0:2]}/{digits[2:6]}/L{digits[6:10]}"
    if layout in (HIERARCHICAL, LONG_HIERARCHICAL):
        digits = f"{ledger_id:019d}"
        return f"{digits[0:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:19]}"
    raise ValueError(f"unknown BookKeeper ledger layout {layout!r}")


def ledger_path(root: str, ledger_id: int, layout: str) -> str:
    """The ledger's znode: ``<root>/<relative path>``."""
    return f"{root.rstrip('/')}/{relative_path(ledger_id, layout)}"


def ledger_id_of(relative: str, layout: str) -> int | None:
    """The id whose znode is exactly ``relative`` (below the root), else None."""
    parts = relative.split("/")
    leaf = parts[-1]
    if not leaf.startswith("L"):
        return None
    digits = "".join(parts[:-1]) + leaf[1:]
    if not digits.isascii() or not digits.isdigit():
        return None
    ledger_id = int(digits)
    if ledger_id > MAX_LEDGER_ID:
        return None
    try:
        return ledger_id if relative_path(ledger_id, layout) == relative else None
    except ValueError:
        return None


#: Ledgers per leaf directory of the hierarchical layouts (the leaf's 4 digits).
LEAF_SPAN = 10_000
#: A leaf directory's children, one per line, when every one is a ledger's name.
_LEAF_NAMES = re.compile(r"(?:L[0-9]{4}\n)*L[0-9]{4}", re.ASCII)


def leaf_ledger_ids(
    directory: str, names: Iterable[str], layout: str
) -> tuple[list[int], list[str]]:
    """The ledger ids of a leaf directory's children (``directory`` below the root,
    e.g. ``00/0012``), and the names that are not ledgers there: what ``ledger_id_of``
    says of each ``<directory>/<name>``, the common case computed from the directory's
    first id (a million names a survey)."""
    digits = "".join(directory.split("/"))
    ids: list[int] = []
    odd: list[str] = []
    if not (digits.isascii() and digits.isdigit()):
        return ids, list(names)
    base = int(digits) * LEAF_SPAN
    last = base + LEAF_SPAN - 1
    try:
        # Which path an id takes depends only on its size, so when the first and the
        # last id of the span both belong in this directory, every id of it does.
        whole = (
            last <= MAX_LEDGER_ID
            and relative_path(base, layout).rpartition("/")[0] == directory
            and relative_path(last, layout).rpartition("/")[0] == directory
        )
    except ValueError:
        whole = False
    names = list(names)
    if whole and _LEAF_NAMES.fullmatch("\n".join(names)):
        # Every name is ``L`` and four digits (the usual directory): checked in one pass.
        return [base + int(name[1:]) for name in names], odd
    for name in names:
        if whole:
            number = name[1:]
            if len(name) == 5 and name[0] == "L" and number.isascii() and number.isdigit():
                ids.append(base + int(number))
                continue
            odd.append(name)
            continue
        ledger_id = ledger_id_of(f"{directory}/{name}", layout)
        if ledger_id is None:
            odd.append(name)
        else:
            ids.append(ledger_id)
    return ids, odd


@dataclass(frozen=True)
class TreeLevel:
    """How deep the ledger znodes of one top-level directory are, and their name widths."""

    widths: tuple[int, ...]  # digits of each directory level, then of the leaf (after "L")


SHORT_TREE = TreeLevel((2, 4, 4))
LONG_TREE = TreeLevel((3, 4, 4, 4, 4))


def tree_of_top(name: str, layout: str) -> TreeLevel | None:
    """Which tree a child of the root starts (None: not a ledger directory)."""
    if not name.isascii() or not name.isdigit():
        return None
    if layout == HIERARCHICAL and len(name) == 2:
        return SHORT_TREE
    if layout in (HIERARCHICAL, LONG_HIERARCHICAL) and len(name) == 3:
        return LONG_TREE
    return None


def is_directory_name(name: str, width: int) -> bool:
    return len(name) == width and name.isascii() and name.isdigit()
