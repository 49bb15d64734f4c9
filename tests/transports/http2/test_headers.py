"""A gRPC request's header fields and the response's, on the native transport, and their HPACK
blocks."""

from __future__ import annotations

import base64

import hpack
import pytest

from ptserve.transports.http2.headers import (
    RESPONSE_HEAD,
    RESPONSE_HEAD_BLOCK,
    TRAILERS_OK,
    TRAILERS_OK_BLOCK,
    HeaderDecoder,
    HeaderError,
    RequestHead,
    changes_table,
    encode,
    header_list_size,
    malformed,
    parse_timeout,
    percent_encode,
    request_head,
    response_fields,
    status_fields,
)

Fields = list[tuple[str, str]]

REQUEST: Fields = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/inference.GRPCInferenceService/ModelInfer"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("x-user", "alice"),
]


def percent_decode(raw: bytes) -> str:
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25:
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8")


# --- response fields --------------------------------------------------------------------


def test_response_head_and_trailers() -> None:
    assert RESPONSE_HEAD == [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    ]
    assert TRAILERS_OK == [(b"grpc-status", b"0")]


def test_response_fields() -> None:
    assert response_fields(405) == [(b":status", b"405")]


def test_status_fields_with_a_long_non_ascii_message() -> None:
    message = "Ünïcödé ✓ 100% " * 40
    fields = status_fields(13, message)
    assert fields[0] == (b"grpc-status", b"13")
    assert fields[1][0] == b"grpc-message"
    assert len(fields[1][1]) > 300
    assert percent_decode(fields[1][1]) == message


def test_status_fields_without_a_message_have_no_grpc_message() -> None:
    assert status_fields(5, "") == [(b"grpc-status", b"5")]


def test_percent_encode() -> None:
    assert percent_encode("plain text ~!") == b"plain text ~!"
    assert percent_encode("100%") == b"100%25"
    assert percent_encode("nö") == b"n%C3%B6"
    assert percent_encode("a\nb\tc\x7f") == b"a%0Ab%09c%7F"
    assert percent_encode("") == b""
    for text in ["\x00 ~ \x7f", "ünï%cödé ✓ 𝄞", "%%"]:
        encoded_text = percent_encode(text)
        assert all(0x20 <= b <= 0x7E for b in encoded_text)
        assert percent_decode(encoded_text) == text


def test_header_list_size_counts_32_bytes_per_field() -> None:
    """RFC 9113 section 6.5.2: name, value and 32 bytes of overhead per field."""
    assert header_list_size([]) == 0
    assert header_list_size([(b"ab", b"cde"), (b"x", b"")]) == (2 + 3 + 32) + (1 + 32)


# --- grpc-timeout -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1H", 3600.0),
        ("2M", 120.0),
        ("3S", 3.0),
        ("50m", 0.05),
        ("250u", 250e-6),
        ("7n", 7e-9),
        ("0m", 0.0),
        ("99999999S", 99_999_999.0),
    ],
)
def test_parse_timeout_units(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    ["", "S", "5", "5s", "5x", "-5S", "+5S", " 5S", "5 S", "1.5S", "123456789S", "\xb9S", "m5"],
)
def test_parse_timeout_rejects_malformed_values(value: str) -> None:
    with pytest.raises(ValueError):
        parse_timeout(value)


# --- request heads ----------------------------------------------------------------------


def raw_fields(fields: Fields) -> list[tuple[bytes, bytes]]:
    return [(n.encode("latin-1"), v.encode("latin-1")) for n, v in fields]


def test_request_head_reads_pseudo_headers_and_transport_headers() -> None:
    head = request_head(
        raw_fields(
            [
                *REQUEST,
                ("grpc-timeout", "10S"),
                ("grpc-encoding", "gzip"),
                ("grpc-accept-encoding", "gzip"),
            ]
        )
    )
    assert head.method == "POST"
    assert head.path == "/inference.GRPCInferenceService/ModelInfer"
    assert head.content_type == "application/grpc"
    assert head.timeout == 10.0
    assert head.encoding == "gzip"
    assert head.metadata == (("x-user", "alice"),)


def test_request_head_defaults() -> None:
    head = request_head([])
    assert head == RequestHead("", "", "", None, "identity", ())


def test_request_head_keeps_metadata_order_and_repeats() -> None:
    head = request_head(raw_fields([("x-a", "1"), ("x-b", "2"), ("x-a", "3"), ("user-agent", "t")]))
    assert head.metadata == (("x-a", "1"), ("x-b", "2"), ("x-a", "3"), ("user-agent", "t"))


