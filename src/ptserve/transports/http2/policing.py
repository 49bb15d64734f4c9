"""What one connection may cost: the limits, and the frame-header scan that enforces the ones a
peer can abuse before a frame is parsed (floods, header blocks, idle streams).

The scan reads only the 9-byte frame headers of what arrived, so it is cheap; it runs ahead of
the frame parser so that a flood is cut at the frame that exhausts its budget rather than after
the connection has parsed (and answered) a whole read of it.
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 section 6).
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4

# Error codes (RFC 9113 section 7).
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
ENHANCE_YOUR_CALM = 0xB

_HEADER = struct.Struct(">HBBBL")  # length as 16 + 8 bits, type, flags, stream id


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection bounds. The defaults suit gRPC clients (grpcio, grpc-js, grpc-go,
    tritonclient): none of them comes near any of these in normal use."""

    # Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); a stream
    # beyond is refused (REFUSED_STREAM), which gRPC clients retry transparently. 1024: ten
    # times grpc-go's default of 100 so that a single channel used by many client
    # threads never waits on it, while a connection's streams stay a bounded cost.
    max_streams: int = 1024
    # What a stream may carry before a WINDOW_UPDATE, and the connection.
    stream_window: int = 8 * 2**20
    connection_window: int = 64 * 2**20
    # The largest frame we accept (SETTINGS_MAX_FRAME_SIZE): a frame is held whole before
    # parsing it, so this bounds the input buffered per connection.
    max_frame: int = 2**20
    # Advertised SETTINGS_MAX_HEADER_LIST_SIZE: a call whose headers exceed it fails alone
    # (RESOURCE_EXHAUSTED). Beyond the hard limits (encoded block, decoded list) the whole
    # connection ends (ENHANCE_YOUR_CALM): the block must be decoded whole to keep HPACK in
    # step, so those bound the work of decoding it.
    max_header_list: int = 64 * 1024
    max_header_block: int = 2**20
    max_decoded_header_list: int = 2**20
    max_continuations: int = 32  # CONTINUATION frames per header block
    # Frames that cost work or an answer but carry no call (PING, SETTINGS, PRIORITY, empty
    # DATA, unknown types): a bucket of ``flood_burst`` refilled at ``flood_rate`` per second.
    # A PING right after we sent a response is free (keepalive and BDP pings of busy clients).
    flood_burst: int = 100
    flood_rate: float = 10.0
    # Streams reset by the peer (RST_STREAM) or refused by us (CVE-2023-44487, "rapid reset").
    reset_burst: int = 200
    reset_rate: float = 20.0
    # Messages a streaming call may have taken and not answered yet: ModelStreamInfer starts a
    # Task per message, so this bounds them. (A method that answers only at the end could read
    # no more than this many messages: none of ours does.)
    max_unanswered: int = 128
    # Frames handled per event-loop callback: one connection's burst then delays the
    # others by a bounded amount of work.
    frames_per_turn: int = 256
    # The client's preface and SETTINGS must arrive within this; a connection without open
    # streams for ``idle_timeout`` gets GOAWAY and is closed.
    handshake_timeout: float = 15.0
    idle_timeout: float = 300.0
    # Stop reading the socket while more than this waits to be written.
    write_high_water: int = 1024 * 1024
    linger: float = 1.0  # after our last answer and GOAWAY, how long to wait for the peer


DEFAULT_LIMITS = Limits()


