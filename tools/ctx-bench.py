#!/usr/bin/env python3
"""Stored contexts against fresh prefills in `promptkv serve` (docs/server.md "Stored contexts").

Starts a server on loopback (one slot), builds a context of about --tokens tokens from
tests/data/english.txt (repeated from its start when it is shorter), then measures, streamed, the time to
first token (TTFT: from sending the request to the first text of the answer) of:
  1. fresh: --fresh chat requests, each the whole prompt (system, the document and a question in the user
     message) pressed as the context is (same kv_compression), as a server without a store must do;
  2. stored: the context made once (POST /v1/contexts, timed), then --questions different questions by
     context_id, each a copy of the stored cache with the question and the template's tail prefilled.
and the memory a stored context holds (its cache, tokens and logits: "memory_bytes") against its full cache
("kv_cache_bytes_full") and against its compressed cache. Prints a Markdown table and the ratios (the
machine may be shared: the ratios are the figures); --json FILE writes every number.

  tools/ctx-bench.py --bin build/promptkv --model models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Only the Python standard library is used.
"""
import argparse
import http.client
import json
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

QUESTIONS = ["Question: what were the earliest warning lights?", "Question: why were the fires hard to keep?",
             "Question: who tended the lights?", "Question: what replaced the open fires?",
             "Question: how far could a light be seen?", "Question: what does the text say about fog?",
             "Question: which lighthouse is the most famous?", "Question: what is the text about?"]
SYSTEM = "Answer from the document in one sentence."


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/promptkv")
    ap.add_argument("--model", default="models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--tokens", type=int, default=4096, help="the context's length in tokens (about)")
    ap.add_argument("--fresh", type=int, default=2, help="questions asked with a fresh prefill of the whole prompt")
    ap.add_argument("--questions", type=int, default=5, help="questions asked of the stored context")
    ap.add_argument("--press", default='{"press": "tova", "ratio": 0.5}',
                    help="kv_compression of the context (JSON; default: the server's default for contexts)")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="-t of the server (0: its default)")
    ap.add_argument("--json", help="write the measurements here")
    return ap.parse_args()


class Server:
    def __init__(self, args):
        cmd = [args.bin, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0", "--slots", "1",
               "-c", str(args.tokens + 1024), "--quiet"]
        if args.threads:
            cmd += ["-t", str(args.threads)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(120)
        if not self.port:
            self.proc.kill()
            sys.exit("ctx-bench: the server did not start")

    def call(self, method, path, body=None, timeout=1800):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if resp.status != 200:
            sys.exit(f"ctx-bench: {method} {path}: {resp.status} {data[:300]!r}")
        return json.loads(data)

    def ttft(self, body):
        """Streams a chat request: seconds to the first text, the whole text, the usage."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1800)
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            sys.exit(f"ctx-bench: chat: {resp.status} {resp.read()[:300]!r}")
        first, text, usage = None, "", None
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if first is None:
                        first = time.monotonic() - t0
                    text += piece
        conn.close()
        return first if first is not None else time.monotonic() - t0, text, usage

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


def make_doc(args):
    with open("tests/data/english.txt", encoding="utf-8") as f:
        base = f.read()
    text = base
    while True:
        out = subprocess.run([args.bin, "tokenize", "-m", args.model, "-p", text], capture_output=True, text=True,
                             check=True)
        n = len(out.stdout.split())
        if n >= args.tokens:
            break
        text += "\n\n" + base
    # cut at a word so that the count is about --tokens
    cut = int(len(text) * args.tokens / n)
    text = text[:text.rfind(" ", 0, cut)] + "\n"
    return text


def main():
    args = parse_args()
    if args.fresh + args.questions > len(QUESTIONS) * 2:
        sys.exit("ctx-bench: too many questions")
    press = json.loads(args.press)
    doc = make_doc(args)
    srv = Server(args)
    out = {"model": args.model, "press": press, "fresh": [], "stored": []}
    try:
        qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.fresh + args.questions)]
        for q in qs[:args.fresh]:
            t, text, usage = srv.ttft({"messages": [{"role": "system", "content": SYSTEM},
                                                    {"role": "user", "content": doc + q}],
                                       "max_tokens": args.max_tokens, "temperature": 0, "kv_compression": press})
            out["fresh"].append({"question": q, "ttft_s": t, "prompt_tokens": usage["prompt_tokens"], "text": text})
            print(f"fresh  {t:8.3f} s  {usage['prompt_tokens']} prompt tokens  {text!r}", flush=True)
        t0 = time.monotonic()
        ctx = srv.call("POST", "/v1/contexts", {"messages": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": doc}],
                                                "kv_compression": press})
        out["context"] = dict(ctx, create_s=time.monotonic() - t0)
        print(f"context {out['context']['create_s']:7.3f} s  {ctx['tokens']} tokens  {ctx['kv_press']}", flush=True)
        for q in qs[args.fresh:]:
            t, text, usage = srv.ttft({"messages": [{"role": "user", "content": q}], "max_tokens": args.max_tokens,
                                       "temperature": 0, "context_id": ctx["id"]})
            out["stored"].append({"question": q, "ttft_s": t, "prompt_tokens": usage["prompt_tokens"], "text": text})
            print(f"stored {t:8.3f} s  {usage['prompt_tokens']} prompt tokens  {text!r}", flush=True)
    finally:
        code = srv.stop()
    fresh = statistics.median(r["ttft_s"] for r in out["fresh"])
    stored = statistics.median(r["ttft_s"] for r in out["stored"])
    c = out["context"]
    out["summary"] = {"ttft_fresh_median_s": fresh, "ttft_stored_median_s": stored, "ttft_ratio": fresh / stored,
                      "memory_bytes": c["memory_bytes"], "kv_cache_bytes": c["kv_cache_bytes"],
                      "kv_cache_bytes_full": c["kv_cache_bytes_full"],
                      "full_over_memory": c["kv_cache_bytes_full"] / c["memory_bytes"], "server_exit": code}
    print()
    print(f"| context | press | TTFT fresh (median of {len(out['fresh'])}) | TTFT stored (median of "
          f"{len(out['stored'])}) | fresh / stored | stored context memory | its cache | full cache | "
          f"full / memory |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {c['tokens']} tokens | {c['kv_press']} | {fresh:.2f} s | {stored:.3f} s | {fresh / stored:.0f}x | "
          f"{c['memory_bytes'] / 2**20:.1f} MiB | {c['kv_cache_bytes'] / 2**20:.1f} MiB | "
          f"{c['kv_cache_bytes_full'] / 2**20:.1f} MiB | {c['kv_cache_bytes_full'] / c['memory_bytes']:.2f}x |")
    print(f"making the context (once): {c['create_s']:.2f} s; server exit {code}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
