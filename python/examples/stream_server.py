"""An asyncio streaming server loop: each HTTP request is one
generate_async(streaming=True) result read with `async for`, its text
written to the client as it comes (chunked); a client that goes away
aborts its request. Many clients share each forward pass.

    make python
    PYTHONPATH=python python3 python/examples/stream_server.py ../shared/models/stories260K.gguf 8000
    curl -N -d '{"prompt": "Once upon a time", "max_tokens": 60}' http://127.0.0.1:8000/

Port 0 picks a free port; the first line printed is "listening on PORT".
"""

import asyncio
import json
import sys

from inflight import LLM, SamplingParams


async def handle(llm: LLM, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    result = None
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = json.loads(await reader.readexactly(length) or b"{}")
        params = SamplingParams(max_tokens=int(body.get("max_tokens", 64)),
                                temperature=float(body.get("temperature", 0.0)))
        result = llm.generate_async(body.get("prompt", ""), params, streaming=True)
    except (ValueError, KeyError, asyncio.IncompleteReadError) as e:
        msg = str(e).encode()
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
        await writer.drain()
        writer.close()
        return
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    try:
        async for step in result:
            piece = step.outputs[0].text_diff.encode()
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        result.abort()  # the client left: free its sequence slot and KV now
        raise
    finally:
        writer.close()


async def serve(model: str, port: int) -> None:
    with LLM(model, max_batch_size=16) as llm:
        server = await asyncio.start_server(lambda r, w: handle(llm, r, w), "127.0.0.1", port)
        print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await server.serve_forever()


if __name__ == "__main__":
    model = sys.argv[1] if len(sys.argv) > 1 else "../shared/models/stories260K.gguf"
    try:
        asyncio.run(serve(model, int(sys.argv[2]) if len(sys.argv) > 2 else 8000))
    except KeyboardInterrupt:
        pass
