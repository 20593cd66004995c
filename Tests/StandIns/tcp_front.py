"""One address in front of several backends, as a TCP load balancer puts it: each new connection goes to the next
backend in turn, and a backend that refuses the connection (a dead process) is skipped. Bytes pass through untouched,
so TLS and HTTP/1.1 or HTTP/2 are the ends' business. When a backend dies, its connections close, and the client's
next connection goes to one that answers."""
import argparse
import asyncio
import itertools


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", action="append", required=True, help="HOST:PORT, once per backend")
    args = parser.parse_args()
    backends = [(host, int(port)) for host, port in (backend.rsplit(":", 1) for backend in args.backend)]
    turn = itertools.count()

    async def handle(client_reader, client_writer):
        first = next(turn)
        for offset in range(len(backends)):
            host, port = backends[(first + offset) % len(backends)]
            try:
                backend_reader, backend_writer = await asyncio.open_connection(host, port)
            except OSError:
                continue
            await asyncio.gather(pipe(client_reader, backend_writer), pipe(backend_reader, client_writer))
            return
        client_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", args.port)
    print(f"tcp front on 127.0.0.1:{args.port} for {len(backends)} backends", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