@pytest.mark.parametrize("payload", [b"", b"a", b"ab", b"abc", b"\x00\xff\xfe\x01binary"])
def test_binary_metadata_is_base64_decoded_with_or_without_padding(payload: bytes) -> None:
    padded = base64.b64encode(payload)
    unpadded = padded.rstrip(b"=")
    head = request_head([(b"x-data-bin", padded), (b"x-other-bin", unpadded)])
    assert head.metadata == (("x-data-bin", payload), ("x-other-bin", payload))


def test_binary_metadata_that_is_not_base64_is_kept_raw() -> None:
    head = request_head([(b"x-data-bin", b"abcde")])  # 5 characters: no base64 length
    assert head.metadata == (("x-data-bin", b"abcde"),)


def test_text_metadata_is_latin1() -> None:
    head = request_head([(b"x-name", b"caf\xe9")])
    assert head.metadata == (("x-name", "caf\xe9"),)


def test_request_head_rejects_a_malformed_timeout() -> None:
    with pytest.raises(ValueError):
        request_head(raw_fields([*REQUEST, ("grpc-timeout", "soon")]))


def test_a_field_that_is_not_a_pseudo_header_or_transport_header_is_metadata() -> None:
    head = request_head(raw_fields([*REQUEST, ("te", "trailers"), ("grpc-accept-encoding", "x")]))
    assert head.metadata == (("x-user", "alice"),)


# --- HPACK ------------------------------------------------------------------------------


def test_response_blocks_decode_to_their_fields_and_leave_the_table_alone() -> None:
    decoder = hpack.Decoder()
    for fields in (RESPONSE_HEAD, TRAILERS_OK, status_fields(13, "nö"), response_fields(405)):
        block = encode(fields)
        assert decoder.decode(block, raw=True) == fields
        assert not changes_table(block)
    assert encode(RESPONSE_HEAD) == RESPONSE_HEAD_BLOCK
    assert encode(TRAILERS_OK) == TRAILERS_OK_BLOCK


def test_blocks_that_change_the_table_are_told_apart() -> None:
    encoder = hpack.Encoder()
    first = encoder.encode(REQUEST)  # literals with incremental indexing
    again = encoder.encode(REQUEST)  # every field indexed
    assert changes_table(first)
    assert not changes_table(again)
    assert changes_table(b"\x3f\xe1\x1f")  # a size update
    assert not changes_table(b"\x00\x01a\x01b\x10\x01c\x01d")  # without indexing, never indexed
    assert changes_table(b"\x00\x05ab")  # cut short


def test_a_repeated_block_decodes_the_same_while_the_table_stays() -> None:
    encoder = hpack.Encoder()
    decoder = HeaderDecoder(2**20)
    first = decoder.request(encoder.encode(REQUEST))
    block = encoder.encode(REQUEST)
    assert decoder.request(block) == first
    assert decoder.request(block) == first
    # Another field inserted first: the same bytes now mean other fields.
    encoder.encode([("x-other", "1")])
    decoder.request(encoder.encode([("x-other", "1")]))
    moved = [(":method", "POST"), ("x-other", "1")]
    assert decoder.request(encoder.encode(moved)).head is not None
    head = first.head
    assert head is not None and head.metadata == (("x-user", "alice"),)


def test_undecodable_and_oversized_blocks_are_header_errors() -> None:
    with pytest.raises(HeaderError) as bad:
        HeaderDecoder(2**20).request(b"\xff\xff\xff\xff")
    assert bad.value.code == 0x9  # COMPRESSION_ERROR
    with pytest.raises(HeaderError) as big:
        HeaderDecoder(100).request(hpack.Encoder().encode([("x-big", "v" * 200)]))
    assert big.value.code == 0xB  # ENHANCE_YOUR_CALM


@pytest.mark.parametrize(
    "fields",
    [
        [(b":method", b"POST"), (b":path", b"/x")],  # no :scheme
        [*raw_fields(REQUEST), (b":path", b"/late")],
        [*raw_fields(REQUEST), (b"X-Upper", b"1")],
        [*raw_fields(REQUEST), (b"connection", b"close")],
        [*raw_fields(REQUEST[:-2]), (b"te", b"gzip")],
        [(b":status", b"200"), *raw_fields(REQUEST)],
    ],
)
def test_malformed_requests_are_told(fields: list[tuple[bytes, bytes]]) -> None:
    assert malformed(fields) is not None


def test_a_well_formed_request_is_not_malformed() -> None:
    assert malformed(raw_fields(REQUEST)) is None
    assert malformed([(b"x-trailer", b"1")], trailers=True) is None
    assert malformed([(b":path", b"/x")], trailers=True) is not None
