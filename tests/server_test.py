"""Integration tests of `promptkv serve`: the official OpenAI client (and raw
HTTP where the client hides what is checked) against servers started here on
127.0.0.1 with a free port. Prints one line per test and ends with
"N passed, N failed".

usage: server_test.py PROMPTKV   (from the repository root)

The tiny fixture model (random weights, context 128) checks the protocol; the
real model (models/gemma-3-270m-q4_k_m.gguf, when present) checks the text
against `promptkv run` and gives requests long enough to interrupt.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import openai

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/promptkv"
TINY = "tests/fixtures/models/tiny-gemma3-f32.gguf"
REAL = "models/gemma-3-270m-q4_k_m.gguf"
QWEN = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
HOST = "127.0.0.1"

# ---------------------------------------------------------------- harness

results = {"pass": 0, "fail": 0}
servers = []  # every server started, for the sanitizer check at the end


def run_test(name, fn, *args):
    try:
        fn(*args)
        results["pass"] += 1
        print(f"ok   server_{name}", flush=True)
    except Exception as e:  # a failed check or an unexpected error: both fail the test
        results["fail"] += 1
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        print(f"FAIL server_{name}: {detail}", flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Server:
    """promptkv serve on a free loopback port; stderr kept for the checks."""

    def __init__(self, model, *args):
        self.proc = subprocess.Popen([BIN, "serve", "-m", model, "--host", HOST, "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        servers.append(self)
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(30)
        if not self.port:
            self.proc.kill()
            raise RuntimeError("server did not start: " + "".join(self.lines))
        self.client = openai.OpenAI(base_url=f"http://{HOST}:{self.port}/v1", api_key="unused", max_retries=0,
                                    timeout=120)

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.reader.join(10)  # the last lines of stderr
        return code

    # raw HTTP, for status codes, headers and bodies exactly as sent
    def request(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), payload

    def post(self, path, body, **kw):
        status, headers, payload = self.request("POST", path, body, **kw)
        return status, json.loads(payload) if payload.startswith(b"{") else payload

    def metrics(self):
        status, _, payload = self.request("GET", "/metrics")
        check(status == 200, f"/metrics status {status}")
        values = {}
        for line in payload.decode().splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values


def error_of(status, body, want_status, want_code=None, want_param=None):
    """The OpenAI error shape, with the expected status, code and param."""
    check(status == want_status, f"status {status}, want {want_status}: {body}")
    check(isinstance(body, dict) and set(body) == {"error"}, f"not an error object: {body}")
    err = body["error"]
    check(set(err) == {"message", "type", "param", "code"}, f"error fields {sorted(err)}")
    check(isinstance(err["message"], str) and err["message"], "empty message")
    if want_code is not None:
        check(err["code"] == want_code, f"code {err['code']!r}, want {want_code!r} ({err['message']})")
    if want_param is not None:
        check(err["param"] == want_param, f"param {err['param']!r}, want {want_param!r}")
    return err


def sse_events(payload):
    """The data lines of an event stream, in order; every event is 'data: ...' then a blank line."""
    text = payload.decode()
    check(text.endswith("\n\n"), "stream does not end with a blank line")
    events = []
    for block in text.split("\n\n")[:-1]:
        check(block.startswith("data: "), f"event without data: {block[:80]!r}")
        events.append(block[len("data: "):])
    return events


def cli_tokens(model, text):
    out = subprocess.run([BIN, "tokenize", "-m", model, "-p", text], capture_output=True, text=True, check=True)
    return len(out.stdout.split())


def cli_run(model, *args):
    out = subprocess.run([BIN, "run", "-m", model, *args], capture_output=True, check=True)
    return out.stdout.decode()[:-1]  # run ends the completion with a newline


LONG = ("The museum opens at nine. Tickets cost four euros. The cafe is on the second floor, "
        "and the garden closes at dusk. Guided tours leave every hour from the main hall.")

# ---------------------------------------------------------------- protocol (tiny model)


def test_models(s):
    models = s.client.models.list()
    check([m.id for m in models.data] == ["tiny-gemma3-f32"], f"models {[m.id for m in models.data]}")
    check(models.data[0].object == "model", "object")
    one = s.client.models.retrieve("tiny-gemma3-f32")
    check(one.id == "tiny-gemma3-f32", "retrieve")
    status, _, payload = s.request("GET", "/v1/models/nope")
    error_of(status, json.loads(payload), 404, "model_not_found")


def test_health(s):
    status, headers, payload = s.request("GET", "/health")
    check(status == 200 and json.loads(payload) == {"status": "ok"}, f"{status} {payload}")
    check(headers.get("Content-Type") == "application/json", headers.get("Content-Type"))


def test_completion(s):
    prompt = "Hello world, this is"
    r = s.client.completions.create(model="tiny-gemma3-f32", prompt=prompt, max_tokens=8, temperature=0)
    check(r.object == "text_completion" and r.id.startswith("cmpl-"), f"{r.object} {r.id}")
    check(len(r.choices) == 1 and r.choices[0].index == 0, "one choice")
    c = r.choices[0]
    check(c.finish_reason in ("length", "stop"), c.finish_reason)
    check(r.usage.prompt_tokens == cli_tokens(TINY, prompt), f"prompt_tokens {r.usage.prompt_tokens}")
    if c.finish_reason == "length":
        check(r.usage.completion_tokens == 8, f"completion_tokens {r.usage.completion_tokens}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")
    # the uncompressed cache: every row kept
    u = r.usage.model_extra
    check(u["kv_cache_rows"] == u["kv_cache_rows_full"] and u["kv_cache_bytes"] == u["kv_cache_bytes_full"],
          f"uncompressed usage {u}")
    check(u["kv_press"] == "none", u["kv_press"])


def test_completion_token_ids(s):
    ids = [2, 76, 376, 501]
    r = s.client.completions.create(model="m", prompt=ids, max_tokens=2, temperature=0)
    check(r.usage.prompt_tokens == 4, f"prompt_tokens {r.usage.prompt_tokens}")
    status, body = s.post("/v1/completions", {"prompt": [2, 9999], "max_tokens": 2})
    error_of(status, body, 400, "invalid_value", "prompt")


def test_chat(s):
    r = s.client.chat.completions.create(
        model="tiny-gemma3-f32", max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Name a colour."}])
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"{r.object} {r.id}")
    m = r.choices[0].message
    check(m.role == "assistant" and isinstance(m.content, str), f"{m.role} {m.content!r}")
    check(r.choices[0].finish_reason in ("length", "stop"), r.choices[0].finish_reason)
    # the Gemma template: <bos><start_of_turn>user\nBe terse.\n\nName a colour.<end_of_turn>\n<start_of_turn>model\n
    rendered = ("<bos><start_of_turn>user\nBe terse.\n\nName a colour.<end_of_turn>\n"
                "<start_of_turn>model\n")
    out = subprocess.run([BIN, "tokenize", "-m", TINY, "-p", rendered, "--no-special"], capture_output=True,
                         text=True, check=True)
    check(r.usage.prompt_tokens == len(out.stdout.split()), f"prompt_tokens {r.usage.prompt_tokens}")


def test_stream_completion(s):
    args = dict(model="m", prompt="Once upon a time", max_tokens=12, temperature=0)
    whole = s.client.completions.create(**args)
    chunks = list(s.client.completions.create(stream=True, **args))
    check(all(c.object == "text_completion" for c in chunks), "chunk objects")
    check(len({c.id for c in chunks}) == 1, "one id per stream")
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check(text == whole.choices[0].text, f"stream {text!r} != whole {whole.choices[0].text!r}")
    check(chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason, "finish_reason")
    check(all(c.choices[0].finish_reason is None for c in chunks[:-1]), "finish_reason only at the end")
    # the wire format: data events, the last one [DONE]
    status, headers, payload = s.request("POST", "/v1/completions", dict(stream=True, **args))
    check(status == 200 and headers.get("Content-Type") == "text/event-stream", f"{status} {headers}")
    events = sse_events(payload)
    check(events[-1] == "[DONE]", f"last event {events[-1]!r}")
    for e in events[:-1]:
        json.loads(e)


def test_stream_chat(s):
    args = dict(model="m", max_tokens=10, temperature=0, messages=[{"role": "user", "content": "Tell a story."}])
    whole = s.client.chat.completions.create(**args)
    chunks = list(s.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    check(all(c.object == "chat.completion.chunk" for c in chunks), "chunk objects")
    check(chunks[0].choices[0].delta.role == "assistant", "the first delta names the role")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(text == whole.choices[0].message.content, f"stream {text!r} != whole {whole.choices[0].message.content!r}")
    with_choice = [c for c in chunks if c.choices]
    check(with_choice[-1].choices[0].finish_reason == whole.choices[0].finish_reason, "finish_reason")
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None, "usage chunk last")
    check(last.usage.completion_tokens == whole.usage.completion_tokens and
          last.usage.prompt_tokens == whole.usage.prompt_tokens, "usage matches")
    check(all(c.usage is None for c in chunks[:-1]), "usage null before the end")


def test_compression(s):
    n_prompt = cli_tokens(TINY, LONG)
    budget = 16
    r = s.client.completions.create(model="m", prompt=LONG, max_tokens=4, temperature=0,
                                    extra_body={"kv_compression": {"press": "snapkv", "budget": budget, "window": 4}})
    u = r.usage.model_extra
    check(r.usage.prompt_tokens == n_prompt, "prompt tokens")
    check(u["kv_cache_rows"] < u["kv_cache_rows_full"], f"rows {u['kv_cache_rows']} !< {u['kv_cache_rows_full']}")
    check(u["kv_cache_bytes"] < u["kv_cache_bytes_full"], "bytes")
    # tiny-gemma3: one full-attention layer with one KV head keeps `budget` of the prompt's rows
    check(u["kv_cache_rows_full"] - u["kv_cache_rows"] == n_prompt - budget,
          f"removed {u['kv_cache_rows_full'] - u['kv_cache_rows']} rows, want {n_prompt - budget}")
    check(u["kv_press"] == "snapkv budget=16 window=4", u["kv_press"])
    # ratio, and another press
    r = s.client.completions.create(model="m", prompt=LONG, max_tokens=2, temperature=0,
                                    extra_body={"kv_compression": {"press": "streamingllm", "ratio": 0.5}})
    u = r.usage.model_extra
    check(u["kv_cache_rows_full"] - u["kv_cache_rows"] == n_prompt - n_prompt // 2, f"ratio 0.5: {u}")
    # the presses that need no question: each halves the full-attention layer's rows
    for press in ("keydiff", "expected_attention"):
        r = s.client.completions.create(model="m", prompt=LONG, max_tokens=2, temperature=0,
                                        extra_body={"kv_compression": {"press": press, "ratio": 0.5}})
        u = r.usage.model_extra
        check(u["kv_cache_rows_full"] - u["kv_cache_rows"] == n_prompt - n_prompt // 2, f"{press} ratio 0.5: {u}")
    # kvzip's passes would push the context out of tiny-gemma3's sliding-window layers: a 400
    status, body = s.post("/v1/completions", {"prompt": LONG, "max_tokens": 2,
                                              "kv_compression": {"press": "kvzip", "ratio": 0.5}})
    error_of(status, body, 400, "invalid_value")
    check("sliding window" in body["error"]["message"], body["error"]["message"])
    m = s.metrics()
    check(m["promptkv_compression_saved_bytes_total"] > 0, "saved bytes counted")


def test_compression_chat_options(s):
    system = "You are a museum guide."
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": LONG[:80]}]
    kv = {"press": "snapkv", "budget": 12, "window": 4}
    plain = s.client.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0,
                                             extra_body={"kv_compression": kv})
    protected = s.client.chat.completions.create(
        model="m", messages=msgs, max_tokens=2, temperature=0,
        extra_body={"kv_compression": dict(kv, protect_system=True)})
    rows, rows_p = plain.usage.model_extra["kv_cache_rows"], protected.usage.model_extra["kv_cache_rows"]
    check(rows_p > rows, f"protecting the system prompt keeps more rows ({rows_p} vs {rows})")
    agnostic = s.client.chat.completions.create(
        model="m", messages=msgs, max_tokens=2, temperature=0,
        extra_body={"kv_compression": dict(kv, mode="query_agnostic")})
    u = agnostic.usage.model_extra
    check(u["kv_cache_rows"] > rows, f"query_agnostic keeps the question's rows too: {u['kv_cache_rows']} vs {rows}")
    check(u["kv_cache_rows"] < u["kv_cache_rows_full"], "still compressed")
    # protect_system without a system message, or on a completion: refused
    status, body = s.post("/v1/chat/completions", {"messages": msgs[1:], "kv_compression": dict(kv, protect_system=True)})
    error_of(status, body, 400, "invalid_value", "kv_compression.protect_system")
    status, body = s.post("/v1/completions", {"prompt": "x", "kv_compression": dict(kv, protect_system=True)})
    error_of(status, body, 400, "invalid_value", "kv_compression.protect_system")


def test_seed(s):
    args = dict(model="m", prompt="Once upon a time", max_tokens=16, temperature=1.0)
    a = s.client.completions.create(seed=7, **args).choices[0].text
    b = s.client.completions.create(seed=7, **args).choices[0].text
    c = s.client.completions.create(seed=8, **args).choices[0].text
    check(a == b, "the same seed gives the same text")
    check(a != c, "another seed gives another text")


def test_max_tokens(s):
    r = s.client.completions.create(model="m", prompt="Once", max_tokens=5, temperature=0)
    if r.choices[0].finish_reason == "length":
        check(r.usage.completion_tokens == 5, f"{r.usage.completion_tokens}")
    # completions without max_tokens: OpenAI's default of 16
    r = s.client.completions.create(model="m", prompt="Once", temperature=0)
    check(r.usage.completion_tokens <= 16, f"{r.usage.completion_tokens}")
    if r.choices[0].finish_reason == "length":
        check(r.usage.completion_tokens == 16, "default 16")
    # ignore_eos: always max_tokens tokens; not a boolean: a 400 naming it
    status, out = s.post("/v1/completions", {"prompt": "Once", "max_tokens": 40, "temperature": 0, "ignore_eos": True})
    check(status == 200 and out["usage"]["completion_tokens"] == 40 and out["choices"][0]["finish_reason"] == "length",
          f"ignore_eos: {status} {out}")
    status, out = s.post("/v1/completions", {"prompt": "Once", "ignore_eos": "yes"})
    check(status == 400 and "ignore_eos" in json.dumps(out), f"ignore_eos 'yes': {status} {out}")


def test_errors(s):
    p = "/v1/completions"
    error_of(*s.post(p, b"{not json"), 400, "invalid_json")
    error_of(*s.post(p, b"[1, 2]"), 400, "invalid_json")
    error_of(*s.post(p, {"prompt": 5}), 400, "invalid_type", "prompt")
    error_of(*s.post(p, {"prompt": "hi", "max_tokens": "ten"}), 400, "invalid_type", "max_tokens")
    error_of(*s.post(p, {"prompt": "hi", "temperature": 3}), 400, "invalid_value", "temperature")
    error_of(*s.post(p, {"prompt": "hi", "stream": "yes"}), 400, "invalid_type", "stream")
    error_of(*s.post(p, {"prompt": "hi", "stop": 5}), 400, "invalid_type", "stop")
    error_of(*s.post(p, {}), 400, "missing_field", "prompt")
    error_of(*s.post(p, {"prompt": ["a", "b"]}), 400, "unsupported_value", "prompt")
    error_of(*s.post(p, {"prompt": "hi", "n": 2}), 400, "unsupported_value", "n")
    err = error_of(*s.post(p, {"prompt": "hi", "logprobs": 1}), 400, "unsupported_parameter", "logprobs")
    check("logprobs" in err["message"], err["message"])
    error_of(*s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}),
             400, "unsupported_parameter", "logprobs")
    error_of(*s.post(p, {"prompt": "hi", "kv_compression": {"press": "nope"}}), 400, "invalid_value",
             "kv_compression.press")
    error_of(*s.post(p, {"prompt": "hi", "kv_compression": {"press": "snapkv", "budget": 8, "frob": 1}}), 400,
             "invalid_value", "kv_compression.frob")
    error_of(*s.post(p, {"prompt": "hi", "kv_compression": {"press": "snapkv", "budget": "many"}}), 400,
             "invalid_value", "kv_compression.budget")
    error_of(*s.post(p, {"prompt": "hi", "kv_compression": {"press": "snapkv"}}), 400, "invalid_value",
             "kv_compression")
    error_of(*s.post(p, {"prompt": "hi", "kv_compression": "snapkv"}), 400, "invalid_type", "kv_compression")
    # refused by the engine in the prefill, after admission (nothing generated): whole and streamed
    odd = {"prompt": LONG[:60], "kv_compression": {"press": "snapkv", "ratio": 0.999, "window": 4}}
    error_of(*s.post(p, odd), 400, "invalid_value")
    error_of(*s.post(p, dict(odd, stream=True)), 400, "invalid_value")
    # the context (128 tokens) and the token limit (--max-tokens 64)
    error_of(*s.post(p, {"prompt": "word " * 200}), 400, "context_length_exceeded", "prompt")
    error_of(*s.post(p, {"prompt": LONG, "max_tokens": 60}), 400, "context_length_exceeded", "max_tokens")
    error_of(*s.post(p, {"prompt": "hi", "max_tokens": 65}), 400, "max_tokens_exceeded", "max_tokens")
    error_of(*s.post(p, {"prompt": "hi", "max_tokens": 0}), 400, "invalid_value", "max_tokens")
    # chat shapes
    c = "/v1/chat/completions"
    error_of(*s.post(c, {"messages": []}), 400, "invalid_value", "messages")
    error_of(*s.post(c, {"messages": "hi"}), 400, "invalid_type", "messages")
    error_of(*s.post(c, {"messages": [{"role": "tool", "content": "x"}]}), 400, "invalid_value", "messages[0].role")
    error_of(*s.post(c, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}), 400,
             "unsupported_value", "messages[0].content")
    error_of(*s.post(c, {"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]}), 400,
             "invalid_value", "messages")  # Gemma's template needs alternating roles
    # tools and formats are refused by both endpoints, not ignored
    for field, value in [("tools", [{"type": "function", "function": {"name": "f"}}]), ("tool_choice", "auto"),
                         ("functions", [{"name": "f"}]), ("function_call", "auto"),
                         ("response_format", {"type": "json_object"})]:
        error_of(*s.post(p, {"prompt": "hi", field: value}), 400, "unsupported_parameter", field)
        error_of(*s.post(c, {"messages": [{"role": "user", "content": "x"}], field: value}), 400,
                 "unsupported_parameter", field)
    check(s.post(p, {"prompt": "hi", "max_tokens": 1, "response_format": {"type": "text"}, "tools": []})[0] == 200,
          "neutral tools and response_format accepted")
    # a message's content is required (OpenAI allows it absent or null only beside tool calls, refused here)
    for msg in [{"role": "user"}, {"role": "user", "content": None}, {"role": "system", "content": None},
                {"role": "assistant"}]:
        msgs = [msg] if msg["role"] == "user" else [msg, {"role": "user", "content": "x"}]
        error_of(*s.post(c, {"messages": msgs}), 400, "missing_field", "messages[0].content")
    error_of(*s.post(c, {"messages": [{"role": "user", "content": "x"},
                                      {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]}),
             400, "unsupported_parameter", "messages[1].tool_calls")
    check(s.post(c, {"messages": [{"role": "user", "content": ""}], "max_tokens": 1})[0] == 200, "empty content")
    # paths and methods
    status, _, payload = s.request("GET", "/v1/nothing")
    error_of(status, json.loads(payload), 404, "unknown_url")
    status, headers, payload = s.request("GET", p)
    error_of(status, json.loads(payload), 405)
    check(headers.get("Allow") == "POST", headers)
    # the official client turns these into exceptions with the fields
    try:
        s.client.completions.create(model="m", prompt="hi", n=2)
        check(False, "n=2 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.code == "unsupported_value" and e.param == "n", f"{e}")


def test_body_limit(s):
    big = json.dumps({"prompt": "x" * 70000})  # the server runs with --max-body 64K
    status, _, payload = s.request("POST", "/v1/completions", big)
    error_of(status, json.loads(payload), 413, "request_too_large")
    # without a Content-Length (chunked): read, dropped, then 413
    conn = http.client.HTTPConnection(HOST, s.port, timeout=30)
    conn.request("POST", "/v1/completions", body=iter([big[:40000].encode(), big[40000:].encode()]),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    error_of(resp.status, json.loads(resp.read()), 413, "request_too_large")
    conn.close()


def raw_http(port, data, half_close=False, timeout=30):
    """Sends bytes as they are and reads until the server closes."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    return out


