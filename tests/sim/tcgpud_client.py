#!/usr/bin/env python3
"""A raw client of tcgpud's socket, for the hostile-user tests.

    tcgpud_client.py SOCKET send MESSAGE...
        one connection per MESSAGE (e.g. "register project=batch device=0
        total=1"): print tcgpud's final reply to each, one line each.

    tcgpud_client.py SOCKET flood COUNT SECONDS [follow|idle|hangup]
        keep COUNT connections open for SECONDS, reopening each one tcgpud
        closes: "follow" ones ask for `events follow=1` and never read,
        "idle" ones send nothing; "hangup" ones ask for `ps` and close at
        once, so that tcgpud's reply finds no reader. At the end print
        "opened=N turned_away=T held_max=H", where turned_away counts the
        connections tcgpud answered with EAGAIN and held_max is the most
        that were open and not turned away at one time.
"""
import os
import select
import socket
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.setblocking(False)
    return s


def final_reply(s, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([s], [], [], max(0, deadline - time.monotonic()))
        if not r:
            break
        try:
            m = s.recv(65536)
        except (ConnectionResetError, BlockingIOError):
            m = b''
        if not m:
            return 'closed'
        text = m.decode(errors='replace')
        if text.startswith(('ok', 'error')):
            return text.replace('\n', ' ')
    return 'timeout'


def send(path, messages):
    for msg in messages:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.send(msg.encode())
        print(final_reply(s), flush=True)
        s.close()


def open_one(path, mode):
    s = connect(path)
    if mode == 'follow':
        try:
            s.send(b'events follow=1')
        except OSError:
            pass
    return s


def turned_away(s):
    """Whether s has been answered "error EAGAIN" (or closed): read what waits."""
    while True:
        try:
            m = s.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not m:
            return True
        if m.startswith(b'error EAGAIN'):
            return True


def hang_up(path):
    s = connect(path)
    try:
        s.send(b'ps')
    except OSError:
        pass
    s.close()


def flood(path, count, seconds, mode):
    conns, opened, away, held_max = [], 0, 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while len(conns) < count:
            try:
                if mode == 'hangup':
                    hang_up(path)
                else:
                    conns.append(open_one(path, mode))
                opened += 1
            except OSError:
                away += 1           # refused at connect: the backlog is full
                break
            if mode == 'hangup' and opened % count == 0:
                break               # a round of COUNT, then the pause
        time.sleep(0.05)
        alive = []
        for s in conns:
            if turned_away(s):
                away += 1
                s.close()
            else:
                alive.append(s)
        conns = alive
        held_max = max(held_max, len(conns))
    print('opened=%d turned_away=%d held_max=%d' % (opened, away, held_max), flush=True)


def main(argv):
    path, cmd = argv[1], argv[2]
    if cmd == 'send':
        send(path, argv[3:])
    elif cmd == 'flood':
        flood(path, int(argv[3]), float(argv[4]), argv[5] if len(argv) > 5 else 'follow')
    else:
        sys.exit('usage: tcgpud_client.py SOCKET send MSG... | flood COUNT SECONDS [follow|idle|hangup]')


if __name__ == '__main__':
    main(sys.argv)
