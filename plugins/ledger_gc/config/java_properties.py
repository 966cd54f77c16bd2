"""Java ``.properties`` text, read as ``java.util.Properties.load`` reads it.

Pulsar's brokers load ``broker.conf`` with ``Properties.load`` (PulsarConfigurationLoader),
so ledger-gc reads it by the same rules, not by a guess at them:

* a logical line may span natural lines: a line ending in an odd number of backslashes
  continues on the next, whose leading blanks are dropped;
* a line whose first non-blank character is ``#`` or ``!`` is a comment (and never
  continues, whatever it ends with); blank lines are skipped;
* the key runs to the first unescaped ``=``, ``:`` or blank; blanks around one ``=`` or
  ``:`` are skipped, so ``key=value``, ``key: value`` and ``key value`` are the same;
* escapes: ``\\t``, ``\\n``, ``\\r``, ``\\f``, ``\\uXXXX``, and a backslash before any other
  character is that character (``\\:``, ``\\=``, ``\\ ``, ``\\\\``);
* the last of a repeated key wins. The bytes are ISO-8859-1, as ``load(InputStream)``
  reads them (a host name or a bucket is ASCII either way).

Pure: text in, a dict out. A malformed ``\\uXXXX`` raises ``ValueError`` (Java's
IllegalArgumentException), with the line number.
"""

from __future__ import annotations

_BLANKS = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of ``text`` (raw, unescaped), in file order."""
    found: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        try:
            found[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return found


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Each logical line (continuations joined) with the number of its first line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    logical: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(_BLANKS)
            index += 1
        if _continues(line):  # a continuation at the end of the text: nothing follows
            line = line[:-1]
        logical.append((number, line))
    return logical


def _continues(line: str) -> bool:
    """An odd number of backslashes at the end: the line goes on."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """``key<blanks>[=|:]<blanks>value`` -> (key, value), both still escaped."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in _SEPARATORS or char in _BLANKS:
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u":
            digits = text[index + 2 : index + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uxxxx escape \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)
