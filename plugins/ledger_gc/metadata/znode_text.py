"""Text another process wrote in a znode (a lock holder's identifier), fit for a message.

Anyone who may create a node under a lock's path chooses what ``contenders()`` returns,
and that text lands in a report, a log line and the Airflow task's output: so it is
shown escaped (no newline, carriage return or terminal escape of its own) and bounded.
"""

from __future__ import annotations

#: The most characters of another process's text a message quotes.
MAX_CHARS = 80


def quoted(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` on one line: each character that is not printable escaped as Python
    writes it (``\\n``, ``\\x1b``), at most ``limit`` characters of that, then how long
    the whole was."""
    escaped = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if len(escaped) <= limit:
        return escaped
    return f"{escaped[:limit]}... ({len(text)} characters)"
