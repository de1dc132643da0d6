#!/usr/bin/env python3
"""Load test of `promptkv serve` on loopback (not part of make test).

Starts the server (or uses --url, which must be a loopback address), then:
  1. reference: every request template once, alone, greedy -> its expected text;
  2. load: C clients x R requests each, templates drawn with a fixed seed (mixed prompt lengths, with and
     without kv_compression, completions and chat, streaming and not), every answer checked against its
     reference (status 200, text, finish_reason, usage); nothing may be lost;
  3. the server's RSS sampled every 0.5 s from /proc; the clients meet halfway through the load, and
     stable memory = the RSS at the end is within --rss-slack of the RSS at that halfway point (the same
     mix of requests run again must not need more memory; the first half warms up thread stacks, the
     slots' buffers and the allocator's arenas).
Prints a Markdown summary (and --json FILE). Bounded: a fixed number of requests, each with a timeout;
the server is stopped with SIGTERM at the end and must exit 0.

  tools/load-test.py --bin build/promptkv --model models/gemma-3-270m-q4_k_m.gguf
  tools/load-test.py --bin build/san/promptkv --clients 8 --requests 50     # under ASan + UBSan

Only the Python standard library is used.
"""
import argparse
import http.client
import ipaddress
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/promptkv")
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--url", help="use a running server (loopback only) instead of starting one")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=50, help="requests per client")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--kv-mem", default="1G")
    ap.add_argument("--text", default="tests/data/english.txt", help="source of prompt text")
    ap.add_argument("--lengths", default="100,400,1200", help="prompt lengths in characters, comma separated")
    ap.add_argument("--budget", type=int, default=64, help="snapkv budget of the compressed templates")
    ap.add_argument("--window", type=int, default=16, help="snapkv window of the compressed templates")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--rss-slack", type=float, default=0.10, help="allowed RSS growth over the second half")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("server_args", nargs="*", help="more flags for promptkv serve (after --)")
    return ap.parse_args()


# ---------------------------------------------------------------- the server