def parse_response(raw):
    """(status, headers, body) of the final response, after any interim 1xx ones; checks the framing."""
    interim = 0
    while raw.startswith(b"HTTP/1.1 1"):
        head, _, raw = raw.partition(b"\r\n\r\n")
        interim += 1
    head, sep, body = raw.partition(b"\r\n\r\n")
    check(sep, f"no complete response: {raw[:200]!r}")
    lines = head.decode("latin-1").split("\r\n")
    check(re.fullmatch(r"HTTP/1\.1 \d{3} [A-Za-z ]+", lines[0]) is not None, f"status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        check(len(body) == int(headers["content-length"]), f"body of {len(body)} bytes, Content-Length {headers}")
    check(re.match(rb"HTTP/\d\.\d \d{3} ", body) is None, "a second status line after the response")
    return int(lines[0].split()[1]), headers, body, interim


def http_error(port, data, want_status, want_code, want_in_message=None):
    status, headers, body, _ = parse_response(raw_http(port, data))
    check(headers.get("content-type") == "application/json", f"{want_status}: content type {headers}")
    check(headers.get("connection") == "close", f"{want_status}: the connection is not closed {headers}")
    err = error_of(status, json.loads(body), want_status, want_code)
    if want_in_message:
        check(want_in_message in err["message"], err["message"])


def test_http_framing_errors(s):
    """Errors below the JSON layer: each an OpenAI error object, one status line, Connection: close."""
    port = s.port
    body = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
    post = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    http_error(port, b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431,
               "headers_too_large")
    http_error(port, b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431,
               "headers_too_large")
    http_error(port, post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, "malformed_request",
               "hexadecimal")
    http_error(port, post + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 400, "malformed_request",
               "CRLF")
    http_error(port, post + b"Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\nabc\r\n0\r\n\r\n", 413,
               "request_too_large")
    http_error(port, post + b"Transfer-Encoding: chunked\r\n\r\n10001\r\nabc", 413, "request_too_large")  # > 64K
    http_error(port, post + b"Content-Length: -1\r\n\r\n", 400, "malformed_request", "'-1'")
    http_error(port, post + b"Content-Length: abc\r\n\r\n", 400, "malformed_request", "'abc'")
    http_error(port, post + b"Content-Length: 99999999999999999999999\r\n\r\n", 413, "request_too_large")
    # two Content-Length fields that disagree (RFC 9112 §6.3: a smuggling risk behind a proxy)
    http_error(port, post + b"Content-Length: 5\r\nContent-Length: %d\r\n\r\n" % len(body) + body, 400,
               "malformed_request", "conflicting Content-Length")
    http_error(port, post + b"Content-Length: 5, %d\r\n\r\n" % len(body) + body, 400, "malformed_request",
               "conflicting")
    http_error(port, post + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
               "malformed_request", "both Content-Length and Transfer-Encoding")
    http_error(port, post + b"Transfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding", "gzip")
    http_error(port, b"GET /health HTTP/2.0\r\nHost: t\r\n\r\n", 505, "http_version_not_supported")
    http_error(port, b"GET /health HTTP/1.1\r\n\r\n", 400, "malformed_request", "Host")
    http_error(port, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "malformed_request", "Host")
    http_error(port, b"GET /health HTTP/1.1\nHost: t\n\n", 400, "malformed_request", "bare LF")
    http_error(port, b"GET /health HTTP/1.1\r\nHost: t\r\nX-A: b\r\n  folded\r\n\r\n", 400, "malformed_request",
               "folding")
    http_error(port, b"GET /health HTTP/1.1\r\nHost : t\r\n\r\n", 400, "malformed_request", "colon")
    http_error(port, b"\x00\x01\x02 hello\r\n\r\n", 400, "malformed_request")
    http_error(port, b"GET /health\r\n\r\n", 400, "malformed_request")
    http_error(port, post + b"Expect: something\r\nContent-Length: 2\r\n\r\n{}", 417, "unsupported_expectation")
    # what is allowed still works: equal duplicate lengths, chunks with extensions and trailers, HTTP/1.0,
    # Expect: 100-continue (answered with an interim 100 first)
    status, _, out, _ = parse_response(raw_http(port, post + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                                                % (len(body), len(body)) + body))
    check(status == 200, f"equal duplicate Content-Length: {status} {out[:200]}")
    chunked = b"%x;ext=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n" % (len(body), body)
    status, _, out, _ = parse_response(raw_http(port, post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked))
    check(status == 200 and json.loads(out)["object"] == "text_completion", f"chunked: {status} {out[:200]}")
    status, _, out, _ = parse_response(raw_http(port, b"GET /health HTTP/1.0\r\n\r\n"))
    check(status == 200 and json.loads(out) == {"status": "ok"}, f"HTTP/1.0: {status}")
    status, _, out, interim = parse_response(raw_http(port, post + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                                                      % len(body) + body))
    check(status == 200 and interim >= 1, f"Expect: 100-continue: {status}, {interim} interim responses")
    # a refusal is counted (the endpoint's 400 class) like any other error
    key = 'promptkv_requests_total{endpoint="completions",status="400"}'
    before = s.metrics()[key]
    http_error(port, post + b"Content-Length: x\r\n\r\n", 400, "malformed_request")
    check(s.metrics()[key] == before + 1, "a framing error counted once")


def test_idle_client_timeout(s):
    # --timeout 3: a connection that sends nothing is closed
    t0 = time.time()
    with socket.create_connection((HOST, s.port), timeout=15) as sock:
        data = sock.recv(100)
    dt = time.time() - t0
    check(data == b"" and 2 < dt < 8, f"closed after {dt:.1f} s with {data!r}")


def test_slow_client_timeout(s):
    # --body-timeout 3: a body dripping one byte a second is cut off
    t0 = time.time()
    closed = False
    with socket.create_connection((HOST, s.port), timeout=15) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200\r\n\r\n")
        try:
            for _ in range(12):
                sock.sendall(b" ")
                time.sleep(1)
                sock.settimeout(0.01)
                try:
                    if sock.recv(100) == b"":
                        closed = True
                        break
                except socket.timeout:
                    pass
                sock.settimeout(15)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    dt = time.time() - t0
    check(closed and dt < 9, f"slow client not cut off ({dt:.1f} s)")


def test_concurrent_same_as_sequential(s):
    prompts = [f"Story number {i}: once upon a time" for i in range(6)]
    seq = [s.client.completions.create(model="m", prompt=p, max_tokens=10, temperature=0).choices[0].text
           for p in prompts]
    par = [None] * len(prompts)

    def one(i):
        par[i] = s.client.completions.create(model="m", prompt=prompts[i], max_tokens=10,
                                             temperature=0).choices[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(par == seq, "parallel requests give the sequential texts")


def test_batched_streams_equal_alone(model, n_streams=4, max_tokens=12, chat=False):
    """Streams decoded together in one batched step answer exactly as each alone (greedy), with and
    without compression, joining and leaving at different times (different lengths); the metrics
    show the steps were shared. The same requests on a --no-batch server give the same texts."""
    reqs = []
    for i in range(n_streams):
        body = {"max_tokens": max_tokens - 3 * (i % 3), "temperature": 0}
        text = f"Note {i}: the {['red', 'green', 'blue', 'white'][i % 4]} house stands by the river. " * (2 + 3 * i)
        if chat:
            body["messages"] = [{"role": "user", "content": text + "What stands by the river?"}]
        else:
            body["prompt"] = text
        if i % 2:
            body["kv_compression"] = {"press": "snapkv", "budget": 24, "window": 8}
        reqs.append(body)
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def answer(s, body):
        status, out = s.post(path, body)
        check(status == 200, f"status {status}: {out}")
        c = out["choices"][0]
        return c["message"]["content"] if chat else c["text"]

    texts = {}
    for flags in ([], ["--no-batch"]):
        s = Server(model, "--slots", str(n_streams), "-c", "2048", "--quiet", *flags)
        try:
            alone = [answer(s, b) for b in reqs]
            before = s.metrics()
            together = [None] * n_streams

            def one(i):
                together[i] = answer(s, reqs[i])

            threads = [threading.Thread(target=one, args=(i,)) for i in range(n_streams)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            after = s.metrics()
        finally:
            code = s.stop()
        check(code == 0, f"exit code {code}")
        for i in range(n_streams):
            check(together[i] == alone[i], f"{flags} stream {i}: {together[i]!r} together, {alone[i]!r} alone")
        steps = after["promptkv_batch_steps_total"] - before["promptkv_batch_steps_total"]
        rows = after["promptkv_batch_streams_total"] - before["promptkv_batch_streams_total"]
        if flags:
            check(steps == 0, f"--no-batch ran {steps} batched steps")
        else:
            check(steps > 0 and rows / steps > 1.3, f"mean batch {rows}/{steps}: the streams were not stepped together")
        texts[tuple(flags)] = alone
    check(texts[()] == texts[("--no-batch",)], "the --no-batch server answers otherwise")


def test_metrics(s):
    before = s.metrics()
    s.client.completions.create(model="m", prompt="Hello", max_tokens=3, temperature=0)
    s.post("/v1/completions", {"prompt": "hi", "n": 2})
    m = s.metrics()
    key = 'promptkv_requests_total{endpoint="completions",status="2xx"}'
    check(m[key] == before[key] + 1, f"{key}: {before[key]} -> {m[key]}")
    key400 = 'promptkv_requests_total{endpoint="completions",status="400"}'
    check(m[key400] == before[key400] + 1, key400)
    check(m["promptkv_prompt_tokens_total"] >= before["promptkv_prompt_tokens_total"] + 2, "prompt tokens")
    check(m["promptkv_completion_tokens_total"] >= before["promptkv_completion_tokens_total"] + 1, "completion")
    for k in ("promptkv_prefill_tokens_per_second", "promptkv_decode_tokens_per_second", "promptkv_cache_bytes_in_use",
              "promptkv_cache_bytes_saved", "promptkv_queue_length", "promptkv_slots_busy", "promptkv_slots"):
        check(k in m, f"{k} missing")
    check(m["promptkv_prefill_tokens_per_second"] > 0, "prefill rate")
    check(m["promptkv_queue_length"] == 0 and m["promptkv_slots_busy"] == 0, "idle")
    check(m["promptkv_slots"] == 2, "slots")


def test_default_press(model):
    """--press on the command line compresses requests without kv_compression; a request's own wins."""
    s = Server(model, "--slots", "1", "--press", "snapkv", "--budget", "16", "--window", "4", "--quiet")
    try:
        r = s.client.completions.create(model="m", prompt=LONG, max_tokens=2, temperature=0)
        u = r.usage.model_extra
        check(u["kv_press"] == "snapkv budget=16 window=4" and u["kv_cache_rows"] < u["kv_cache_rows_full"], f"{u}")
        r = s.client.completions.create(model="m", prompt=LONG, max_tokens=2, temperature=0,
                                        extra_body={"kv_compression": {"press": "none"}})
        u = r.usage.model_extra
        check(u["kv_press"] == "none" and u["kv_cache_rows"] == u["kv_cache_rows_full"], f"{u}")
    finally:
        check(s.stop() == 0, "exit code")


def test_kv_mem_too_big(model):
    """--kv-mem: a request that can never fit is refused; compression can make it fit."""
    # tiny-gemma3, f16 cache, -b 16: a row of a head costs 132 bytes (32 + 32 halves and a position); the
    # 5 sliding layers (window 16) hold at most 2 x 16 + 16 rows; the full layer the prompt (91) + 30 rows:
    # 5 x 48 x 132 + 121 x 132 = 47652 bytes > 45000. With snapkv budget 8 the full layer peaks at the
    # prompt's 91 rows while it is compressed: 31680 + 12012 = 43692 <= 45000.
    s = Server(model, "--kv-mem", "45000", "-b", "16", "--quiet")
    try:
        status, body = s.post("/v1/completions", {"prompt": LONG, "max_tokens": 30})
        error_of(status, body, 400, "request_too_large")
        status, body = s.post("/v1/completions", {"prompt": LONG, "max_tokens": 30, "kv_compression": {
            "press": "snapkv", "budget": 8, "window": 4}})
        check(status == 200, f"the compressed request is admitted: {status} {body}")
    finally:
        check(s.stop() == 0, "exit code")


def test_residual_type():
    """--residual-type reaches the slots' sessions: the server answers as `run` with the same flag, which
    differs here from the f32 residual stream (chunks of 4 tokens, tiny-qwen2)."""
    model = "tests/fixtures/models/tiny-qwen2-f32.gguf"

    def run_text(*args):  # the random model's bytes need not be UTF-8: as the server replaces them
        out = subprocess.run([BIN, "run", "-m", model, "-p", LONG, "-n", "24", "-b", "4", *args],
                             capture_output=True, check=True)
        return out.stdout[:-1].decode(errors="replace")

    want = run_text("--residual-type", "q8_0")
    check(want != run_text(), "the q8_0 stream changes this answer")
    s = Server(model, "--residual-type", "q8_0", "-b", "4", "--quiet")
    try:
        r = s.client.completions.create(model="m", prompt=LONG, max_tokens=24, temperature=0)
        check(r.choices[0].text == want, f"server {r.choices[0].text!r} != run {want!r}")
    finally:
        check(s.stop() == 0, "exit code")
    out = subprocess.run([BIN, "serve", "-m", model, "--residual-type", "bf16"], capture_output=True, text=True,
                         timeout=60)
    check(out.returncode == 2 and "--residual-type must be f32, f16 or q8_0, got 'bf16'" in out.stderr,
          f"{out.returncode} {out.stderr}")


# ---------------------------------------------------------------- stored contexts (tiny model)

QUESTIONS = [" When does it open?", " What do tickets cost?", " Where is the cafe?"]
SYSTEM = "Be brief."
SHORT = "The museum opens at nine. Tickets cost four euros. The cafe is on the second floor."


def make_context(s, body, want_status=200):
    status, ctx = s.post("/v1/contexts", body)
    check(status == want_status, f"POST /v1/contexts: {status} {ctx}")
    return ctx


def ask(s, ctx_id, question, chat, max_tokens=8):
    """A question by context_id: the answer and the usage's extension fields."""
    if chat:
        r = s.client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                             max_tokens=max_tokens, temperature=0, extra_body={"context_id": ctx_id})
        return r.choices[0].message.content, r.usage.model_extra, r.usage.prompt_tokens
    r = s.client.completions.create(model="m", prompt=question, max_tokens=max_tokens, temperature=0,
                                    extra_body={"context_id": ctx_id})
    return r.choices[0].text, r.usage.model_extra, r.usage.prompt_tokens


def check_context_answers(s, model, ctx, doc, press_flags, chat, system=None, n=8):
    """Each question by context_id answers what `promptkv run` answers for the whole prompt, the document
    pressed query-agnostically with the same press and the question fed after it (kvpress's protocol)."""
    before = s.request("GET", "/v1/contexts/" + ctx["id"])[2]
    for q in QUESTIONS:
        text, u, prompt_tokens = ask(s, ctx["id"], q, chat, n)
        check(u["kv_context_id"] == ctx["id"] and u["kv_context_tokens"] == ctx["tokens"], f"usage {u}")
        check(prompt_tokens > ctx["tokens"], f"prompt_tokens {prompt_tokens} <= the context's {ctx['tokens']}")
        args = ["-p", doc, "-q", q, "-n", str(n), "--mode", "query_agnostic", *press_flags]
        if chat:
            args = ["--chat", *(["--system", system] if system else []), *args]
        # the server makes its text valid UTF-8 (U+FFFD for a broken sequence, as Python's "replace")
        out = subprocess.run([BIN, "run", "-m", model, *args], capture_output=True, check=True).stdout
        want = out.decode("utf-8", errors="replace")[:-1]
        check(text == want, f"{q!r}: by context_id {text!r} != the whole prompt {want!r}")
    # copy-on-write: the stored context is as it was
    after = s.request("GET", "/v1/contexts/" + ctx["id"])[2]
    check(before == after, f"the stored context changed: {before} -> {after}")


def test_contexts_tiny(tmpdir):
    s = Server(TINY, "--slots", "2", "--ctx-dir", tmpdir, "--quiet")
    try:
        before = s.metrics()
        ctx = make_context(s, {"text": LONG})
        check(re.fullmatch(r"ctx-[0-9a-f]{24}", ctx["id"]) and ctx["object"] == "context" and ctx["kind"] == "text",
              f"{ctx}")
        check(ctx["tokens"] == cli_tokens(TINY, LONG), f"tokens {ctx['tokens']}")
        check(ctx["kv_press"] == "tova ratio=0.5" and ctx["kv_cache_rows"] < ctx["kv_cache_rows_full"], f"{ctx}")
        check(0 < ctx["kv_cache_bytes"] < ctx["kv_cache_bytes_full"] and ctx["memory_bytes"] > ctx["kv_cache_bytes"],
              f"{ctx}")
        check(os.path.exists(os.path.join(tmpdir, ctx["id"] + ".pkvc")), "persisted under --ctx-dir")
        check_context_answers(s, TINY, ctx, LONG, ["--press", "tova", "--ratio", "0.5"], chat=False)
        # a chat context: a system and a user message, questions appended to the user's text
        chat = make_context(s, {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SHORT}],
                                "kv_compression": {"press": "snapkv", "budget": 16, "window": 4}})
        check(chat["kind"] == "chat" and chat["kv_press"] == "snapkv budget=16 window=4", f"{chat}")
        check_context_answers(s, TINY, chat, SHORT, ["--press", "snapkv", "--budget", "16", "--window", "4"],
                              chat=True, system=SYSTEM)
        # a prompt that begins with a stored context's tokens starts from it (no kv_compression of its own)
        r = s.client.completions.create(model="m", prompt=LONG + QUESTIONS[0], max_tokens=8, temperature=0)
        u = r.usage.model_extra
        check(u.get("kv_context_id") == ctx["id"] and u["kv_press"] == "tova ratio=0.5", f"automatic reuse: {u}")
        check(r.choices[0].text == ask(s, ctx["id"], QUESTIONS[0], False)[0], "reuse answers as context_id does")
        r = s.client.completions.create(model="m", prompt=LONG + QUESTIONS[0], max_tokens=8, temperature=0,
                                        extra_body={"kv_compression": {"press": "none"}})
        check("kv_context_id" not in r.usage.model_extra, "a request with its own press prefills it all")
        listed = json.loads(s.request("GET", "/v1/contexts")[2])
        check(listed["object"] == "list" and {c["id"] for c in listed["data"]} == {ctx["id"], chat["id"]}, f"{listed}")
        m = s.metrics()
        check(m["promptkv_contexts"] == 2 and m["promptkv_context_bytes"] == ctx["memory_bytes"] + chat["memory_bytes"],
              "contexts gauges")
        check(m['promptkv_contexts_total{event="created"}'] == before['promptkv_contexts_total{event="created"}'] + 2,
              "created")
        check(m['promptkv_context_requests_total{by="id"}'] == 3 + 3 + 1 and
              m['promptkv_context_requests_total{by="prefix"}'] == 1, "context requests")
        # errors
        status, body = s.post("/v1/completions", {"prompt": "x", "context_id": "ctx-000000000000000000000000"})
        error_of(status, body, 404, "context_not_found", "context_id")
        status, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                       "context_id": ctx["id"]})
        error_of(status, body, 400, "invalid_value", "context_id")
        status, body = s.post("/v1/completions", {"prompt": "x", "context_id": ctx["id"],
                                                  "kv_compression": {"press": "snapkv", "budget": 8}})
        error_of(status, body, 400, "invalid_value", "kv_compression")
        status, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"},
                                                                    {"role": "user", "content": "b"}],
                                                       "context_id": chat["id"]})
        error_of(status, body, 400, "invalid_value", "messages")
        error_of(*s.post("/v1/contexts", {}), 400, "missing_field", "text")
        error_of(*s.post("/v1/contexts", {"text": "a", "messages": []}), 400, "invalid_value", "messages")
        error_of(*s.post("/v1/contexts", {"messages": [{"role": "assistant", "content": "a"}]}), 400, "invalid_value",
                 "messages")
        error_of(*s.post("/v1/contexts", {"text": "a", "kv_compression": {"press": "snapk"}}), 400, "invalid_value",
                 "kv_compression.press")
        error_of(*s.post("/v1/contexts", {"text": LONG * 4}), 400, "context_length_exceeded", "text")
        status, headers, payload = s.request("PUT", "/v1/contexts")
        error_of(status, json.loads(payload), 405, "method_not_allowed")
        check(headers.get("Allow") == "GET, POST", f"Allow {headers.get('Allow')}")
        # deleted: gone, its file too
        status, _, payload = s.request("DELETE", "/v1/contexts/" + chat["id"])
        check(status == 200 and json.loads(payload) == {"id": chat["id"], "object": "context.deleted",
                                                         "deleted": True}, f"{status} {payload}")
        status, _, payload = s.request("GET", "/v1/contexts/" + chat["id"])
        error_of(status, json.loads(payload), 404, "context_not_found")
        check(not os.path.exists(os.path.join(tmpdir, chat["id"] + ".pkvc")), "the deleted context's file remains")
        answer = ask(s, ctx["id"], QUESTIONS[1], False)[0]
    finally:
        check(s.stop() == 0, "exit code")
    # a restart finds the persisted context, which answers as before
    s = Server(TINY, "--slots", "1", "--ctx-dir", tmpdir)
    try:
        got = json.loads(s.request("GET", "/v1/contexts/" + ctx["id"])[2])
        same = {k: got[k] for k in ("tokens", "kv_cache_rows", "kv_cache_bytes", "memory_bytes", "kv_press", "kind")}
        check(same == {k: ctx[k] for k in same}, f"reloaded {got} != stored {ctx}")
        check(ask(s, ctx["id"], QUESTIONS[1], False)[0] == answer, "the reloaded context answers differently")
        check(any("1 stored contexts reloaded" in line for line in s.lines), "the reload is reported")
        check(s.metrics()['promptkv_contexts_total{event="reloaded"}'] == 1, "reloaded metric")
    finally:
        check(s.stop() == 0, "exit code")


