"""The floor of a server on asyncio and uvloop: bind the port as ours does
(before the imports), import asyncio and uvloop, answer every read with
one line. Takes `-l ADDR -p PORT`, as startup-ab.py and
startup-callgrind.py pass them."""
import socket
import sys

addr, port = sys.argv[sys.argv.index("-l") + 1], int(sys.argv[sys.argv.index("-p") + 1])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((addr, port))
sock.listen(128)

import asyncio  # noqa: E402
import uvloop  # noqa: E402


class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(b"USING default\r\n")


async def main():
    await loop.create_server(Answer, sock=sock)
    await asyncio.sleep(3600)

loop = uvloop.new_event_loop()
loop.run_until_complete(main())
