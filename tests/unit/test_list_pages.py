"""The fast page parse stands aside, untouched, on anything it does not fully understand."""

from __future__ import annotations

from ledger_gc.storage import list_pages

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
ITEM = "<Contents><Key>{key}</Key><LastModified>{time}</LastModified><Size>{size}</Size></Contents>"


def page(*items: str, encoded: bool = True) -> bytes:
    encoding = "<EncodingType>url</EncodingType>" if encoded else ""
    return (
        f"<ListBucketResult {NS}><Name>b</Name>{encoding}<IsTruncated>false</IsTruncated>"
        + "".join(items)
        + "</ListBucketResult>"
    ).encode()


def take(body: bytes, status: int = 200) -> tuple[dict, dict]:
    response = {"status_code": status, "body": body}
    custom: dict = {}
    with list_pages.parsing_here():
        list_pages._take_contents(response_dict=response, customized_response_dict=custom)
    return response, custom


def test_keys_are_url_decoded_as_botocore_does_and_times_are_epoch_ms():
    body = page(ITEM.format(key="a%2Bb+c%C3%A9", time="2026-01-01T00:00:01.250Z", size=7))

    response, custom = take(body)

    assert custom[list_pages.OBJECTS] == [("a+b cé", 7, 1767225601250)]
    assert b"Contents" not in response["body"] and b"IsTruncated" in response["body"]


def test_anything_unexpected_is_left_to_botocore():
    cases = [
        b"not xml",
        page(ITEM.format(key="a", time="", size=1)),
        page(ITEM.format(key="a", time="yesterday", size=1)),
        page(ITEM.format(key="a", time="2026-01-01T00:00:00", size=1)),  # no zone
        page(ITEM.format(key="a", time="2026-01-01T00:00:00Z", size="x")),
        page("<Contents><Key>a</Key></Contents>"),
        # <Contents> in another namespace than the page's: botocore reads it, so must we.
        page(
            '<Contents xmlns="urn:other"><Key>a</Key><LastModified>2026-01-01T00:00:00Z'
            "</LastModified><Size>1</Size></Contents>"
        ),
        b'<s:ListBucketResult xmlns:s="urn:s"><Contents><Key>a</Key>'
        b"<LastModified>2026-01-01T00:00:00Z</LastModified><Size>1</Size></Contents>"
        b"</s:ListBucketResult>",
        b"<Error><Code>NoSuchBucket</Code></Error>",
    ]
    for body in cases:
        response, custom = take(body)
        assert response["body"] == body and custom == {}, body
    response, custom = take(page(ITEM.format(key="a", time="2026-01-01T00:00:00Z", size=1)), 500)
    assert custom == {}


def test_nothing_happens_outside_parsing_here():
    body = page(ITEM.format(key="a", time="2026-01-01T00:00:00Z", size=1))
    response = {"status_code": 200, "body": body}
    custom: dict = {}

    list_pages._take_contents(response_dict=response, customized_response_dict=custom)

    assert response["body"] == body and custom == {}