def test_contexts_memory(tmpdir):
    """--ctx-mem: a context that can never fit is refused; the least recently used goes first."""
    s = Server(TINY, "--slots", "1", "--ctx-mem", "1000", "--quiet")
    try:
        error_of(*s.post("/v1/contexts", {"text": LONG}), 400, "context_too_large")
    finally:
        check(s.stop() == 0, "exit code")
    s = Server(TINY, "--slots", "1", "--quiet")
    try:
        size = make_context(s, {"text": LONG})["memory_bytes"]
    finally:
        check(s.stop() == 0, "exit code")
    s = Server(TINY, "--slots", "1", "--ctx-mem", str(int(size * 2.5)), "--ctx-dir", tmpdir, "--quiet")
    try:
        a, b = make_context(s, {"text": LONG}), make_context(s, {"text": LONG})
        s.request("GET", "/v1/contexts/" + a["id"])  # a is now used more recently than b
        c = make_context(s, {"text": LONG})
        status = {x["id"]: s.request("GET", "/v1/contexts/" + x["id"])[0] for x in (a, b, c)}
        check(status == {a["id"]: 200, b["id"]: 404, c["id"]: 200}, f"after eviction: {status}")
        check(not os.path.exists(os.path.join(tmpdir, b["id"] + ".pkvc")), "the evicted context's file remains")
        m = s.metrics()
        check(m['promptkv_contexts_total{event="evicted"}'] == 1 and m["promptkv_contexts"] == 2, "eviction metrics")
        check(m["promptkv_context_bytes"] <= m["promptkv_context_bytes_limit"], "within --ctx-mem")
    finally:
        check(s.stop() == 0, "exit code")


