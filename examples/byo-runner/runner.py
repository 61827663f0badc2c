#!/usr/bin/env python3
"""A bring-your-own orchestrd runner in plain Python (stdlib only).

It speaks Loopr's daemon<->runner protocol: 4-byte big-endian payload length
(the type byte not counted), one type byte, a JSON payload. It joins a lane,
runs each Job with /bin/sh -c (or argv), streams output as OutputChunk frames
whose chunk is a JSON array of byte values (serde's Vec<u8>), answers with a
Result, and sends a Heartbeat every second.

    ORCHESTRD_JOIN_TOKEN=$(orchestrd lane token byo) \
        python3 runner.py LANE SOCKET    e.g. byo ~/.orchestrd/runner-byo.sock

The lane must take bring-your-own runners (external_runners, on by default
for a lane with runners = 0), and the runner proves it may join with the
lane's join token, sent as the handshake's "token" field.

This is an example: no slots limit, timeout or cancel handling.
"""
import json, os, socket, struct, subprocess, sys, threading, time

HANDSHAKE, HANDSHAKE_ACK, JOB, JOB_ACK, RESULT = 0x01, 0x02, 0x10, 0x11, 0x12
OUTPUT_CHUNK, HEARTBEAT, SHUTDOWN = 0x30, 0x40, 0xF0

lane, path = sys.argv[1], sys.argv[2]
token = os.environ.pop("ORCHESTRD_JOIN_TOKEN", "")  # jobs must not inherit it
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
lock = threading.Lock()
started = time.time()
active = 0


def send(kind, obj):
    payload = json.dumps(obj).encode()
    with lock:
        sock.sendall(struct.pack(">IB", len(payload), kind) + payload)


def recv_exact(n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def recv():
    length, kind = struct.unpack(">IB", recv_exact(5))
    return kind, json.loads(recv_exact(length) or b"{}")


def run(job):
    global active
    active += 1
    send(JOB_ACK, {"job_id": job["job_id"], "accepted": True})
    t0 = time.time()
    cmd = job["argv"] or ["/bin/sh", "-c", job["command"]]
    env = dict(os.environ, **(job.get("env") or {}))
    p = subprocess.run(cmd, cwd=job.get("cwd") or None, env=env, capture_output=True)
    for stream, data in (("Stdout", p.stdout), ("Stderr", p.stderr)):
        if data:
            send(OUTPUT_CHUNK, {"job_id": job["job_id"], "chunk": list(data), "stream": stream})
    send(RESULT, {"job_id": job["job_id"], "status": "Success" if p.returncode == 0 else "Failed",
                  "output": (p.stdout + p.stderr).decode(errors="replace"),
                  "exit_code": p.returncode if p.returncode >= 0 else None,
                  "was_timeout": False, "was_cancelled": False,
                  "duration_ms": int((time.time() - t0) * 1000)})
    active -= 1


def heartbeat():
    while True:
        time.sleep(1)
        send(HEARTBEAT, {"active_jobs": active, "uptime_secs": int(time.time() - started),
                         "memory_bytes": 0})


send(HANDSHAKE, {"lane": lane, "pid": os.getpid(), "version": "byo-python/1", "capabilities": ["argv", "command"],
                 "token": token})
kind, ack = recv()
if kind != HANDSHAKE_ACK or not ack.get("accepted"):
    sys.exit("refused: %s" % ack.get("config", {}).get("reason"))
threading.Thread(target=heartbeat, daemon=True).start()
try:
    while True:
        kind, msg = recv()
        if kind == JOB:
            threading.Thread(target=run, args=(msg,), daemon=True).start()
        elif kind == SHUTDOWN:
            break
except EOFError:
    pass
