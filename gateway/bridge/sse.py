"""Reading a Server-Sent Events stream with a bound on each event's size.

The framing is the HTML standard's event stream: lines end with CRLF, LF or CR;
`data:` lines of one event are joined with LF; a blank line dispatches the
event; lines starting with `:` are comments; `event`, `id` and `retry` fields
are read and ignored (AG-UI agents send `data: <json>` only). An event whose
data would pass `max_event_bytes`, or a line that long, ends the stream with
`EventTooLarge` before it is held in memory whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator


class EventTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"a Server-Sent Event over {limit} bytes")
        self.limit = limit


class SseReader:
    """Bytes in, the data of each complete event out (as bytes, exactly as sent)."""

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._data_size = 0
        self._has_data = False
        self._skip_lf = False  # the previous chunk ended with CR: a following LF belongs to it

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events completed by `chunk`."""
        out: list[bytes] = []
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        self._buffer += chunk
        start = 0
        buffer = self._buffer
        while True:
            cr = buffer.find(b"\r", start)
            lf = buffer.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            line = bytes(buffer[start:end])
            if buffer[end : end + 1] == b"\r":
                if end + 1 == len(buffer):
                    self._skip_lf = True
                    start = end + 1
                elif buffer[end + 1 : end + 2] == b"\n":
                    start = end + 2
                else:
                    start = end + 1
            else:
                start = end + 1
            event = self._line(line)
            if event is not None:
                out.append(event)
        del buffer[:start]
        if len(buffer) > self.max_event_bytes + 16:  # a line longer than any event may be
            raise EventTooLarge(self.max_event_bytes)
        return out

    def _line(self, line: bytes) -> bytes | None:
        if not line:
            if not self._has_data:
                return None
            data = b"\n".join(self._data)
            self._data, self._data_size, self._has_data = [], 0, False
            return data
        if line.startswith(b":"):
            return None
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data_size += len(value) + (1 if self._has_data else 0)
            if self._data_size > self.max_event_bytes:
                raise EventTooLarge(self.max_event_bytes)
            self._data.append(value)
            self._has_data = True
        return None  # event, id, retry and unknown fields: not used by AG-UI

    @property
    def partial(self) -> bool:
        """Whether an event was begun and not dispatched (the stream was cut inside it)."""
        return self._has_data or bool(self._buffer)


async def events(chunks: AsyncIterable[bytes], max_event_bytes: int) -> AsyncIterator[bytes]:
    """Each complete event's data, in order, from a stream of byte chunks."""
    reader = SseReader(max_event_bytes)
    async for chunk in chunks:
        for event in reader.feed(chunk):
            yield event
