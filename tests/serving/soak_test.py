#!/usr/bin/env python3
"""A bounded soak of a running `kiln serve`: concurrent streamed requests of which a random share
disconnect mid-stream, plus whole requests and malformed ones. Afterwards every request that was not
cut must have completed with a finish reason, the server must still answer, and the engine must hold
nothing: no request running or waiting and (with the prefix cache off) no KV page or state slot in use.

    soak_test.py URL [--api-key K] [--workers 8] [--requests 120] [--seed 1]
"""

import argparse
import http.client
import json
import random
import re
import sys
import threading
import time
import urllib.parse


def metrics(base):
    u = urllib.parse.urlparse(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(kiln:[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$', line)
        if m and m.group(1) not in out:
            out[m.group(1)] = float(m.group(3))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--api-key", default="")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--requests", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    headers = {"Content-Type": "application/json"}
    if a.api_key:
        headers["Authorization"] = "Bearer " + a.api_key
    lock = threading.Lock()
    stats = {"completed": 0, "cut": 0, "rejected": 0, "bad_ok": 0, "errors": []}
    todo = list(range(a.requests))

    def one(i, rng):
        kind = rng.random()
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        if kind < 0.1:  # malformed: the server answers 400 and stays up
            c.request("POST", "/v1/completions", body=rng.choice([b"{", b'{"prompt": 5}', b"\xff\xfe", b"[]"]),
                      headers=headers)
            r = c.getresponse()
            r.read()
            with lock:
                if r.status != 400:
                    stats["errors"].append(f"request {i}: malformed body answered {r.status}")
            c.close()
            return
        stream = kind < 0.8
        body = {"prompt": "soak %d " % i + "word " * rng.randint(1, 40), "max_tokens": rng.randint(1, 48),
                "temperature": rng.choice([0, 0.7]), "stream": stream, "ignore_eos": True}
        if rng.random() < 0.5:
            body["n"] = rng.randint(1, 3) if body["temperature"] else 1
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        r = c.getresponse()
        if r.status in (429, 503):
            r.read()
            with lock:
                stats["rejected"] += 1
            c.close()
            return
        if r.status != 200:
            with lock:
                stats["errors"].append(f"request {i}: status {r.status}: {r.read()[:200]!r}")
            c.close()
            return
        if not stream:
            doc = json.loads(r.read())
            with lock:
                if all(ch.get("finish_reason") in ("length", "stop") for ch in doc["choices"]):
                    stats["completed"] += 1
                else:
                    stats["errors"].append(f"request {i}: finish reasons {[ch.get('finish_reason') for ch in doc['choices']]}")
            c.close()
            return
        cut_after = rng.randint(1, 6) if rng.random() < 0.4 else None
        events, done, finishes = 0, False, 0
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                break
            events += 1
            doc = json.loads(line[6:])
            finishes += sum(1 for ch in doc.get("choices", []) if ch.get("finish_reason"))
            if cut_after is not None and events >= cut_after:
                break
        c.sock.close() if c.sock else None
        c.close()
        with lock:
            if cut_after is not None and not done:
                stats["cut"] += 1
            elif done and finishes >= 1:
                stats["completed"] += 1
            else:
                stats["errors"].append(f"request {i}: stream ended without [DONE] or finish reason")

    def worker(w):
        rng = random.Random(a.seed * 1000 + w)
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            try:
                one(i, rng)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    stats["errors"].append(f"request {i}: {type(e).__name__}: {e}")

    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - t0

    # Cancelled requests free their memory as soon as the engine sees the disconnect.
    deadline = time.time() + 60
    m = {}
    while time.time() < deadline:
        m = metrics(a.url)
        if (m.get("kiln:num_requests_running", 1) == 0 and m.get("kiln:num_requests_waiting", 1) == 0
                and m.get("kiln:kv_cache_usage_perc", 1) == 0 and m.get("kiln:state_cache_usage_perc", 1) == 0):
            break
        time.sleep(0.2)
    leaks = [k for k in ("kiln:num_requests_running", "kiln:num_requests_waiting", "kiln:kv_cache_usage_perc",
                         "kiln:state_cache_usage_perc") if m.get(k, 1) != 0]
    print(f"soak: {a.requests} requests in {took:.1f} s over {a.workers} workers: {stats['completed']} completed, "
          f"{stats['cut']} disconnected mid-stream, {stats['rejected']} rejected (429/503), {len(stats['errors'])} errors")
    for e in stats["errors"][:20]:
        print("  " + e)
    if leaks:
        print("  engine still holds: " + ", ".join(f"{k}={m.get(k)}" for k in leaks))
    sys.exit(1 if stats["errors"] or leaks or stats["completed"] == 0 or stats["cut"] == 0 else 0)


if __name__ == "__main__":
    main()