class Budget:
    """A token bucket: ``spend`` is False once the burst is used up faster than it refills."""

    __slots__ = ("_burst", "_clock", "_last", "_rate", "_tokens")

    def __init__(
        self, burst: int, rate: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst = float(burst)
        self._rate = rate
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def spend(self) -> bool:
        now = self._clock()
        tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True


class Stop(enum.Enum):
    """Why a scan stopped."""

    END = 0  # everything was read; what follows ``resume`` (part of a frame header) waits
    TURN = 1  # ``frames_per_turn`` frames: the rest waits for the next callback
    GOAWAY = 2  # the peer's GOAWAY: handled by the connection, never parsed
    SKIP = 3  # bytes not to parse were passed over (the rest of a GOAWAY)
    VIOLATION = 4  # ``code`` and ``reason`` say which


class Scanner:
    """Follows the frame boundaries of the input and checks each frame header."""

    __slots__ = (
        "_block_bytes",
        "_block_frames",
        "_discard",
        "_flood",
        "_highest",
        "_limits",
        "_preface",
        "_resets",
        "_skip",
        "code",
        "ping_is_free",
        "reason",
    )

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = limits
        self._preface = len(PREFACE)  # preface bytes still to come
        self._skip = 0  # payload bytes of the current frame still to come
        self._discard = False  # the current frame is not to be parsed (a GOAWAY)
        self._block_frames = 0  # frames of the header block in progress (0: none)
        self._block_bytes = 0
        self._highest = 0  # the highest stream id a HEADERS frame opened
        self._flood = Budget(limits.flood_burst, limits.flood_rate, clock)
        self._resets = Budget(limits.reset_burst, limits.reset_rate, clock)
        self.ping_is_free = False  # set by the connection when it sends a response
        self.code = NO_ERROR
        self.reason = ""

    def spend_reset(self) -> bool:
        """A stream refused by us counts as a reset; False once streams end too fast."""
        return self._resets.spend()

    def scan(self, data: bytes | bytearray | memoryview, start: int) -> tuple[int, int, Stop]:
        """Scans ``data[start:]``: the parser is to get ``data[start:feed]``; the next scan
        begins at ``resume``. A frame header cut by the end of ``data`` is not given to the
        parser (END stops before it): the caller keeps it for the next read."""
        size = len(data)
        position = start
        if self._preface:
            taken = min(self._preface, size - position)
            done = len(PREFACE) - self._preface
            if data[position : position + taken] != PREFACE[done : done + taken]:
                self.code, self.reason = PROTOCOL_ERROR, "not an HTTP/2 connection preface"
                return position, size, Stop.VIOLATION
            self._preface -= taken
            position += taken
        if self._skip:
            taken = min(self._skip, size - position)
            self._skip -= taken
            if self._discard:
                self._discard = self._skip > 0
                return position, position + taken, Stop.SKIP
            position += taken
        frames = 0
        limit = self._limits.frames_per_turn
        while size - position >= 9:
            if frames >= limit:
                return position, position, Stop.TURN
            high, low, kind, flags, stream_id = _HEADER.unpack_from(data, position)
            length = (high << 8) | low
            frames += 1
            stop = self._check(length, kind, flags, stream_id & 0x7FFF_FFFF)
            if stop is not None:
                if stop is Stop.GOAWAY:
                    end = position + 9 + length
                    if end > size:
                        self._skip, self._discard = end - size, True
                        end = size
                    return position, end, stop
                return position, size, stop
            end = position + 9 + length
            if end > size:
                self._skip = end - size
                return size, size, Stop.END
            position = end
        return position, position, Stop.END

    def _violation(self, code: int, reason: str) -> Stop:
        self.code, self.reason = code, reason
        return Stop.VIOLATION

    def _check(self, length: int, kind: int, flags: int, stream_id: int) -> Stop | None:
        limits = self._limits
        if length > limits.max_frame:
            return self._violation(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
        if self._block_frames:
            if kind != CONTINUATION:
                self._block_frames = 0  # the connection refuses it (PROTOCOL_ERROR)
                return None
            self._block_frames += 1
            self._block_bytes += length
            if self._block_frames > limits.max_continuations + 1:
                return self._violation(ENHANCE_YOUR_CALM, "too many CONTINUATION frames")
            if self._block_bytes > limits.max_header_block:
                return self._violation(ENHANCE_YOUR_CALM, "header block too large")
            if flags & END_HEADERS:
                self._block_frames = 0
            return None
        if kind == DATA:
            if stream_id > self._highest or (stream_id and not stream_id & 1):
                return self._violation(PROTOCOL_ERROR, "DATA on an idle stream")
            if not length and not flags & END_STREAM and not self._flood.spend():
                return self._violation(ENHANCE_YOUR_CALM, "too many empty frames")
            return None
        if kind == HEADERS:
            if length > limits.max_header_block:
                return self._violation(ENHANCE_YOUR_CALM, "header block too large")
            if stream_id > self._highest and stream_id & 1:
                self._highest = stream_id
            if not flags & END_HEADERS:
                self._block_frames, self._block_bytes = 1, length
            return None
        if kind == PING:
            if length != 8 or stream_id:
                return self._violation(
                    FRAME_SIZE_ERROR if length != 8 else PROTOCOL_ERROR, "bad PING"
                )
            if flags & ACK:
                return None
            if self.ping_is_free:
                self.ping_is_free = False
                return None
            if not self._flood.spend():
                return self._violation(ENHANCE_YOUR_CALM, "too many PINGs")
            return None
        if kind == RST_STREAM:
            if length != 4:
                return self._violation(FRAME_SIZE_ERROR, "RST_STREAM of a bad length")
            if stream_id > self._highest or (stream_id and not stream_id & 1):
                return self._violation(PROTOCOL_ERROR, "RST_STREAM on an idle stream")
            if not self._resets.spend():
                return self._violation(ENHANCE_YOUR_CALM, "too many streams reset")
            return None
        if kind == WINDOW_UPDATE:
            if length != 4:
                return self._violation(FRAME_SIZE_ERROR, "WINDOW_UPDATE of a bad length")
            if stream_id > self._highest or (stream_id and not stream_id & 1):
                return self._violation(PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
            return None
        if kind == GOAWAY:
            return Stop.GOAWAY if not stream_id else None  # the connection refuses one on a stream
        if kind == SETTINGS:
            if flags & ACK and length:
                return self._violation(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            if length % 6:
                return self._violation(FRAME_SIZE_ERROR, "SETTINGS of a bad length")
            if flags & ACK:
                return None
        if kind == PRIORITY and length != 5:
            return self._violation(FRAME_SIZE_ERROR, "PRIORITY of a bad length")
        if (kind in (SETTINGS, PRIORITY) or kind > CONTINUATION) and not self._flood.spend():
            return self._violation(ENHANCE_YOUR_CALM, "too many control frames")
        return None
