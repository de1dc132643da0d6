#!/usr/bin/env python3
"""Writes tests/fixtures/chat/templates.ref: conversations rendered by HF transformers'
render_jinja_template (the code behind tokenizer.apply_chat_template: jinja2 with trim_blocks and
lstrip_blocks, raise_exception, strftime_now, its tojson) from the real chat templates in
tools/chat_templates.py, with add_generation_prompt=True.

    tools/make-chat-fixtures.py [OUT_DIR]      (default tests/fixtures/chat; packages: tools/requirements.txt)

File format, one record a line, fields separated by tabs, texts escaped as bytes (\\xNN, \\\\):
    D <seconds> <date>            the instant strftime_now was given (seconds since 1970 UTC, pinned so the file
                                  does not change daily) and its date
    T <key> <family> <template>   a template and the family promptkv must detect in it
    B <bos text>   O <eos text>   the tokenizer's BOS and EOS texts the template was rendered with
    C <case>                      a conversation follows
    M <role> <content>            its messages
    E <rendering>                 what the template renders, then
    S <system_end>                the byte offset where the system prompt's rendering ends (0: none)
    X <message>                   instead of E/S: the template raises (raise_exception or an error)

system_end is found in the rendering, not computed by the formatter under test: the system text as the
template writes it (stripped where the template strips it) followed by the family's end of the system
part (SYSTEM_SUFFIX), searched from the start; a template's own default system prompt counts too.
"""
import datetime
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils
from transformers.utils.chat_template_utils import render_jinja_template

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_templates import TEMPLATES  # noqa: E402

# What the family writes right after the system text (the rest of the system prompt's rendering).
SYSTEM_SUFFIX = {
    "chatml": "<|im_end|>\n",
    "llama2": None,  # no system role (the template raises)
    "llama2-sys": "\n<</SYS>>\n\n",
    "llama3": "<|eot_id|>",
    "mistral-v1": "\n\n",
    "mistral-v3": "\n\n",
    "mistral-v3-tekken": "\n\n",
    "mistral-v7": "[/SYSTEM_PROMPT]",
    "mistral-v7-tekken": "[/SYSTEM_PROMPT]",
    "phi3": "<|end|>\n",
    "phi4": "<|im_end|>",
    "gemma": "\n\n",
    "deepseek": "",
    "deepseek3": "",
    "command-r": "<|END_OF_TURN_TOKEN|>",
    "zephyr": "</s>\n",
    "vicuna": "\n\n",
    "vicuna-orca": "\n",
    "openchat": "<|end_of_turn|>",
    "granite": "<|end_of_text|>\n",
    "falcon3": "\n",
    "exaone3": "[|endofturn|]\n",
}

# Templates whose end of the system part differs from their family's.
SYSTEM_SUFFIX_OF_TEMPLATE = {"phi-4-mini": "<|end|>"}

# Templates that write a system prompt of their own when the conversation has none: its text.
DEFAULT_SYSTEM = {
    "qwen2": "You are a helpful assistant.",
    "qwen2.5": "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    "deepseek-coder": ("You are an AI programming assistant, utilizing the Deepseek Coder model, developed by "
                       "Deepseek Company, and you only answer questions related to computer science. For "
                       "politically sensitive questions, security and privacy issues, and other non-computer "
                       "science questions, you will refuse to answer\n"),
    "exaone-3.5": "",
    "llama-3.1": "",  # the header block with the dates is always written
    "llama-3.2": "",
    "granite-3.1": "Knowledge Cutoff Date: April 2024.\nToday's Date: March 07, 2025.\nYou are Granite, developed by "
                   "IBM. You are a helpful AI assistant.",
    "granite-3.2": "Knowledge Cutoff Date: April 2024.\nToday's Date: March 07, 2025.\nYou are Granite, developed by "
                   "IBM. You are a helpful AI assistant.",
}

# strftime_now returns this date's text: templates that print today's date (Llama 3.2) render the same
# every day; the C test is given the same date.
FIXED_NOW = datetime.datetime(2025, 3, 7, 12, 0, 0)
FIXED_NOW_SECONDS = int(FIXED_NOW.replace(tzinfo=datetime.timezone.utc).timestamp())


