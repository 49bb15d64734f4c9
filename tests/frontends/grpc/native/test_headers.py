"""HPACK and frame packing of the native gRPC transport, checked against the hpack library."""

from __future__ import annotations

import base64

import hpack
import pytest

from ptserve.frontends.grpc.native import frames
from ptserve.frontends.grpc.native.headers import (
    RESPONSE_HEAD,
    TRAILERS_OK,
    HeaderDecoder,
    RequestHead,
    literal,
    parse_timeout,
    percent_encode,
    request_head,
    response_block,
    status_block,
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


def decoded(block: bytes) -> list[tuple[bytes, bytes]]:
    """What a conforming peer reads from ``block``."""
    decoder = hpack.Decoder(max_header_list_size=2**20)
    return [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]


def encoded(encoder: hpack.Encoder, fields: Fields) -> bytes:
    return encoder.encode(fields, huffman=False)


def hpack_integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541, 5.1) after the bits ``first`` sets in its first byte."""
    out = bytearray(hpack.hpack.encode_integer(value, prefix_bits))
    out[0] |= first
    return bytes(out)


def indexed_literal(name: bytes, value: bytes) -> bytes:
    """'Literal with incremental indexing, new name', no Huffman."""
    assert len(name) < 127 and len(value) < 127
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value


def never_indexed(name: bytes, value: bytes) -> bytes:
    assert len(name) < 127 and len(value) < 127
    return b"\x10" + bytes([len(name)]) + name + bytes([len(value)]) + value


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


# --- encoding ---------------------------------------------------------------------------


def test_literal_decodes_to_the_field() -> None:
    assert decoded(literal("grpc-status", "0")) == [(b"grpc-status", b"0")]
    assert decoded(literal("x-bin", b"\x00\xff")) == [(b"x-bin", b"\x00\xff")]


@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 300, 16_383, 16_384, 70_000])
def test_literal_lengths_that_need_several_integer_bytes(size: int) -> None:
    """HPACK integers beyond the 7-bit prefix continue in 7-bit groups; the boundaries matter."""
    value = "v" * size
    assert decoded(literal("x-long", value)) == [(b"x-long", value.encode())]
    name = "n" * size if size else "n"
    assert decoded(literal(name, "1")) == [(name.encode(), b"1")]


def test_literal_keeps_latin1_values_as_bytes() -> None:
    assert decoded(literal("x-name", "caf\xe9")) == [(b"x-name", b"caf\xe9")]


def test_response_head() -> None:
    assert decoded(RESPONSE_HEAD) == [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    ]
    assert decoded(TRAILERS_OK) == [(b"grpc-status", b"0")]


def test_response_block() -> None:
    assert decoded(response_block(405)) == [(b":status", b"405")]


def test_status_block_with_a_long_non_ascii_message() -> None:
    message = "Ünïcödé ✓ 100% " * 40
    fields = decoded(status_block(13, message))
    assert fields[0] == (b"grpc-status", b"13")
    assert fields[1][0] == b"grpc-message"
    assert len(fields[1][1]) > 300
    assert fields[1][1] == percent_encode(message)
    assert percent_decode(fields[1][1]) == message


def test_status_block_without_a_message_has_no_grpc_message() -> None:
    assert decoded(status_block(5, "")) == [(b"grpc-status", b"5")]


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


# --- the decoder and what it keeps --------------------------------------------------------


def test_decoder_reads_an_encoded_request() -> None:
    decoder = HeaderDecoder(64 * 1024)
    head = decoder.decode(hpack.Encoder().encode(REQUEST))  # Huffman-coded literals
    assert head.path == "/inference.GRPCInferenceService/ModelInfer"
    assert head.metadata == (("x-user", "alice"),)


def test_an_identical_all_indexed_block_gives_the_same_head_object() -> None:
    encoder, decoder = hpack.Encoder(), HeaderDecoder(64 * 1024)
    first = encoded(encoder, REQUEST)
    second = encoded(encoder, REQUEST)
    assert all(byte & 0x80 for byte in second)  # every field indexed: the table is unchanged
    inserting = decoder.decode(first)
    kept = decoder.decode(second)
    assert kept == inserting
    assert decoder.decode(second) is kept
    assert decoder.decode(encoded(encoder, REQUEST)) is kept


def test_a_block_that_inserts_into_the_table_is_decoded_every_time() -> None:
    """Decoding it again inserts again, so each time the entries shift: it cannot be kept."""
    decoder = HeaderDecoder(64 * 1024)
    block = b"\x83" + indexed_literal(b"x-k", b"v1")
    first = decoder.decode(block)
    second = decoder.decode(block)
    assert first == second
    assert first is not second
    # Two insertions happened: entries 62 and 63 both exist.
    assert decoder.decode(b"\x83\xbe\xbf").metadata == (("x-k", "v1"), ("x-k", "v1"))


def test_a_kept_block_is_decoded_afresh_after_an_insertion() -> None:
    """Entry 62 is whatever was inserted last: a kept answer would name the old entry."""
    decoder = HeaderDecoder(64 * 1024)
    decoder.decode(indexed_literal(b"x-k", b"v1"))
    reference = b"\x83\xbe"  # :method POST, dynamic entry 62
    kept = decoder.decode(reference)
    assert kept.metadata == (("x-k", "v1"),)
    assert decoder.decode(reference) is kept
    decoder.decode(indexed_literal(b"x-k", b"v2"))
    assert decoder.decode(reference).metadata == (("x-k", "v2"),)
    assert decoder.decode(b"\x83\xbf").metadata == (("x-k", "v1"),)


def test_a_kept_block_is_decoded_afresh_after_an_insertion_that_evicts() -> None:
    """The table keeps its length when an insertion evicts the oldest entry; still it changed."""
    encoder, decoder = hpack.Encoder(), HeaderDecoder(64 * 1024)
    # Each entry is 32 + 3 + 2 = 37 bytes: a table of 40 bytes holds exactly one.
    encoder.header_table_size = 40
    fields: Fields = [(":method", "POST"), ("x-k", "v1")]
    decoder.decode(encoded(encoder, fields))
    reference = encoded(encoder, fields)
    assert reference == b"\x83\xbe"
    assert decoder.decode(reference) is decoder.decode(reference)
    decoder.decode(encoded(encoder, [("x-k", "v2")]))
    assert decoder.decode(reference).metadata == (("x-k", "v2"),)


def test_a_kept_block_is_decoded_afresh_after_a_table_size_update() -> None:
    encoder, decoder = hpack.Encoder(), HeaderDecoder(64 * 1024)
    fields: Fields = [(":method", "POST"), (":path", "/a"), ("x-k", "v1")]
    decoder.decode(encoded(encoder, fields))
    reference = encoded(encoder, fields)
    kept = decoder.decode(reference)
    assert (kept.path, kept.metadata) == ("/a", (("x-k", "v1"),))
    assert decoder.decode(reference) is kept
    # Empty the table (size 0), restore its size, and fill it again with other values.
    encoder.header_table_size = 0
    encoder.header_table_size = 4096
    refill = encoded(encoder, [(":method", "POST"), (":path", "/b"), ("x-k", "v2")])
    assert refill[:1] == b"\x20"  # starts with the size updates
    decoder.decode(refill)
    again = decoder.decode(reference)
    assert (again.path, again.metadata) == ("/b", (("x-k", "v2"),))


def test_a_size_update_alone_is_not_kept_either() -> None:
    """A smaller limit with the same entries still changes what later insertions evict."""
    decoder = HeaderDecoder(64 * 1024)
    decoder.decode(indexed_literal(b"x-k", b"v1"))
    reference = b"\x83\xbe"
    kept = decoder.decode(reference)
    shrink = hpack_integer(4000, 5, 0x20)  # table size update to 4000: x-k v1 stays
    head = decoder.decode(shrink + reference)
    assert head.metadata == (("x-k", "v1"),)
    again = decoder.decode(reference)
    assert again == kept
    assert again is not kept


def test_a_malformed_block_that_inserts_still_invalidates_kept_blocks() -> None:
    """The fields were inserted even though the head was refused (a bad grpc-timeout): the
    decoder's table moved on, so earlier outcomes no longer hold."""
    encoder, decoder = hpack.Encoder(), HeaderDecoder(64 * 1024)
    fields: Fields = [(":method", "POST"), (":path", "/a"), ("x-k", "v1")]
    decoder.decode(encoded(encoder, fields))
    reference = encoded(encoder, fields)
    assert decoder.decode(reference).path == "/a"
    bad = encoder.encode(
        [(":method", "POST"), (":path", "/b"), ("x-k", "v2"), ("grpc-timeout", "soon", True)],
        huffman=False,
    )
    with pytest.raises(ValueError):
        decoder.decode(bad)
    again = decoder.decode(reference)
    assert (again.path, again.metadata) == ("/b", (("x-k", "v2"),))


