#!/usr/bin/env python3
"""Serving throughput of `promptkv serve` against llama-server, side by side (docs/server.md "Batching").

For each server (promptkv batched, promptkv --no-batch, and llama-server when --llama-server is given;
the same GGUF, the same threads, one run) and each stream count N of --streams:
  N clients each send one streaming /v1/completions request at once (their own prompt of about
  --prompt-tokens tokens, greedy, ignore_eos, --tokens tokens); every chunk's arrival is timed.
  Steady state = from the moment every stream has its first token to the moment the first one ends:
  aggregate decode t/s = the chunks all streams received in it / its length; inter-token latency =
  the gaps between a stream's consecutive chunks in it, pooled, p50 and p95.
With --arrival: 4 streams run, then a prompt of --arrival-tokens tokens arrives (max_tokens 1); the
streams' gaps while it is read (from its request to its answer) against their gaps before it, p95.

  tools/serve-bench.py --model models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --threads 2 \\
      --llama-server /path/to/llama-server --streams 1,2,4,8 --arrival

Loopback only; the Python standard library only. Servers are stopped with SIGTERM at the end.
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
ARRIVAL_STREAM_TOKENS = 800  # the running streams outlast the long prompt's read


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--promptkv", default="build/promptkv")
    ap.add_argument("--llama-server", help="a llama-server binary (llama.cpp), run with -np N")
    ap.add_argument("--llama-args", default="", help="more llama-server flags, e.g. --no-repack")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64, help="tokens each stream generates")
    ap.add_argument("--prompt-tokens", type=int, default=256, help="about this many tokens of prompt a stream")
    ap.add_argument("--press", help="kv_compression of promptkv's requests as JSON, e.g. "
                    "'{\"press\": \"snapkv\", \"budget\": 128}'")
    ap.add_argument("--arrival", action="store_true", help="also the long-prompt arrival test")
    ap.add_argument("--arrival-tokens", type=int, default=4096)
    ap.add_argument("--text", default="tests/data/english.txt")
    ap.add_argument("--ctx", type=int, default=0,
                    help="context per slot (default: twice the prompt tokens plus the completion and a margin, "
                         "which fits real tokenizers; a synthetic model's byte-like one needs more)")
    ap.add_argument("--port", type=int, default=18431, help="first port tried")
    ap.add_argument("--skip-no-batch", action="store_true")
    ap.add_argument("--json", help="write the results here too")
    return ap.parse_args()


def wait_ready(port, proc, seconds=120):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection(HOST, port, timeout=2)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
            if ok:
                return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def start(kind, a, n_slots, ctx, port):
    if kind == "llama-server":
        cmd = [a.llama_server, "-m", a.model, "--host", HOST, "--port", str(port), "-np", str(n_slots), "-t",
               str(a.threads), "-c", str(ctx * n_slots), *a.llama_args.split()]
    else:
        # batched, every turn (a decode step or a prefill chunk) has all the threads; without batching the
        # slots run at once and share them out (promptkv serve's defaults)
        threads = a.threads if kind == "promptkv" else max(1, a.threads // n_slots)
        cmd = [a.promptkv, "serve", "-m", a.model, "--host", HOST, "--port", str(port), "--slots", str(n_slots),
               "-t", str(threads), "-c", str(ctx), "--quiet"]
        if kind == "promptkv --no-batch":
            cmd.append("--no-batch")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_ready(port, proc):
        proc.kill()
        sys.exit(f"serve-bench: {kind} did not start: {' '.join(cmd)}")
    return proc


def stream(port, prompt, max_tokens, extra, out):
    """One streaming completion; out gets the chunk arrival times (text chunks only)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, **extra}
    c = http.client.HTTPConnection(HOST, port, timeout=600)
    out["sent"] = time.time()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                d = json.loads(line[6:])
                ch = d.get("choices") or []
                if ch and ch[0].get("text"):
                    times.append(time.time())
    c.close()
    out["times"] = times
    out["status"] = r.status


def prompts_of(text, n, tokens):
    """n different prompts of about `tokens` tokens (4 characters a token)."""
    size = 4 * tokens
    return [text[(i * 997) % (len(text) - size):][:size] for i in range(n)]


