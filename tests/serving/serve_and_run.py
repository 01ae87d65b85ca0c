#!/usr/bin/env python3
"""Starts `kiln serve` on a free loopback port, runs a client command against it, then stops the server
with SIGTERM and checks that it drains and exits 0.

    serve_and_run.py KILN [--serve-arg ARG ...] -- CLIENT [ARGS ...]

`{url}` in the client's arguments becomes the server's base URL. Exits with the client's status, or 1
when the server fails to start, dies, or does not exit cleanly after SIGTERM.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: serve_and_run.py KILN [--serve-arg ARG ...] -- CLIENT [ARGS ...]")
    cut = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("kiln")
    p.add_argument("--serve-arg", action="append", default=[])
    p.add_argument("--start-timeout", type=float, default=120)
    args = p.parse_args(argv[:cut])
    client = argv[cut + 1:]

    cmd = [args.kiln, "serve", "--port", "0"] + args.serve_arg
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    url = None
    lines = []
    deadline = time.time() + args.start_timeout
    while time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        lines.append(line)
        sys.stderr.write("[server] " + line)
        m = re.search(r"serving .* at (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        server.kill()
        sys.exit("kiln serve did not start:\n" + "".join(lines))

    def pump():
        for line in server.stderr:
            sys.stderr.write("[server] " + line)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    rc = subprocess.call([a.replace("{url}", url) for a in client])
    if server.poll() is not None:
        print(f"kiln serve died during the client run (exit {server.returncode})", file=sys.stderr)
        sys.exit(1)
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        print("kiln serve did not exit within 60 s of SIGTERM", file=sys.stderr)
        sys.exit(1)
    t.join(timeout=5)
    if code != 0:
        print(f"kiln serve exited {code} after SIGTERM", file=sys.stderr)
        sys.exit(1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