def test_contexts_bad_files(tmpdir):
    """A damaged or foreign file under --ctx-dir is named on stderr and not loaded; the server starts."""
    with open(os.path.join(tmpdir, "ctx-" + "0" * 24 + ".pkvc"), "wb") as f:
        f.write(b"PKVCACHE" + b"\0" * 200)
    s = Server(TINY, "--slots", "1", "--ctx-dir", tmpdir)
    try:
        listed = json.loads(s.request("GET", "/v1/contexts")[2])
        check(listed["data"] == [], f"{listed}")
        check(any("not reloaded" in line and "ctx-000" in line for line in s.lines), "the bad file is named")
    finally:
        check(s.stop() == 0, "exit code")
    # a directory made at the first start; a path that cannot be one stops the server with one line
    fresh = os.path.join(tmpdir, "new")
    s = Server(TINY, "--slots", "1", "--ctx-dir", fresh, "--quiet")
    check(s.stop() == 0 and os.path.isdir(fresh), "--ctx-dir is made")
    blocked = os.path.join(tmpdir, "ctx-" + "0" * 24 + ".pkvc")  # a file, not a directory
    out = subprocess.run([BIN, "serve", "-m", TINY, "--port", "0", "--ctx-dir", blocked], capture_output=True,
                         text=True, timeout=60)
    check(out.returncode == 1 and "cannot read or create it" in out.stderr, f"{out.returncode} {out.stderr}")


