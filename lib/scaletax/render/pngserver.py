"""One vl-convert for every chapter of a build: a process that draws the figures' PNGs for them.

vl-convert starts a JavaScript engine in each process that draws (0.5-1 CPU s, then its JIT warms
up again on the first figures): six chapters drawing 29 figures spent about 12.9 CPU s in six
engines where one engine draws them in 10.6 (measured 2026-12-02 on the default book's specs). The
build runner (``report/execute.py``) binds a Unix socket in a private folder, hands the listening
socket to ``python -m scaletax.render.pngserver FD`` and names its path in ``SCALETAX_RENDER_SOCKET``
for the chapters; :func:`draw` asks it, and the server starts its engine while the chapters start.

It is the same vl-convert in the same environment, so the PNG is the same bytes as a chapter's own
(``tests/test_render.py``). Whatever goes wrong (no server, a crashed one, a spec it cannot draw, a
version mismatch) :func:`draw` returns None and the chapter draws the figure itself, which raises
vl-convert's own error for a bad spec.

Protocol, one request per connection, served one at a time (vl-convert has one engine): request =
4-byte big-endian length + JSON ``{"vl_convert": version, "scale": s, "spec": spec}``; reply =
status byte (``0`` PNG follows, ``1`` error text follows) + 4-byte length + payload.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import traceback

import vl_convert as vlc

ENV = "SCALETAX_RENDER_SOCKET"
#: Seconds a chapter waits for its PNG (the server draws one figure at a time) before drawing it.
TIMEOUT_S = 300.0
_OK, _ERROR = b"0", b"1"
#: What the server draws first, to start its engine before a chapter asks.
_WARM_SPEC = {"data": {"values": [{"x": 1, "y": 1}]}, "mark": "point",
              "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}}}
_down = False  # this process found the server gone: it draws for itself from now on


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("the render server closed the connection")
        buf += part
    return bytes(buf)


def _send(sock: socket.socket, head: bytes, payload: bytes) -> None:
    sock.sendall(head + struct.pack(">I", len(payload)) + payload)


def draw(spec: dict, scale: float) -> bytes | None:
    """vl-convert's PNG of the Vega-Lite ``spec`` at ``scale`` drawn by the build's render server,
    or None where there is none or it did not draw it (the caller then draws it itself)."""
    global _down
    path = os.environ.get(ENV)
    if not path or _down:
        return None
    body = json.dumps({"vl_convert": vlc.__version__, "scale": scale, "spec": spec}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(path)
            sock.sendall(struct.pack(">I", len(body)) + body)
            status = _recv(sock, 1)
            data = _recv(sock, struct.unpack(">I", _recv(sock, 4))[0])
    except OSError:  # no server (any more), or it hung: draw here from now on
        _down = True
        return None
    return data if status == _OK else None


def _answer(conn: socket.socket) -> None:
    request = json.loads(_recv(conn, struct.unpack(">I", _recv(conn, 4))[0]))
    if request.get("vl_convert") != vlc.__version__:
        raise ValueError(f"vl-convert {request.get('vl_convert')} asked, {vlc.__version__} here")
    _send(conn, _OK, vlc.vegalite_to_png(request["spec"], scale=float(request["scale"])))


def serve(fd: int) -> None:
    """Draw for whoever connects to the listening Unix socket ``fd``, until killed."""
    listener = socket.socket(fileno=fd)
    vlc.vegalite_to_png(_WARM_SPEC, scale=1.0)
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(TIMEOUT_S)
            try:
                _answer(conn)
            except Exception as exc:  # noqa: BLE001 (the chapter draws it and raises it itself)
                traceback.print_exc(file=sys.stdout)
                sys.stdout.flush()
                try:
                    _send(conn, _ERROR, f"{type(exc).__name__}: {exc}".encode())
                except OSError:
                    pass


if __name__ == "__main__":
    serve(int(sys.argv[1]))