def test_many_distinct_kept_blocks_all_decode_correctly() -> None:
    """More all-indexed blocks than the decoder keeps: the oldest are dropped, never confused."""
    decoder = HeaderDecoder(64 * 1024)
    values = [f"v{i}".encode() for i in range(40)]
    for value in values:
        decoder.decode(indexed_literal(b"x-k", value))
    # Entry 62 + i is values[39 - i]; pairs of entries make 40 * 39 distinct blocks.
    for i in range(0, 40, 3):
        for j in range(0, 40, 7):
            block = b"\x83" + hpack_integer(62 + i, 7, 0x80) + hpack_integer(62 + j, 7, 0x80)
            head = decoder.decode(block)
            expected = (("x-k", values[39 - i].decode()), ("x-k", values[39 - j].decode()))
            assert head.metadata == expected
            assert decoder.decode(block) == head


def test_never_indexed_fields_are_read_and_kept() -> None:
    """A block of literals that are not indexed leaves the table as it was."""
    decoder = HeaderDecoder(64 * 1024)
    block = b"\x83" + never_indexed(b"x-secret", b"s")
    head = decoder.decode(block)
    assert head.metadata == (("x-secret", "s"),)
    assert decoder.decode(block) is head


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b"\x80", id="index 0"),
        pytest.param(b"\xbe", id="dynamic entry that does not exist"),
        pytest.param(b"\xff\x80", id="truncated integer"),
        pytest.param(b"\x00\x05ab", id="truncated name"),
        pytest.param(b"\x00\x01a\x05ab", id="truncated value"),
        pytest.param(b"\x00", id="literal without its name"),
        pytest.param(hpack_integer(4097, 5, 0x20), id="table size above the limit"),
        pytest.param(b"\x83\x20", id="table size update after a field"),
        pytest.param(b"\x00\x81\xff\x01a", id="bad Huffman name"),
    ],
)
def test_undecodable_blocks_are_compression_errors(block: bytes) -> None:
    with pytest.raises(frames.ConnectionError_) as caught:
        HeaderDecoder(64 * 1024).decode(block)
    assert caught.value.code == frames.COMPRESSION_ERROR


