"""Test guest: the hostile guest of ``tests/guests/hostile`` (Rust) in Python, for the
commands that test the sandbox. Passes other records through.

| record | what the guest does |
|---|---|
| ``spin`` | loops forever |
| ``hog`` | allocates 16 MiB after 16 MiB without end |
| ``read-file P`` | emits ``ok <first line>`` or ``err <error>`` |
| ``write-file P`` | creates ``P``; emits ``ok`` or ``err <error>`` |
| ``connect A`` | opens a TCP connection to ``A`` (``host:port``); emits ``ok`` or ``err <error>`` |
| ``env N`` | emits ``ok <value>`` of environment variable ``N`` or ``err <error>`` |
"""

import os
import socket

import weir


def _attempt(f):
    try:
        return f()
    except Exception as e:  # the sandbox's denial, whatever form it takes
        return f"err {type(e).__name__}: {e}"


def _read(path):
    with open(path) as f:
        return "ok " + f.readline().rstrip("\n")


def _write(path):
    with open(path, "w") as f:
        f.write("escaped\n")
    return "ok"


def _connect(address):
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=2):
        return "ok"


def _env(name):
    value = os.environ.get(name)
    return "err not set" if value is None else "ok " + value


class Hostile(weir.Operator):
    def process(self, ctx, record):
        command, _, arg = record.value_str().partition(" ")
        if command == "spin":
            while True:
                pass
        elif command == "hog":
            hoard = []
            while True:
                hoard.append(bytearray(16 << 20))
        elif command == "read-file":
            ctx.emit(record.key, _attempt(lambda: _read(arg)))
        elif command == "write-file":
            ctx.emit(record.key, _attempt(lambda: _write(arg)))
        elif command == "connect":
            ctx.emit(record.key, _attempt(lambda: _connect(arg)))
        elif command == "env":
            ctx.emit(record.key, _attempt(lambda: _env(arg)))
        else:
            ctx.emit(record.key, record.value)


Operator = weir.export(Hostile)