# ---------------------------------------------------------------- real model


def test_real_text_matches_cli(s):
    prompt = "The capital of France is"
    r = s.client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0)
    want = cli_run(REAL, "-p", prompt, "-n", "12")
    check(r.choices[0].text == want, f"server {r.choices[0].text!r} != run {want!r}")
    q = "What is the capital of France?"
    r = s.client.chat.completions.create(model="m", messages=[{"role": "user", "content": q}], max_tokens=12,
                                         temperature=0)
    want = cli_run(REAL, "--chat", "-p", q, "-n", "12")
    check(r.choices[0].message.content == want, f"chat {r.choices[0].message.content!r} != run {want!r}")
    # compressed: the same text as `run` with the same press
    doc = " ".join([LONG] * 6) + " Question: when does the museum open? Answer:"
    r = s.client.completions.create(model="m", prompt=doc, max_tokens=8, temperature=0,
                                    extra_body={"kv_compression": {"press": "snapkv", "budget": 64, "window": 16}})
    want = cli_run(REAL, "-p", doc, "-n", "8", "--press", "snapkv", "--budget", "64", "--window", "16")
    check(r.choices[0].text == want, f"compressed {r.choices[0].text!r} != run {want!r}")


def test_real_contexts_qwen(tmpdir):
    """Qwen2.5-Coder-0.5B-Instruct: a chat context compressed once (SnapKV, budget 64) answers three questions
    by context_id as `promptkv run` answers each with the whole prompt; deleted; a text context persisted
    across a restart answers as before it."""
    with open("tests/data/english.txt", encoding="utf-8") as f:
        doc = f.read()[:1500]
    doc = doc[:doc.rfind(" ")] + "\n"
    questions = ["Question: what is this text about?", "Question: name one thing the text describes.",
                 "Question: summarize the text in one sentence."]
    system = "Answer in one sentence."
    s = Server(QWEN, "--slots", "1", "-c", "2048", "--ctx-dir", tmpdir, "--quiet")
    try:
        ctx = make_context(s, {"messages": [{"role": "system", "content": system}, {"role": "user", "content": doc}],
                               "kv_compression": {"press": "snapkv", "budget": 64, "window": 16}})
        check(ctx["kv_cache_rows"] < ctx["kv_cache_rows_full"] / 3, f"compressed: {ctx}")
        for q in questions:
            text, u, _ = ask(s, ctx["id"], q, True, 12)
            want = cli_run(QWEN, "--chat", "--system", system, "-p", doc, "-q", q, "-n", "12", "--press", "snapkv",
                           "--budget", "64", "--window", "16", "--mode", "query_agnostic")
            check(text == want, f"{q!r}: by context_id {text!r} != the whole prompt {want!r}")
            check(u["kv_context_tokens"] == ctx["tokens"], f"{u}")
        status, _, _ = s.request("DELETE", "/v1/contexts/" + ctx["id"])
        check(status == 200 and s.request("GET", "/v1/contexts/" + ctx["id"])[0] == 404, "deleted")
        kept = make_context(s, {"text": doc})
        before = ask(s, kept["id"], questions[0], False, 12)[0]
    finally:
        check(s.stop() == 0, "exit code")
    s = Server(QWEN, "--slots", "1", "-c", "2048", "--ctx-dir", tmpdir, "--quiet")
    try:
        listed = json.loads(s.request("GET", "/v1/contexts")[2])
        check([c["id"] for c in listed["data"]] == [kept["id"]], f"after the restart: {listed}")
        check(ask(s, kept["id"], questions[0], False, 12)[0] == before, "the reloaded context answers differently")
    finally:
        check(s.stop() == 0, "exit code")