def test_a_header_list_above_the_limit_is_a_compression_error() -> None:
    decoder = HeaderDecoder(1024)
    with pytest.raises(frames.ConnectionError_) as caught:
        decoder.decode(b"\x83" + literal("x-big", "v" * 2000))
    assert caught.value.code == frames.COMPRESSION_ERROR


def test_malformed_fields_are_value_errors() -> None:
    decoder = HeaderDecoder(64 * 1024)
    with pytest.raises(ValueError):
        decoder.decode(b"\x83" + literal("grpc-timeout", "1.5S"))


# --- frames ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "kind", "flags", "stream_id"),
    [
        (0, frames.SETTINGS, frames.ACK, 0),
        (300, frames.DATA, frames.END_STREAM, 1),
        (16_384, frames.HEADERS, frames.END_HEADERS | frames.END_STREAM, 2**31 - 1),
        (frames.LARGEST_FRAME, frames.CONTINUATION, 0, 77),
    ],
)
def test_frame_header_round_trip(length: int, kind: int, flags: int, stream_id: int) -> None:
    packed = frames.header(length, kind, flags, stream_id)
    assert len(packed) == frames.HEADER_BYTES
    assert frames.parse_header(b"junk" + packed, 4) == (length, kind, flags, stream_id)
    assert int.from_bytes(packed[:3], "big") == length


def test_the_reserved_stream_bit_is_ignored() -> None:
    packed = bytearray(frames.header(0, frames.DATA, 0, 5))
    packed[5] |= 0x80
    assert frames.parse_header(packed, 0) == (0, frames.DATA, 0, 5)


def test_frame_carries_its_payload() -> None:
    packed = frames.frame(frames.PING, frames.ACK, 0, b"12345678")
    assert frames.parse_header(packed, 0) == (8, frames.PING, frames.ACK, 0)
    assert packed[frames.HEADER_BYTES :] == b"12345678"


def test_settings_round_trip() -> None:
    values = {frames.INITIAL_WINDOW_SIZE: 2**31 - 1, frames.MAX_FRAME_SIZE: 16_384}
    packed = frames.settings(values)
    assert frames.parse_header(packed, 0) == (12, frames.SETTINGS, 0, 0)
    assert frames.parse_settings(packed[frames.HEADER_BYTES :]) == list(values.items())
    assert frames.parse_settings(b"") == []


def test_settings_of_a_bad_length_are_a_frame_size_error() -> None:
    with pytest.raises(frames.ConnectionError_) as caught:
        frames.parse_settings(b"\x00\x04\x00\x00\x00")
    assert caught.value.code == frames.FRAME_SIZE_ERROR


def test_window_update_rst_stream_and_goaway() -> None:
    update = frames.window_update(3, 2**31 - 1)
    assert frames.parse_header(update, 0) == (4, frames.WINDOW_UPDATE, 0, 3)
    assert frames.parse_u32(update[frames.HEADER_BYTES :]) == 2**31 - 1
    reset = frames.rst_stream(5, frames.CANCEL)
    assert frames.parse_header(reset, 0) == (4, frames.RST_STREAM, 0, 5)
    assert frames.parse_u32(reset[frames.HEADER_BYTES :]) == frames.CANCEL
    away = frames.goaway(7, frames.PROTOCOL_ERROR, "bad")
    assert frames.parse_header(away, 0) == (11, frames.GOAWAY, 0, 0)
    payload = away[frames.HEADER_BYTES :]
    assert frames.parse_u32(payload) == 7
    assert frames.parse_u32(payload[4:]) == frames.PROTOCOL_ERROR
    assert payload[8:] == b"bad"


def test_strip_padding() -> None:
    assert frames.strip_padding(b"abc", 0) == b"abc"
    assert frames.strip_padding(b"\x02abc\x00\x00", frames.PADDED) == b"abc"
    assert frames.strip_padding(b"\x00abc", frames.PADDED) == b"abc"
    assert frames.strip_padding(b"\x03abc", frames.PADDED) == b""


@pytest.mark.parametrize("payload", [b"", b"\x01", b"\x04abc"])
def test_padding_longer_than_the_frame_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(frames.ConnectionError_) as caught:
        frames.strip_padding(payload, frames.PADDED)
    assert caught.value.code == frames.PROTOCOL_ERROR
