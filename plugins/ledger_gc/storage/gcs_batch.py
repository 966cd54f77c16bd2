"""GCS's batch API for conditional deletes: one ``multipart/mixed`` POST of up to 100
``DELETE ...?ifGenerationMatch=<generation>`` calls, and its answer, one status per call.

Why not ``google.cloud.storage``'s own ``client.batch()``: it sends parts without a
``Content-ID``. GCS accepts that, but fake-gcs-server (1.54.0) drops such parts and the
whole batch fails ("Bad response: not multi-part"), so the path real deletes take could
not be tested. Every part here carries ``Content-ID: <item-N>`` and each answer is matched
by GCS's ``<response-item-N>``, never by position: a call with no answer is reported as
such, not guessed. The body is built by hand because of one MIME rule: the CRLF before a
boundary belongs to the boundary, so an HTTP request with no body needs one more CRLF
after its blank line (fake-gcs-server answers 400 without it).
"""

from __future__ import annotations

import email.parser
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import Message
from urllib.parse import quote

#: Calls per batch: GCS's batch API takes at most 100.
MAX_CALLS = 100


@dataclass(frozen=True)
class Answer:
    """One call's answer: its HTTP status and GCS's message (empty on success)."""

    status: int
    message: str = ""


def delete_body(
    api_endpoint: str, bucket: str, deletes: Sequence[tuple[str, str]]
) -> tuple[str, str]:
    """(Content-Type, body) of a batch deleting each (name, generation) only if it is
    still that generation."""
    if not 0 < len(deletes) <= MAX_CALLS:
        raise ValueError(f"a GCS batch takes 1 to {MAX_CALLS} calls, not {len(deletes)}")
    boundary = f"ledgergc-{uuid.uuid4().hex}"
    base = f"{api_endpoint.rstrip('/')}/storage/v1/b/{quote(bucket, safe='')}/o/"
    parts = [
        f"--{boundary}\r\n"
        "Content-Type: application/http\r\n"
        "Content-Transfer-Encoding: binary\r\n"
        f"Content-ID: <item-{n}>\r\n"
        "\r\n"
        f"DELETE {base}{quote(name, safe='')}?ifGenerationMatch={generation} HTTP/1.1\r\n"
        "Content-Length: 0\r\n"
        "\r\n"  # the end of the call's headers
        "\r\n"  # the boundary's own CRLF
        for n, (name, generation) in enumerate(deletes)
    ]
    return f"multipart/mixed; boundary={boundary}", "".join(parts) + f"--{boundary}--\r\n"


def answers(content_type: str, content: bytes, calls: int) -> dict[int, Answer]:
    """Each call's answer by its index; a call the response has no part for is absent.
    Raises ValueError when the response is not a multipart answer at all."""
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + content
    )
    if not content_type.lower().startswith("multipart/"):
        raise ValueError(f"the batch answer is not multipart ({content_type or 'no type'})")
    found: dict[int, Answer] = {}
    # A multipart answer with no part at all parses as a plain message: no call answered.
    for part in message.get_payload() if message.is_multipart() else []:
        if not isinstance(part, Message):
            continue
        content_id = str(part.get("Content-ID", "")).strip().strip("<>")
        index = content_id.removeprefix("response-").removeprefix("item-")
        if not content_id.startswith("response-item-") or not index.isdigit():
            continue
        if int(index) < calls:
            found[int(index)] = _answer(str(part.get_payload()))
    return found


def _answer(http: str) -> Answer:
    """A part's ``HTTP/1.1 <status> <reason>`` response: its status and GCS's message."""
    status_line, _, rest = http.lstrip().partition("\n")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[1].isdigit():
        return Answer(0, f"unreadable answer {status_line.strip()[:80]!r}")
    status = int(fields[1])
    body = rest.replace("\r\n", "\n").partition("\n\n")[2].strip()
    try:
        error = json.loads(body).get("error", {}) if body else {}
        message = str(error.get("message", "")) if isinstance(error, dict) else ""
    except (ValueError, AttributeError):
        message = body[:200]
    reason = fields[2].strip() if len(fields) > 2 else ""
    return Answer(status, " ".join((message or reason).split()))
