"""Kafka wire protocol codecs: pure functions over bytes, no sockets, no asyncio.

`frame.FrameDecoder` splits the stream into frames, `frame.parse_request_header` reads the
header, `dispatch.decode_request` the body; each API module encodes its responses.
"""
