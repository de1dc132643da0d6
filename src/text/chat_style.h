/* How one model's chat is formatted, as data: the family, its variant's
 * flags and the texts the template writes (pkv_chat_style). Below chat.h
 * (the detection and rendering API) and chat_out.h (what the formatters
 * share), which both include it. docs/engine.md §4.7. */
#ifndef PKV_CHAT_STYLE_H
#define PKV_CHAT_STYLE_H

#include <stdbool.h>

/* The families, named as llama.cpp names them (docs/engine.md §4.7 lists the
 * template each is checked against). */
typedef enum {
    PKV_CHAT_NONE = 0,
    PKV_CHAT_CHATML,            /* <|im_start|>user\n ... <|im_end|> (Qwen2, OpenHermes) */
    PKV_CHAT_LLAMA2,            /* [INST] ... [/INST], no system role (Mistral v0.1) */
    PKV_CHAT_LLAMA2_SYS,        /* [INST] <<SYS>>\n ... <</SYS>> (Llama 2 chat) */
    PKV_CHAT_LLAMA3,            /* <|start_header_id|>user<|end_header_id|> ... <|eot_id|> */
    PKV_CHAT_MISTRAL_V1,        /* " [INST] ... [/INST]" */
    PKV_CHAT_MISTRAL_V3,        /* "[INST] ... [/INST]", the system prompt in the last turn */
    PKV_CHAT_MISTRAL_V3_TEKKEN, /* "[INST]...[/INST]" (Mistral Nemo) */
    PKV_CHAT_MISTRAL_V7,        /* [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST] */
    PKV_CHAT_MISTRAL_V7_TEKKEN, /* [SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST] (Mistral Small 3) */
    PKV_CHAT_PHI3,              /* <|user|>\n ... <|end|>\n */
    PKV_CHAT_PHI4,              /* <|im_start|>user<|im_sep|> ... <|im_end|> */
    PKV_CHAT_GEMMA,             /* <start_of_turn>user\n ... <end_of_turn>\n */
    PKV_CHAT_DEEPSEEK,          /* ### Instruction:\n ... ### Response:\n (DeepSeek Coder) */
    PKV_CHAT_DEEPSEEK3,         /* <｜User｜> ... <｜Assistant｜> (DeepSeek V3, R1) */
    PKV_CHAT_COMMAND_R,         /* <|START_OF_TURN_TOKEN|><|USER_TOKEN|> ... */
    PKV_CHAT_ZEPHYR,            /* <|user|>\n ... </s>\n */
    PKV_CHAT_VICUNA,            /* USER: ...\nASSISTANT: */
    PKV_CHAT_VICUNA_ORCA,       /* SYSTEM: ...\nUSER: ...\nASSISTANT: */
    PKV_CHAT_OPENCHAT,          /* GPT4 Correct User: ...<|end_of_turn|> */
    PKV_CHAT_GRANITE,           /* <|start_of_role|>user<|end_of_role|> ... <|end_of_text|>\n */
    PKV_CHAT_FALCON3,           /* <|user|>\n ...\n<|assistant|>\n */
    PKV_CHAT_EXAONE3,           /* [|user|] ...\n[|assistant|] */
    PKV_CHAT_N_FAMILIES
} pkv_chat_family;

/* Details in which the real templates of one family differ, read from the
 * template text (chat_detect.c). */
enum {
    PKV_CHAT_SYSTEM_RAISES = 1u << 0,     /* gemma 2: a system message is an error */
    PKV_CHAT_SKIP_EMPTY_SYSTEM = 1u << 1, /* phi 3.5: an empty system message renders nothing */
    PKV_CHAT_SYSTEM_JOIN = 1u << 2,       /* deepseek3 (V3): every system message, joined by a blank line;
                                              without it (R1) the last one */
    PKV_CHAT_STRIP_THINK = 1u << 3,       /* deepseek3 (R1): an assistant turn keeps what follows </think> */
    PKV_CHAT_THINK_PROMPT = 1u << 4,      /* deepseek3 (R1): the generation prompt opens <think>\n */
    PKV_CHAT_DATE_HEADER = 1u << 5,       /* llama3 (3.1 and later): a system block with the knowledge
                                              cutoff and today's date, always */
    PKV_CHAT_DATE_TODAY = 1u << 6,        /* llama3 (3.2): today's date (strftime_now), not 26 Jul 2024 */
    PKV_CHAT_QWEN3_THINK = 1u << 7,       /* chatml (Qwen3): earlier turns lose their reasoning, an assistant
                                              turn after the last user message gets a <think> block */
    PKV_CHAT_COMPACT = 1u << 8,           /* phi3 (Phi-4-mini): no newline after the role tags */
    PKV_CHAT_QWQ_THINK = 1u << 9,         /* chatml (QwQ): earlier assistant turns lose their reasoning, the
                                              generation prompt opens <think>\n */
    PKV_CHAT_GRANITE_DATE = 1u << 10,     /* granite (3.1, 3.2): a default system prompt with today's date */
};

/* How to format chat for one model: the family, its variant, the special
 * token texts the template writes and the template's own default system
 * prompt. Plain data (no pointers): a model holds one. */
typedef struct {
    pkv_chat_family family;
    unsigned flags;
    char bos[64], eos[64];     /* bos_token and eos_token as the template sees them */
    bool has_default_system;   /* default_system is written when the conversation has no system message */
    char default_system[1024];
    char unknown[160];         /* family NONE: why (the unknown template's first line, quoted) */
    long long now;             /* templates that write today's date (strftime_now): 0, the local date
                                  when rendering (HF's datetime.now()); else this instant's UTC date */
} pkv_chat_style;

#endif