class Server:
    def __init__(self, args):
        self.proc = None
        if args.url:
            u = urllib.parse.urlparse(args.url)
            host = u.hostname
            if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
                sys.exit(f"load-test: {host} is not a loopback address")
            self.host, self.port = host, u.port
            return
        cmd = [args.bin, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0", "--slots",
               str(args.slots), "--kv-mem", args.kv_mem, "--queue", str(args.clients * 2), "--quiet",
               *args.server_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://([^:]+):(\d+)", line)
                if m:
                    self.host, self.port = m.group(1), int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120) or self.proc.poll() is not None:
            sys.exit("load-test: the server did not start:\n" + "".join(self.log))

    def rss_kib(self):
        if not self.proc:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self):
        if not self.proc:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def call(server, path, body, timeout):
    """One request; returns (status, text, finish_reason, usage, error) with streams reassembled."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        return resp.status, None, None, None, payload[:300].decode(errors="replace")
    chat = path.endswith("chat/completions")
    if not body.get("stream"):
        r = json.loads(payload)
        c = r["choices"][0]
        return 200, c["message"]["content"] if chat else c["text"], c["finish_reason"], r["usage"], None
    text, finish, usage = [], None, None
    events = payload.decode().split("\n\n")
    if events[-1] != "" or events[-2] != "data: [DONE]":
        return 200, None, None, None, "stream does not end with data: [DONE]"
    for ev in events[:-2]:
        if not ev.startswith("data: "):
            return 200, None, None, None, f"bad event {ev[:80]!r}"
        r = json.loads(ev[6:])
        if "error" in r:
            return 200, None, None, None, f"error event {r['error']}"
        if r.get("usage"):
            usage = r["usage"]
        for c in r["choices"]:
            text.append((c["delta"].get("content") or "") if chat else c["text"])
            finish = c["finish_reason"] or finish
    return 200, "".join(text), finish, usage, None


# ---------------------------------------------------------------- the requests


def templates(text, args):
    """Mixed prompt lengths (by characters of text), with and without compression, completions and chat."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    doc = " ".join(paragraphs)
    out = []
    for length in (int(x) for x in args.lengths.split(",")):
        for compress in (False, True):
            start = (length * 7) % max(1, len(doc) - length)
            prompt = doc[start:start + length] + "\nQuestion: what is this about? Answer:"
            kv = {"press": "snapkv", "budget": args.budget, "window": args.window} if compress else None
            for chat in (False, True):
                body = {"max_tokens": 4 + (length // 10) % 13, "temperature": 0}
                if chat:
                    body["messages"] = [{"role": "system", "content": "Answer briefly."},
                                        {"role": "user", "content": prompt}]
                else:
                    body["prompt"] = prompt
                if kv:
                    body["kv_compression"] = kv
                out.append(("/v1/chat/completions" if chat else "/v1/completions", body))
    return out


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def main():
    args = parse_args()
    with open(args.text) as f:
        tmpl = templates(f.read(), args)
    server = Server(args)
    rss = []
    stop_sampling = threading.Event()

    def sample():
        while not stop_sampling.is_set():
            v = server.rss_kib()
            if v:
                rss.append((time.time(), v))
            stop_sampling.wait(0.5)

    threading.Thread(target=sample, daemon=True).start()

    # 1. references, one at a time (non-streaming)
    t0 = time.time()
    reference = []
    for path, body in tmpl:
        status, text, finish, usage, err = call(server, path, body, args.timeout)
        if status != 200 or err:
            sys.exit(f"load-test: reference request failed: {status} {err}")
        reference.append((text, finish, usage))
    ref_seconds = time.time() - t0
    rss_after_reference = server.rss_kib()

    # 2. the load
    rng = random.Random(args.seed)
    plan = [[(rng.randrange(len(tmpl)), rng.random() < 0.5) for _ in range(args.requests)]
            for _ in range(args.clients)]
    records = []
    lock = threading.Lock()
    halfway = threading.Barrier(args.clients, action=lambda: mid.append(server.rss_kib()))
    mid = []

    def client(i):
        for j, (k, stream) in enumerate(plan[i]):
            if j == args.requests // 2:
                halfway.wait()
            path, body = tmpl[k]
            body = dict(body, stream=stream)
            if stream:
                body["stream_options"] = {"include_usage": True}
            t = time.time()
            try:
                status, text, finish, usage, err = call(server, path, body, args.timeout)
            except Exception as e:  # a lost request: connection error or timeout
                status, text, finish, usage, err = None, None, None, None, repr(e)
            dt = time.time() - t
            want_text, want_finish, want_usage = reference[k]
            ok = (status == 200 and not err and text == want_text and finish == want_finish and usage is not None
                  and usage["completion_tokens"] == want_usage["completion_tokens"]
                  and usage["prompt_tokens"] == want_usage["prompt_tokens"]
                  and usage["kv_cache_rows"] == want_usage["kv_cache_rows"])
            with lock:
                records.append({"client": i, "template": k, "stream": stream, "status": status, "ok": ok,
                                "seconds": dt, "error": err, "prompt_tokens": usage and usage["prompt_tokens"],
                                "completion_tokens": usage and usage["completion_tokens"],
                                "compressed": "kv_compression" in body,
                                "kv_bytes": usage and usage["kv_cache_bytes"],
                                "kv_bytes_full": usage and usage["kv_cache_bytes_full"]})

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load_seconds = time.time() - t0
    rss_after_load = server.rss_kib()

    metrics = {}
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("GET", "/metrics")
    for line in conn.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            metrics[k] = float(v)
    conn.close()
    stop_sampling.set()
    exit_code = server.stop()

    # ---------------------------------------------------------------- report
    n = len(records)
    good = sum(r["ok"] for r in records)
    lost = args.clients * args.requests - n + sum(r["status"] is None for r in records)
    lat = [r["seconds"] for r in records]
    comp = [r for r in records if r["compressed"] and r["kv_bytes"]]
    tokens = sum((r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0) for r in records)
    rss_values = [v for _, v in rss]
    rss_mid = mid[0] if mid else None
    growth = (rss_after_load - rss_mid) / rss_mid if rss_mid and rss_after_load else 0.0
    stable = rss_mid is None or growth <= args.rss_slack
    result = {
        "clients": args.clients, "requests_per_client": args.requests, "templates": len(tmpl),
        "requests": n, "correct": good, "failed": n - good, "lost": lost,
        "reference_seconds": round(ref_seconds, 1), "load_seconds": round(load_seconds, 1),
        "requests_per_second": round(n / load_seconds, 3), "tokens_per_second": round(tokens / load_seconds, 1),
        "latency_p50": round(percentile(lat, 0.5), 2), "latency_p95": round(percentile(lat, 0.95), 2),
        "latency_max": round(max(lat) if lat else 0, 2),
        "kv_bytes_mean_compressed": round(statistics.mean(r["kv_bytes"] for r in comp)) if comp else None,
        "kv_bytes_full_mean_compressed": round(statistics.mean(r["kv_bytes_full"] for r in comp)) if comp else None,
        "rss_mib_after_reference": rss_after_reference and round(rss_after_reference / 1024, 1),
        "rss_mib_halfway": rss_mid and round(rss_mid / 1024, 1),
        "rss_mib_after_load": rss_after_load and round(rss_after_load / 1024, 1),
        "rss_mib_max": rss_values and round(max(rss_values) / 1024, 1),
        "rss_samples": len(rss_values), "rss_growth": round(growth, 3), "memory_stable": stable,
        "server_exit_code": exit_code,
        "metrics": {k: v for k, v in metrics.items() if k.startswith(("promptkv_requests_total{", "promptkv_prefill_tok",
                                                                        "promptkv_decode_tok", "promptkv_memory",
                                                                        "promptkv_requests_rejected",
                                                                        "promptkv_compression_saved"))},
    }
    failures = [r for r in records if not r["ok"]][:5]
    print(f"## load test: {args.clients} clients x {args.requests} requests, {len(tmpl)} templates\n")
    print("| what | value |\n| --- | --- |")
    for k, v in result.items():
        if k != "metrics":
            print(f"| {k} | {v} |")
    print("\nserver metrics after the load:\n")
    for k, v in result["metrics"].items():
        print(f"    {k} {v:g}")
    for r in failures:
        print(f"FAILED: {r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(result, failures=failures), f, indent=1)
    ok = good == n and lost == 0 and stable and exit_code == 0
    print(f"\n{'PASS' if ok else 'FAIL'}: {good}/{args.clients * args.requests} correct, {lost} lost, "
          f"memory {'stable' if stable else 'grew'} ({growth:+.1%} over the second half), server exit {exit_code}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