def test_real_stop(s):
    prompt = "The capital of France is"
    full = s.client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0).choices[0].text
    # the stop string is a word of the greedy answer itself (its third), so
    # the test does not depend on which continuation the model prefers
    words = full.split()
    check(len(words) >= 3, f"too short an answer: {full!r}")
    stop = words[2]
    cut = full.find(stop)
    check(cut > 0, f"{stop!r} not inside {full!r}")
    r = s.client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0, stop=["zzz", stop])
    check(r.choices[0].text == full[:cut] and r.choices[0].finish_reason == "stop",
          f"{r.choices[0].text!r} {r.choices[0].finish_reason}")
    chunks = list(s.client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0,
                                              stop=stop, stream=True))
    text = "".join(c.choices[0].text for c in chunks)
    check(text == full[:cut] and chunks[-1].choices[0].finish_reason == "stop", f"stream {text!r}")


def stream_first_chunk(s, body):
    """Starts a streaming request and returns the socket once the first event arrived."""
    sock = socket.create_connection((HOST, s.port), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        check(chunk, "stream closed early")
        got += chunk
    return sock


def wait_for(cond, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_real_disconnect_frees_slot(model):
    s = Server(model, "--slots", "1", "--quiet")
    try:
        sock = stream_first_chunk(s, {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
                                      "stream": True})
        check(s.metrics()["promptkv_slots_busy"] == 1, "slot busy while streaming")
        sock.close()
        check(wait_for(lambda: s.metrics()["promptkv_slots_busy"] == 0, 2.0), "slot not freed within 2 s")
        check(s.metrics()["promptkv_requests_cancelled_total"] == 1, "cancel counted")
        t0 = time.time()
        s.client.completions.create(model="m", prompt="Hi", max_tokens=2)
        check(time.time() - t0 < 5, "the next request ran at once")
    finally:
        check(s.stop() == 0, "exit code")


def test_real_half_close(model):
    """A client that half-closes its socket after the request (HTTP/1.1 allows it) still gets its answer,
    whole or streamed; one that closes it is still cancelled at once."""
    s = Server(model, "--slots", "1", "--quiet")
    try:
        for stream in (False, True):
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0,
                               "stream": stream}).encode()
            req = (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            raw = raw_http(s.port, req, half_close=True, timeout=120)
            check(raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), f"no interim probe: {raw[:80]!r}")
            status, _, out, _ = parse_response(raw)
            check(status == 200, f"stream={stream}: status {status}")
            if stream:
                check(b"data: [DONE]" in out, "the stream ends")
            else:
                check(json.loads(out)["usage"]["completion_tokens"] == 40, f"whole answer: {out[:200]}")
        # a client that closes (not half-closes) while its request runs: cancelled, the slot freed
        cancelled = s.metrics()["promptkv_requests_cancelled_total"]
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0}).encode()
        sock = socket.create_connection((HOST, s.port), timeout=60)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        check(wait_for(lambda: s.metrics()["promptkv_slots_busy"] == 1, 10), "request running")
        sock.close()
        check(wait_for(lambda: s.metrics()["promptkv_slots_busy"] == 0, 2.0), "slot not freed within 2 s")
        check(s.metrics()["promptkv_requests_cancelled_total"] == cancelled + 1, "cancel counted")
    finally:
        check(s.stop() == 0, "exit code")


