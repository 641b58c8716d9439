"""A minimal HTTP sink that counts occurrences of a token in POST bodies (the bench's receiving end).

Ported from the team's yardstick (`countsink.py`, written for measuring Ray 2.60's
aggregator); changes: port 0 is allowed and a `listening http=127.0.0.1:PORT` line is printed when
ready, so a benchmark can start it without guessing a free port.

Usage: python countsink.py PORT TOKEN OUTFILE
Every POST gets 200 {}. After each request OUTFILE is rewritten as
"<count> <unix time of last increase> <requests>". It parses nothing but the HTTP framing, so it
costs the machine as little as possible while the aggregator is measured.
"""

from __future__ import annotations

import asyncio
import sys
import time

port, token, out = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
total = 0
reqs = 0


def write_count() -> None:
    with open(out, "w") as f:
        f.write(f"{total} {time.time()} {reqs}\n")


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    global total, reqs
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length) if length else b""
            total += body.count(token)
            reqs += 1
            write_count()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionResetError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    write_count()
    print(f"listening http=127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
