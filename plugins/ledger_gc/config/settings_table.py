"""The README's settings table, rendered from the settings' declarations.

The table lists every ``LEDGERGC_*`` setting with its default and meaning, as each
``Settings`` field declares them (``ledger_gc.config.settings_schema``); boto3's own variables are
described beside it, not in it. The README holds the rendered table between two markers
and a unit test compares the two, so a setting cannot be added, renamed or re-defaulted
without the docs following. Regenerate it with::

    python -m ledger_gc.config.settings_table README.md
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger_gc.config.settings import Settings
from ledger_gc.config.settings_schema import SettingSpec, declared, default_of

BEGIN_MARKER = (
    "<!-- settings table: generated from plugins/ledger_gc/config/settings.py by "
    "`python -m ledger_gc.config.settings_table README.md`; edit the declarations, not this -->"
)
END_MARKER = "<!-- end of settings table -->"
_PREFIX = "LEDGERGC_"


def documented_settings() -> tuple[SettingSpec, ...]:
    """The settings the table lists: the ``LEDGERGC_*`` ones, in declaration order."""
    return tuple(spec for spec in declared(Settings) if spec.env.startswith(_PREFIX))


def render_settings_table() -> str:
    """The Markdown table of every ``LEDGERGC_*`` setting: variable, default, meaning."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in documented_settings():
        default = spec.default_doc or _default_text(default_of(Settings, spec))
        lines.append(f"| `{spec.env}` | {default} | {_cell(spec.doc)} |")
    return "\n".join(lines) + "\n"


def replace_table(text: str, table: str) -> str:
    """``text`` with the part between the markers replaced by ``table``."""
    begin, end = _block(text)
    return text[:begin] + "\n" + table + text[end:]


def table_in(text: str) -> str:
    """The table between the markers of ``text`` (a README)."""
    begin, end = _block(text)
    return text[begin:end].strip("\n") + "\n"


def _block(text: str) -> tuple[int, int]:
    start = text.find(BEGIN_MARKER)
    end = text.find(END_MARKER)
    if start < 0 or end < start:
        raise ValueError(f"no settings table between {BEGIN_MARKER!r} and {END_MARKER!r}")
    return start + len(BEGIN_MARKER), end


def _default_text(value: Any) -> str:
    if value is None or value == {}:
        return "–"
    if value in ("", ()):
        return "empty"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, or with a file (``README.md``) rewrite the table in it."""
    args = list(sys.argv[1:] if argv is None else argv)
    table = render_settings_table()
    if not args:
        sys.stdout.write(table)
        return 0
    path = Path(args[0])
    before = path.read_text(encoding="utf-8")
    after = replace_table(before, table)
    if after != before:
        path.write_text(after, encoding="utf-8")
        print(f"{path}: settings table updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