def test_nan_model(tmpdir):
    """A model whose logits are all NaN (NaN weights pass every load check): a 500 with OpenAI's error
    shape naming the step, whole and streamed, never a token."""
    edit = os.path.join(os.path.dirname(BIN), "gguf-edit")
    if not os.path.exists(edit):
        edit = "build/gguf-edit"
    nan_model = os.path.join(tmpdir, "nan.gguf")
    subprocess.run([edit, TINY, nan_model, "--fill", "output_norm.weight", "nan"], check=True)
    s = Server(nan_model, "--quiet")
    try:
        for body in [{"prompt": "hi", "max_tokens": 4},
                     {"prompt": "hi", "max_tokens": 4, "temperature": 0},
                     {"prompt": "hi", "max_tokens": 4, "stream": True},
                     {"prompt": "hi", "max_tokens": 4, "top_k": 5, "top_p": 0.9, "min_p": 0.1}]:
            err = error_of(*s.post("/v1/completions", body), 500)
            check(err["type"] == "server_error" and "non-finite logits at step 0" in err["message"], err)
        err = error_of(*s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 500)
        check("non-finite logits" in err["message"], err)
    finally:
        check(s.stop() == 0, "exit code")


def _template_fixture(key, case):
    """The template text and the rendering of one conversation in tests/fixtures/chat/templates.ref
    (jinja2's, tools/make-chat-fixtures.py): (template, messages, rendering, system_end)."""
    def unescape(field):
        return re.sub(rb"\\x([0-9a-f]{2})|\\\\", lambda m: bytes([int(m.group(1), 16)]) if m.group(1) else b"\\",
                      field.encode()).decode("utf-8")
    template, messages, in_template, in_case = None, [], False, False
    with open("tests/fixtures/chat/templates.ref", encoding="ascii") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "T":
                in_template = fields[1] == key
                if in_template:
                    template = unescape(fields[3])
            elif fields[0] == "C":
                in_case = in_template and fields[1] == case
            elif in_case and fields[0] == "M":
                messages.append({"role": fields[1], "content": unescape(fields[2]) if len(fields) > 2 else ""})
            elif in_case and fields[0] == "E":
                rendering = unescape(fields[1])
            elif in_case and fields[0] == "S":
                return template, messages, rendering, int(fields[1])
    raise AssertionError(f"{key}/{case} not in templates.ref")


def test_chat_template_from_gguf(tmpdir):
    """The tiny Llama model (no template, no known chat format) with a real template in its
    tokenizer.chat_template: /v1/chat/completions renders the conversation as jinja2 did, tokenized in
    the segments prompt assembly splits it into (system prompt, the template up to the last user
    message, that message, the tail); --chat-template overrides it; an unknown one is a 400 that quotes
    its first line."""
    edit = os.path.join(os.path.dirname(BIN), "gguf-edit")
    if not os.path.exists(edit):
        edit = "build/gguf-edit"
    base = "tests/fixtures/models/tiny-llama-f32.gguf"
    for key in ["llama-2-chat", "mistral-7b-v0.3", "phi-3.5-mini"]:
        template, messages, rendering, system_end = _template_fixture(key, "multi_turn")
        model = os.path.join(tmpdir, key + ".gguf")
        subprocess.run([edit, base, model, "--set", "tokenizer.chat_template", "str", template], check=True)
        question = messages[-1]["content"]
        at = rendering.rindex(question)
        cut = len(rendering.encode()[:system_end].decode())
        pieces = [rendering[:cut], rendering[cut:at], question, rendering[at + len(question):]]
        want = sum(len(subprocess.run([BIN, "tokenize", "-m", model, "--no-special", "-p", p], capture_output=True,
                                      text=True, check=True).stdout.split()) for p in pieces if p)
        s = Server(model, "--quiet")
        try:
            r = s.client.chat.completions.create(model="m", max_tokens=2, temperature=0, messages=messages)
            check(r.usage.prompt_tokens == want, f"{key}: prompt_tokens {r.usage.prompt_tokens}, want {want}")
            status, body = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1,
                                                           "kv_compression": {"press": "knorm", "budget": 40,
                                                                              "protect_system": True}})
            check(status == 200, f"{key}: protect_system {status} {body}")
        finally:
            check(s.stop() == 0, "exit code")
    unknown = os.path.join(tmpdir, "unknown.gguf")
    subprocess.run([edit, base, unknown, "--set", "tokenizer.chat_template", "str",
                    "{% for m in messages %}<|turn|>{{ m.content }}\n{% endfor %}"], check=True)
    s = Server(unknown, "--quiet")
    try:
        err = error_of(*s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 400,
                       "invalid_value", "messages")
        check('first line "{% for m in messages %}<|turn|>{{ m.content }}"' in err["message"], err["message"])
    finally:
        check(s.stop() == 0, "exit code")
    s = Server(unknown, "--quiet", "--chat-template", "chatml")
    try:
        r = s.client.chat.completions.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
        want = sum(cli_tokens_plain(unknown, p) for p in ["<|im_start|>user\n", "hi", "<|im_end|>\n<|im_start|>assistant\n"])
        check(r.usage.prompt_tokens == want, f"chatml override: prompt_tokens {r.usage.prompt_tokens}, want {want}")
    finally:
        check(s.stop() == 0, "exit code")


