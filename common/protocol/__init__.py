"""Kafka wire protocol codecs: pure functions over bytes, no sockets, no asyncio.

`frame.FrameDecoder` splits the stream into frames, `frame.parse_request_header` reads the
header, each API module decodes its requests and encodes its responses (`dispatch.Codec`;
the broker pairs them with handlers in `broker.request_handler.API_TABLE`).
"""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files