def run_streams(port, prompts, tokens, extra):
    outs = [{} for _ in prompts]
    th = [threading.Thread(target=stream, args=(port, p, tokens, extra, o)) for p, o in zip(prompts, outs)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for o in outs:
        if o.get("status") != 200 or len(o.get("times", [])) < 2:
            sys.exit(f"serve-bench: a stream failed: status {o.get('status')}, {len(o.get('times', []))} chunks")
    start_all = max(o["times"][0] for o in outs)
    end_first = min(o["times"][-1] for o in outs)
    if end_first <= start_all:  # one stream ended before another began: no common window, use each whole
        start_all, end_first = min(o["times"][0] for o in outs), max(o["times"][-1] for o in outs)
    n = sum(sum(1 for t in o["times"] if start_all < t <= end_first) for o in outs)
    gaps = [b - a for o in outs for a, b in zip(o["times"], o["times"][1:]) if a >= start_all and b <= end_first]
    return {"tok_per_s": n / (end_first - start_all), "itl_p50_ms": 1e3 * statistics.median(gaps),
            "itl_p95_ms": 1e3 * pct(gaps, 95), "chunks": sum(len(o["times"]) for o in outs)}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_arrival(port, text, a, extra):
    prompts = prompts_of(text, 4, a.prompt_tokens)
    outs = [{} for _ in prompts]
    th = [threading.Thread(target=stream, args=(port, p, ARRIVAL_STREAM_TOKENS, extra, o))
          for p, o in zip(prompts, outs)]
    for t in th:
        t.start()
    time.sleep(3.0)
    big = {}
    long_prompt = (text * 4)[: 4 * a.arrival_tokens]
    stream(port, long_prompt, 1, extra, big)
    for t in th:
        t.join()
    t_in, t_out = big["sent"], big["times"][0] if big["times"] else time.time()
    before = [b - x for o in outs for x, b in zip(o["times"], o["times"][1:]) if b <= t_in and x >= o["times"][0]]
    during = [b - x for o in outs for x, b in zip(o["times"], o["times"][1:]) if x >= t_in and b <= t_out]
    stalls = [b - x for o in outs for x, b in zip(o["times"], o["times"][1:]) if b > t_in and x < t_out]
    return {"prompt_read_s": t_out - t_in, "p95_before_ms": 1e3 * pct(before, 95) if before else None,
            "p95_during_ms": 1e3 * pct(during or stalls, 95) if (during or stalls) else None,
            "max_gap_during_ms": 1e3 * max(stalls) if stalls else None}


def main():
    a = parse_args()
    text = open(a.text, encoding="utf-8").read()
    counts = [int(x) for x in a.streams.split(",")]
    n_slots = max(counts + ([4] if a.arrival else []))
    ctx = a.ctx or max(a.prompt_tokens * 2 + a.tokens + 64, (a.arrival_tokens + 64) if a.arrival else 0,
                       (a.prompt_tokens * 2 + ARRIVAL_STREAM_TOKENS + 64) if a.arrival else 0, 512)
    kinds = ["promptkv"] + ([] if a.skip_no_batch else ["promptkv --no-batch"]) + \
            (["llama-server"] if a.llama_server else [])
    results = {}
    port = a.port
    for kind in kinds:
        proc = start(kind, a, n_slots, ctx, port)
        extra = json.loads(a.press) if a.press and kind.startswith("promptkv") else {}
        if a.press and kind.startswith("promptkv"):
            extra = {"kv_compression": extra}
        try:
            run_streams(port, prompts_of(text, 1, 32), 8, extra)  # warm up
            for n in counts:
                r = run_streams(port, prompts_of(text, n, a.prompt_tokens), a.tokens, extra)
                results[(kind, n)] = r
                print(f"{kind:20s} {n:2d} streams: {r['tok_per_s']:7.2f} t/s, inter-token p50 "
                      f"{r['itl_p50_ms']:6.1f} ms, p95 {r['itl_p95_ms']:6.1f} ms", flush=True)
            if a.arrival:
                r = run_arrival(port, text, a, extra)
                results[(kind, "arrival")] = r
                print(f"{kind:20s} arrival of {a.arrival_tokens} tokens: read in {r['prompt_read_s']:.2f} s, "
                      f"streams' p95 gap {r['p95_before_ms']} ms before, {r['p95_during_ms']} ms while it is "
                      f"read, largest {r['max_gap_during_ms']} ms", flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
        port += 1
    print()
    print("| streams | " + " | ".join(f"{k} t/s (p50 / p95 ms)" for k in kinds) + " |")
    print("| ---: | " + " | ".join("---:" for _ in kinds) + " |")
    for n in counts:
        cells = [f"{results[(k, n)]['tok_per_s']:.1f} ({results[(k, n)]['itl_p50_ms']:.0f} / "
                 f"{results[(k, n)]['itl_p95_ms']:.0f})" for k in kinds]
        print(f"| {n} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{k}|{n}": v for (k, n), v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