def cli_tokens_plain(model, text):
    out = subprocess.run([BIN, "tokenize", "-m", model, "--no-special", "-p", text], capture_output=True, text=True,
                         check=True)
    return len(out.stdout.split())


def test_real_queue_full(model):
    s = Server(model, "--slots", "1", "--queue", "1", "--quiet")
    socks = []
    try:
        socks.append(stream_first_chunk(s, {"prompt": "Once", "max_tokens": 400, "stream": True}))
        # the second waits in the queue (its headers come only when it starts)
        waiting = socket.create_connection((HOST, s.port), timeout=60)
        body = json.dumps({"prompt": "Twice", "max_tokens": 4}).encode()
        waiting.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
                        f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        socks.append(waiting)
        check(wait_for(lambda: s.metrics()["promptkv_queue_length"] == 1, 5), "second request queued")
        status, body = s.post("/v1/completions", {"prompt": "Thrice", "max_tokens": 4})
        error_of(status, body, 429, "queue_full")
        try:
            s.client.completions.create(model="m", prompt="x", max_tokens=1)
            check(False, "accepted with a full queue")
        except openai.RateLimitError as e:
            check(e.status_code == 429, str(e))
        # the waiting client leaves: it is dropped from the queue
        waiting.close()
        check(wait_for(lambda: s.metrics()["promptkv_queue_length"] == 0, 2), "queued request not dropped")
    finally:
        for k in socks:
            k.close()
        check(s.stop() == 0, "exit code")


def test_real_kv_mem_waits(model):
    """Two requests that fit in --kv-mem only one at a time: the second waits (a slot is free) and then runs."""
    # Gemma 3 270M, f16: 18 layers x 1 KV head x (256 + 256 halves + a position) = 18504 bytes a token;
    # "Once upon a time" (6 tokens with BOS) + 100 = 106 tokens: 1.96 MB; two need 3.9 MB > 3 MiB.
    s = Server(model, "--slots", "2", "--kv-mem", "3M", "--quiet")
    try:
        out = []

        def one():
            out.append(s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 100,
                                                  "temperature": 0})[0])

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        check(wait_for(lambda: s.metrics()["promptkv_memory_waits_total"] == 1, 10), "no request waited for memory")
        check(s.metrics()["promptkv_slots_busy"] == 1, "one runs at a time")
        for t in threads:
            t.join()
        check(out == [200, 200], f"both answered: {out}")
        check(s.metrics()["promptkv_cache_bytes_reserved"] == 0, "reservations returned")
    finally:
        check(s.stop() == 0, "exit code")


def test_real_sigterm_drains(model):
    s = Server(model, "--slots", "2", "--drain-timeout", "600", "--quiet")  # slow sanitizer builds too
    out = {}

    def stream():
        chunks = list(s.client.completions.create(model="m", prompt="Once upon a time", max_tokens=40,
                                                  temperature=0, stream=True))
        out["text"] = "".join(c.choices[0].text for c in chunks)
        out["finish"] = chunks[-1].choices[0].finish_reason

    t = threading.Thread(target=stream)
    t.start()
    check(wait_for(lambda: s.metrics()["promptkv_slots_busy"] == 1, 10), "request running")
    s.proc.send_signal(signal.SIGTERM)
    refused = wait_for(lambda: not _connects(s.port), 3)  # no new connections once draining
    t.join(60)
    code = s.stop()
    check(refused, "still accepting connections after SIGTERM")
    check(out.get("finish") == "length", f"the running request finished: {out}")
    check(code == 0, f"exit code {code}")
    check(any("draining" in line for line in s.lines), "no drain message")


def _connects(port):
    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- main


def main():
    try:
        tiny = Server(TINY, "--slots", "2", "--max-tokens", "64", "--max-body", "64K", "--timeout", "3",
                      "--body-timeout", "3", "--quiet")
    except Exception as e:
        print(f"FAIL server_start: {e}")
        print("0 passed, 1 failed")
        return 1
    try:
        for name, fn in [("models", test_models), ("health", test_health), ("completion", test_completion),
                         ("completion_token_ids", test_completion_token_ids), ("chat", test_chat),
                         ("stream_completion", test_stream_completion), ("stream_chat", test_stream_chat),
                         ("compression", test_compression), ("compression_chat_options", test_compression_chat_options),
                         ("seed", test_seed), ("max_tokens", test_max_tokens), ("errors", test_errors),
                         ("body_limit", test_body_limit), ("http_framing_errors", test_http_framing_errors),
                         ("idle_client_timeout", test_idle_client_timeout),
                         ("slow_client_timeout", test_slow_client_timeout),
                         ("concurrent_same_as_sequential", test_concurrent_same_as_sequential),
                         ("metrics", test_metrics)]:
            run_test(name, fn, tiny)
    finally:
        code = tiny.stop()
    run_test("sigterm_exit_code", check, code == 0, f"exit code {code}")
    run_test("default_press", test_default_press, TINY)
    with tempfile.TemporaryDirectory() as tmpdir:
        run_test("nan_model", test_nan_model, tmpdir)
        run_test("chat_template_from_gguf", test_chat_template_from_gguf, tmpdir)
    run_test("kv_mem_too_big", test_kv_mem_too_big, TINY)
    run_test("residual_type", test_residual_type)
    # long answers, so that the tiny model's streams overlap in time
    run_test("batched_streams_equal_alone", test_batched_streams_equal_alone, TINY, 4, 600)
    for name, fn in [("contexts_tiny", test_contexts_tiny), ("contexts_memory", test_contexts_memory),
                     ("contexts_bad_files", test_contexts_bad_files)]:
        with tempfile.TemporaryDirectory() as tmpdir:
            run_test(name, fn, tmpdir)

    if os.path.exists(REAL):
        real = Server(REAL, "--slots", "2", "-c", "2048", "--quiet")
        try:
            run_test("real_text_matches_cli", test_real_text_matches_cli, real)
            run_test("real_stop", test_real_stop, real)
        finally:
            code = real.stop()
        run_test("real_exit_code", check, code == 0, f"exit code {code}")
        run_test("real_disconnect_frees_slot", test_real_disconnect_frees_slot, REAL)
        run_test("real_queue_full", test_real_queue_full, REAL)
        run_test("real_half_close", test_real_half_close, REAL)
        run_test("real_kv_mem_waits", test_real_kv_mem_waits, REAL)
        run_test("real_sigterm_drains", test_real_sigterm_drains, REAL)
    else:
        print(f"skip server_real_*: {REAL} is absent (make model)")
    if os.path.exists(QWEN):
        with tempfile.TemporaryDirectory() as tmpdir:
            run_test("real_contexts_qwen", test_real_contexts_qwen, tmpdir)
        run_test("real_batched_streams_qwen", test_batched_streams_equal_alone, QWEN, 4, 16, True)
    else:
        print(f"skip server_real_contexts_qwen: {QWEN} is absent (make model)")
    # a server built with sanitizers reports on stderr (and exits non-zero, checked above)
    reports = [line for srv in servers for line in srv.lines
               if "runtime error" in line or "Sanitizer" in line or "LeakSanitizer" in line]
    run_test("no_sanitizer_reports", check, not reports, "".join(reports[:5]))
    print(f"{results['pass']} passed, {results['fail']} failed")
    return 1 if results["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
