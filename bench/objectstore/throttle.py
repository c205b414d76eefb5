"""A TCP proxy in front of the object store that shapes the link: a bandwidth cap shared by every connection (server
to client, where the shards flow) and a delay added to every piece of data in each direction, as `tc netem delay`
on the loopback would (a round trip gains twice the delay). For machines where `tc` is not allowed (gVisor, no
CAP_NET_ADMIN). It runs in a process of its own, so its work does not compete with the measured process's GIL.

    link = ShapedLink(target_port, rate_bytes_s=100e6, delay_s=0.010).start()   # link.port: point clients there
    link.bytes_down                                                                # what reached the clients so far
    link.stop()"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import socket

PIECE = 256 << 10  # bytes read at a time: large enough that 1 GB/s is ~4,000 pieces a second


class Bucket:
    """A virtual clock of the link: each piece moves it on by len/rate; a piece leaves when the clock says. `moved`
    (shared with the process that started the link) counts the bytes let through."""

    def __init__(self, rate: float | None, moved) -> None:
        self.rate, self.clock, self.moved = rate, 0.0, moved

    async def take(self, n: int) -> None:
        self.moved.value += n
        if not self.rate:
            return
        loop = asyncio.get_running_loop()
        self.clock = max(self.clock, loop.time()) + n / self.rate
        wait = self.clock - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)


async def pipe(reader, writer, delay: float, bucket: Bucket | None) -> None:
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()

    async def pump_in() -> None:
        while data := await reader.read(PIECE):
            queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait(None)

    feeder = asyncio.ensure_future(pump_in())
    try:
        while (item := await queue.get()) is not None:
            due, data = item
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if bucket is not None:
                await bucket.take(len(data))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        feeder.cancel()
        writer.close()


async def serve(listen: socket.socket, target_port: int, rate: float | None, delay: float, moved) -> None:
    bucket = Bucket(rate, moved)

    async def handle(reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer, delay, None), pipe(up_reader, writer, delay, bucket))

    server = await asyncio.start_server(handle, sock=listen)
    async with server:
        await server.serve_forever()


def _run(listen: socket.socket, target_port: int, rate: float | None, delay: float, cpus, moved) -> None:
    if cpus:  # off the measured process's cores (a fork inherits its pinning)
        os.sched_setaffinity(0, cpus)
    asyncio.run(serve(listen, target_port, rate, delay, moved))


class ShapedLink:
    def __init__(self, target_port: int, rate_bytes_s: float | None = None, delay_s: float = 0.0, cpus=None) -> None:
        self.target_port, self.rate, self.delay, self.cpus = target_port, rate_bytes_s, delay_s, cpus
        self.process: mp.Process | None = None
        self.port = 0
        self._moved = mp.get_context("fork").Value("q", 0, lock=False)  # written by the link's process alone

    def start(self) -> ShapedLink:
        listen = socket.socket()
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind(("127.0.0.1", 0))
        listen.listen(128)
        self.port = listen.getsockname()[1]
        ctx = mp.get_context("fork")  # the listening socket is inherited as it is
        self.process = ctx.Process(
            target=_run, args=(listen, self.target_port, self.rate, self.delay, self.cpus, self._moved), daemon=True
        )
        self.process.start()
        listen.close()
        return self

    @property
    def bytes_down(self) -> int:
        """Bytes the link has carried from the store to its clients (every connection, since start)."""
        return self._moved.value

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.join(5)
            self.process = None

    def __enter__(self) -> ShapedLink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
