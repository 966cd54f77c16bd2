"""ListObjectsV2 pages read without botocore's per-key parsing.

A listing is most of a scan's client CPU: botocore turns each ``<Contents>`` of a page
into a dict and parses its ``LastModified`` with ``dateutil``, about 70 µs a key, more
than the object store spends serving it (``docs/BENCHMARKS.md``, figure 5). So, for the
requests this module marks, a ``before-parse`` hook takes the ``<Contents>`` elements out
of the raw body and reads just the three fields the GC uses, with ElementTree and
``datetime.fromisoformat`` (a few µs a key); botocore parses the rest of the page
(``IsTruncated``, the continuation token, errors) as always, and keeps doing everything
else: signing, retries, error codes.

Safe by construction: the hook acts only on a 200 response to a request made inside
``parsing_here()`` on this thread (so a client shared with other code keeps botocore's
full answer elsewhere), and on any surprise (not XML, a field missing) it leaves the body
untouched and botocore's own ``Contents`` are used. Keys are URL-decoded as botocore
decodes them (``EncodingType=url``, which botocore sets on every ListObjectsV2), and
times are the same epoch milliseconds either way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus
from xml.etree import ElementTree

#: Where the hook leaves a page's objects in the parsed response.
OBJECTS = "LedgerGcObjects"
_HOOK_ID = "ledgergc-list-pages"
_marked = threading.local()

ObjectRow = tuple[str, int, int]  # key, size, last modified (epoch ms)


def install(client: Any) -> None:
    """Register the hook on ``client`` (idempotent: one per client)."""
    client.meta.events.register("before-parse.s3.ListObjectsV2", _take_contents, unique_id=_HOOK_ID)


@contextmanager
def parsing_here() -> Iterator[None]:
    """Requests made in this block, on this thread, get the fast page parse."""
    _marked.on = True
    try:
        yield
    finally:
        _marked.on = False


def objects_of(page: dict[str, Any]) -> list[ObjectRow]:
    """A page's objects, from the hook or, when it stood aside, from botocore."""
    rows = page.get(OBJECTS)
    if rows is not None:
        return list(rows)
    return [
        (item["Key"], int(item["Size"]), epoch_ms(item["LastModified"]))
        for item in page.get("Contents", ())
    ]


def epoch_ms(value: datetime) -> int:
    """Epoch milliseconds of an aware datetime, as every listing path computes them (a
    block's time must compare equal whichever path listed it)."""
    return int(value.timestamp() * 1000)


def _take_contents(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    if not getattr(_marked, "on", False) or response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes):
        return
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return  # botocore parses it, or reports it, as usual
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    encoded = root.findtext(f"{ns}EncodingType") == "url"
    contents = root.findall(f"{ns}Contents")
    # Every <Contents>, in any namespace, must be one we read: botocore ignores
    # namespaces, and a page read as emptier than it is would hide data.
    if not root.tag.endswith("ListBucketResult") or len(root.findall("{*}Contents")) != len(
        contents
    ):
        return
    rows: list[ObjectRow] = []
    key_tag, size_tag, time_tag = f"{ns}Key", f"{ns}Size", f"{ns}LastModified"
    try:
        for item in contents:
            key = item.findtext(key_tag)
            size = item.findtext(size_tag)
            modified = item.findtext(time_tag)
            if not key or size is None or not modified:
                return
            when = datetime.fromisoformat(modified)
            if when.tzinfo is None:
                return  # botocore reads a zone-less time as UTC; so must we, so let it
            rows.append((unquote_plus(key) if encoded else key, int(size), epoch_ms(when)))
    except ValueError:
        return
    for item in contents:
        root.remove(item)
    response_dict["body"] = ElementTree.tostring(root)
    customized_response_dict[OBJECTS] = rows