class _FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# HF's strftime_now is datetime.now().strftime(format), with the module's datetime
chat_template_utils.datetime = _FixedClock

# Families whose template strips the system text it writes.
STRIPS_SYSTEM = {"llama3"}

CASES = {
    "single_user": [("user", "Hello")],
    "system_user": [("system", "You are terse."), ("user", "Hi there")],
    "multi_turn": [("system", "Be brief."), ("user", "What is 2+2?"), ("assistant", "4"),
                   ("user", "And 3+3?")],
    "no_system_turns": [("user", "Hello"), ("assistant", "Hi! How can I help?"), ("user", "Tell me a joke.")],
    "spaces": [("system", " Be kind. "), ("user", "  padded question  "), ("assistant", "  padded answer  "),
               ("user", "\tlast\n")],
    "unicode": [("system", "R\u00e9ponds en fran\u00e7ais \U0001f600"),
                ("user", "\u00a0Caf\u00e9 \u4f60\u597d\u3000")],
    "empty_user": [("user", "")],
    "assistant_last": [("system", "Sys."), ("user", "Question?"), ("assistant", "Partial answer")],
    "two_users": [("user", "one"), ("user", "two")],
    "assistant_first": [("assistant", "I speak first"), ("user", "ok")],
    "mid_system": [("user", "a"), ("assistant", "b"), ("system", "c"), ("user", "d")],
    "think_turns": [("user", "q1"), ("assistant", "<think>\nreasoning\n</think>\n\nanswer one"), ("user", "q2")],
}


def esc(data: bytes) -> str:
    out = []
    for c in data:
        if c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return "".join(out)


def esc_str(s: str) -> str:
    return esc(s.encode("utf-8"))


def render(entry, messages):
    msgs = [{"role": r, "content": c} for r, c in messages]
    return render_jinja_template([msgs], chat_template=entry["template"], add_generation_prompt=True,
                                 bos_token=entry["bos"], eos_token=entry["eos"])[0][0]


def system_end(entry, messages, rendered):
    data = rendered.encode("utf-8")
    suffix = SYSTEM_SUFFIX_OF_TEMPLATE.get(entry["key"], SYSTEM_SUFFIX[entry["family"]])
    if messages[0][0] == "system":
        text = messages[0][1]
        if entry["family"] in STRIPS_SYSTEM:
            text = text.strip()
    elif entry["key"] in DEFAULT_SYSTEM:
        text = DEFAULT_SYSTEM[entry["key"]]
    else:
        return 0
    needle = (text + suffix).encode("utf-8")
    at = data.find(needle)
    if at < 0:
        return 0  # the template dropped the system prompt
    return at + len(needle)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/chat"
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "templates.ref")
    n = 0
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"# chat renderings by transformers {transformers.__version__} render_jinja_template "
                f"(jinja2 {jinja2.__version__}) of the templates in tools/chat_templates.py; "
                "written by tools/make-chat-fixtures.py\n")
        f.write(f"D\t{FIXED_NOW_SECONDS}\t{FIXED_NOW.strftime('%d %b %Y')}\n")
        for entry in TEMPLATES:
            f.write(f"T\t{entry['key']}\t{entry['family']}\t{esc_str(entry['template'])}\n")
            f.write(f"B\t{esc_str(entry['bos'])}\n")
            f.write(f"O\t{esc_str(entry['eos'])}\n")
            for name, messages in CASES.items():
                f.write(f"C\t{name}\n")
                for role, content in messages:
                    f.write(f"M\t{role}\t{esc_str(content)}\n")
                try:
                    rendered = render(entry, messages)
                except jinja2.exceptions.TemplateError as e:
                    f.write(f"X\t{esc_str(str(e))}\n")
                    continue
                f.write(f"E\t{esc_str(rendered)}\n")
                f.write(f"S\t{system_end(entry, messages, rendered)}\n")
                n += 1
    print(f"{path}: {len(TEMPLATES)} templates, {n} renderings")


if __name__ == "__main__":
    main()
