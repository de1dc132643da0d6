/*
 * Tokenizer tests (docs/engine.md §4). Expected values come from:
 *   - hand derivations from the algorithm in §4.2-§4.4 (small vocabularies
 *     built in memory; each case says why the answer is what it is);
 *   - the .ref files in tests/fixtures/tokenizer, written by tools/make-tokenizer-fixtures.py
 *     from the Python regex module, HF tokenizers, sentencepiece and jinja2;
 *   - gemma3-270m.ref, written by tools/make-tokenizer-ref-llamacpp.sh from
 *     llama.cpp's llama-tokenize (real_tok_* cases, run with the real model).
 */
#include <stdlib.h>
#include <string.h>

#include "mem_gguf.h"
#include "test.h"
#include "text/chat.h"
#include "text/tok_bpe.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/vocab.h"

/* ---------------------------------------------------------------- fixture reading */

typedef struct {
    char *data;
    size_t size;
} file_buf;

static bool read_file(const char *path, file_buf *fb) {
    fb->data = test_read_file(path, &fb->size);
    return fb->data != NULL;
}

/* Next line of the buffer (NUL-terminated in place), or NULL at the end. */
static char *next_line(char **cursor) {
    char *s = *cursor;
    if (!s || !*s) return NULL;
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = s + strlen(s);
    }
    return s;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                 : -1;
}

/* Undoes the fixture escaping (\\ and \xHH) of s[0..len) into out; returns the
 * byte count. out must hold len bytes. */
static size_t unescape(const char *s, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\' && i + 1 < len && s[i + 1] == '\\') {
            out[n++] = '\\';
            i++;
        } else if (s[i] == '\\' && i + 3 < len && s[i + 1] == 'x') {
            out[n++] = (char)(hex_digit(s[i + 2]) * 16 + hex_digit(s[i + 3]));
            i += 3;
        } else {
            out[n++] = s[i];
        }
    }
    return n;
}

/* Splits a line at tabs in place; returns the field count. */
static int split_tabs(char *line, char **fields, int max) {
    int n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

static int parse_ids(const char *s, int32_t *ids, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* ---------------------------------------------------------------- vocab helpers */

typedef struct {
    const char *text;
    float score;
    int type;
} vtok;

/* A vocabulary made in memory: texts are NUL-terminated literals. */
static pkv_tokenizer *make_vocab(pkv_tok_kind kind, const char *pre, const vtok *toks, int n,
                                 const char *const *merges, int n_merges, tok_vocab_desc *extra) {
    gguf_str *strs = calloc((size_t)n, sizeof *strs);
    gguf_str *mstrs = calloc((size_t)n_merges + 1, sizeof *mstrs);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    for (int i = 0; i < n; i++) {
        strs[i] = (gguf_str){toks[i].text, strlen(toks[i].text)};
        scores[i] = toks[i].score;
        types[i] = toks[i].type ? toks[i].type : PKV_TOKTYPE_NORMAL;
    }
    for (int i = 0; i < n_merges; i++) mstrs[i] = (gguf_str){merges[i], strlen(merges[i])};
    tok_vocab_desc d;
    if (extra) d = *extra;
    else tok_vocab_desc_init(&d);
    d.kind = kind;
    if (pre) d.pre = (gguf_str){pre, strlen(pre)};
    d.n_vocab = n;
    d.tokens = strs;
    d.scores = scores;
    d.types = types;
    d.n_merges = n_merges;
    d.merges = mstrs;
    pkv_error err = {0};
    pkv_tokenizer *tok = tok_build(&d, &err);
    if (!tok) printf("    build failed: %s\n", err.msg);
    free(strs);
    free(mstrs);
    free(scores);
    free(types);
    return tok;
}

/* Encodes and compares with the expected ids; returns true when equal. */
static bool encode_is(const pkv_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, const int32_t *want, int n_want) {
    int32_t got[512];
    pkv_error err = {0};
    int n = pkv_tokenizer_encode(tok, text, len, add_special, parse_special, got, 512, &err);
    bool same = n == n_want && n <= 512;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    if (!same) {
        printf("    encode(%.*s) add_special=%d parse_special=%d: got", (int)(len < 60 ? len : 60),
               text, add_special, parse_special);
        for (int i = 0; i < n && i < 40; i++) printf(" %d", got[i]);
        printf(" (n=%d%s%s), want", n, n < 0 ? ", " : "", n < 0 ? err.msg : "");
        for (int i = 0; i < n_want && i < 40; i++) printf(" %d", want[i]);
        printf("\n");
    }
    return same;
}

#define IDS(...)                                                                                   \
    ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t))
#define NO_IDS ((const int32_t *)NULL), 0
#define ENCODE_IS(tok, text, as, ps, ...)                                                          \
    CHECK(encode_is(tok, text, strlen(text), as, ps, __VA_ARGS__))

/* Encoding fails with a message containing want (a byte without a token). */
static bool encode_fails(const pkv_tokenizer *tok, const char *text, bool parse_special, const char *want) {
    int32_t got[64];
    pkv_error err = {0};
    int n = pkv_tokenizer_encode(tok, text, strlen(text), false, parse_special, got, 64, &err);
    bool ok = n == -1 && err.code == PKV_ERR_UNSUPPORTED && strstr(err.msg, want);
    if (!ok) printf("    encode(%s): n=%d, %s; want an error with \"%s\"\n", text, n, n < 0 ? err.msg : "", want);
    return ok;
}

/* ---------------------------------------------------------------- unicode */

TEST(tok_unicode_categories) {
    /* categories from the Unicode character database (UnicodeData.txt) */
    CHECK(pkv_unicode_flags('A') & PKV_UFLAG_LETTER);
    CHECK(pkv_unicode_flags(0x00DF) & PKV_UFLAG_LETTER);  /* ß Ll */
    CHECK(pkv_unicode_flags(0x4F60) & PKV_UFLAG_LETTER);  /* 你 Lo */
    CHECK(pkv_unicode_flags(0x0663) & PKV_UFLAG_NUMBER);  /* Arabic-Indic three Nd */
    CHECK(pkv_unicode_flags(0x2460) & PKV_UFLAG_NUMBER);  /* circled one No */
    CHECK(pkv_unicode_flags(0x216B) & PKV_UFLAG_NUMBER);  /* roman twelve Nl */
    CHECK(pkv_unicode_flags(0x2014) & PKV_UFLAG_PUNCT);   /* em dash Pd */
    CHECK(pkv_unicode_flags(0x00AB) & PKV_UFLAG_PUNCT);   /* « Pi */
    CHECK(pkv_unicode_flags('$') & PKV_UFLAG_SYMBOL);     /* Sc */
    CHECK(pkv_unicode_flags(0x20AC) & PKV_UFLAG_SYMBOL);  /* € Sc */
    CHECK(pkv_unicode_flags(0x1F999) & PKV_UFLAG_SYMBOL); /* llama emoji So */
    CHECK(pkv_unicode_flags(0x0301) & PKV_UFLAG_MARK);    /* combining acute Mn */
    CHECK(pkv_unicode_flags(0x094D) & PKV_UFLAG_MARK);    /* Devanagari virama Mn */
    CHECK(pkv_unicode_flags(0x0378) & PKV_UFLAG_UNASSIGNED);
    CHECK(pkv_unicode_flags(0x110000) & PKV_UFLAG_UNASSIGNED);
    /* White_Space: these and no others below 0x3001 among the samples */
    const uint32_t ws[] = {'\t', '\n', 0x0B, 0x0C, '\r', ' ', 0x85, 0xA0, 0x1680, 0x2000,
                           0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        CHECK_MSG(pkv_unicode_flags(ws[i]) & PKV_UFLAG_WHITESPACE, "U+%04X", (unsigned)ws[i]);
    const uint32_t not_ws[] = {0x1C, 0x1F, 0x200B, 0x180E, 0xFEFF, 'a', 0x3001};
    for (size_t i = 0; i < sizeof not_ws / sizeof *not_ws; i++)
        CHECK_MSG(!(pkv_unicode_flags(not_ws[i]) & PKV_UFLAG_WHITESPACE), "U+%04X",
                  (unsigned)not_ws[i]);
    /* the ranges are sorted and start at 0 */
    CHECK_EQ_INT(pkv_unicode_ranges[0].start, 0);
    for (size_t i = 1; i < pkv_unicode_n_ranges; i++)
        CHECK(pkv_unicode_ranges[i].start > pkv_unicode_ranges[i - 1].start);
}

TEST(tok_unicode_utf8) {
    size_t used;
    CHECK_EQ_INT(pkv_utf8_decode("\xc3\xa9", 2, &used), 0xE9);
    CHECK_EQ_INT(used, 2);
    CHECK_EQ_INT(pkv_utf8_decode("\xf0\x9f\xa6\x99", 4, &used), 0x1F999);
    CHECK_EQ_INT(used, 4);
    /* malformed input: U+FFFD, one byte consumed */
    CHECK_EQ_INT(pkv_utf8_decode("\xff", 1, &used), 0xFFFD);
    CHECK_EQ_INT(used, 1);
    CHECK_EQ_INT(pkv_utf8_decode("\xc3(", 2, &used), 0xFFFD);
    CHECK_EQ_INT(used, 1);
    CHECK_EQ_INT(pkv_utf8_decode("\xe2\x82", 2, &used), 0xFFFD); /* truncated */
    CHECK_EQ_INT(used, 1);
    CHECK_EQ_INT(pkv_utf8_decode("\x80", 1, &used), 0xFFFD);
    char out[4];
    CHECK_EQ_INT(pkv_utf8_encode(0x2581, out), 3);
    CHECK(memcmp(out, "\xe2\x96\x81", 3) == 0);
    CHECK_EQ_INT(pkv_utf8_len(0xF0), 4);
    CHECK_EQ_INT(pkv_utf8_len(0x80), 1);
}

/* ---------------------------------------------------------------- pre-tokenizer */

static bool pre_from_fixture_name(const char *name, tok_pre *pre) {
    if (!strcmp(name, "llama3")) *pre = TOK_PRE_LLAMA3;
    else if (!strcmp(name, "qwen2")) *pre = TOK_PRE_QWEN2;
    else if (!strcmp(name, "gpt-2")) *pre = TOK_PRE_GPT2;
    else if (!strcmp(name, "default")) *pre = TOK_PRE_DEFAULT;
    else return false;
    return true;
}

/* Pieces compared with the Python regex module's (pretok.ref). */
TEST(tok_pretok_regex_fixture) {
    file_buf fb;
    REQUIRE_MSG(read_file(FIXTURE("tokenizer/pretok.ref"), &fb), "pretok.ref missing");
    char *cursor = fb.data, *line;
    int n_cases = 0;
    char text[4096], piece[4096];
    tok_vec ends;
    tok_vec_init(&ends, sizeof(size_t));
    while ((line = next_line(&cursor))) {
        if (line[0] != 'P') continue;
        char *f[4];
        REQUIRE(split_tabs(line, f, 4) == 3);
        tok_pre pre;
        REQUIRE(pre_from_fixture_name(f[1], &pre));
        size_t len = unescape(f[2], strlen(f[2]), text);
        char *want_line = next_line(&cursor);
        REQUIRE(want_line && want_line[0] == 'S');
        pkv_error err = {0};
        REQUIRE(tok_pretokenize(pre, text, len, &ends, &err) == 0);
        /* walk the expected pieces against ours */
        char *p = want_line + 2;
        size_t begin = 0, i = 0;
        bool same = true;
        while (same) {
            char *tab = strchr(p, '\t');
            size_t flen = tab ? (size_t)(tab - p) : strlen(p);
            size_t plen = unescape(p, flen, piece);
            if (i >= ends.n) {
                same = false;
                break;
            }
            size_t end = TOK_VEC_AT(&ends, size_t, i);
            same = end - begin == plen && memcmp(text + begin, piece, plen) == 0;
            begin = end;
            i++;
            if (!tab) break;
            p = tab + 1;
        }
        same = same && i == ends.n;
        CHECK_MSG(same, "pre %s text \"%s\": piece %zu differs (we have %zu pieces)", f[1], f[2],
                  i, ends.n);
        n_cases++;
    }
    CHECK(n_cases >= 100);
    tok_vec_free(&ends);
    free(fb.data);
}

/* Cases worked out by hand from the regexes (§4.4). */
static void check_pieces(tok_pre pre, const char *text, const char *const *want, int n_want) {
    tok_vec ends;
    tok_vec_init(&ends, sizeof(size_t));
    pkv_error err = {0};
    size_t len = strlen(text);
    CHECK(tok_pretokenize(pre, text, len, &ends, &err) == 0);
    bool same = (int)ends.n == n_want;
    size_t begin = 0;
    for (int i = 0; same && i < n_want; i++) {
        size_t end = TOK_VEC_AT(&ends, size_t, i);
        same = end - begin == strlen(want[i]) && !memcmp(text + begin, want[i], end - begin);
        begin = end;
    }
    CHECK_MSG(same, "pre %d \"%s\": %zu pieces, want %d", (int)pre, text, ends.n, n_want);
    tok_vec_free(&ends);
}

#define PIECES(pre, text, ...)                                                             \
    check_pieces(pre, text, (const char *const[]){__VA_ARGS__},                            \
                 (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)))

TEST(tok_pretok_hand_cases) {
    /* \p{N}{1,3} groups digits by three; qwen2's \p{N} takes one */
    PIECES(TOK_PRE_LLAMA3, "1234567", "123", "456", "7");
    PIECES(TOK_PRE_QWEN2, "123", "1", "2", "3");
    PIECES(TOK_PRE_GPT2, " 1234 x", " 1234", " x");
    /* \s+(?!\S) leaves the last space to lead the next word */
    PIECES(TOK_PRE_LLAMA3, "a   b", "a", "  ", " b");
    PIECES(TOK_PRE_LLAMA3, "a   ", "a", "   ");
    /* \s*[\r\n]+ ends after the last newline of a whitespace run */
    PIECES(TOK_PRE_LLAMA3, "a \n \n  b", "a", " \n \n", " ", " b");
    /* a punctuation run takes one leading space and trailing newlines */
    PIECES(TOK_PRE_LLAMA3, "x !!\n\ny", "x", " !!\n\n", "y");
    /* contractions: case-insensitive in llama3, lowercase only in gpt-2 */
    PIECES(TOK_PRE_LLAMA3, "IT'S", "IT", "'S");
    PIECES(TOK_PRE_GPT2, "IT'S", "IT", "'", "S");
    /* [^\r\n\p{L}\p{N}]? lets any one non-letter lead a word, not a newline */
    PIECES(TOK_PRE_LLAMA3, "\tab\ncd", "\tab", "\n", "cd");
    /* default: punctuation runs first, then gpt-2, then digits, then triples */
    PIECES(TOK_PRE_DEFAULT, "a+b=12345", "a", "+", "b", "=", "123", "45");
}

/* ---------------------------------------------------------------- SPM (§4.3), in memory */

/* ids of the small SPM vocabulary below */
enum { S_UNK, S_BOS, S_EOS, S_SP, S_A, S_B, S_C, S_AB, S_BC, S_ABC, S_SPA, S_AA, S_CTRL,
       S_UD, S_XC3, S_XA9, S_COUNT };

static pkv_tokenizer *spm_vocab(tok_vocab_desc *extra) {
    static const vtok toks[S_COUNT] = {
        [S_UNK] = {"<unk>", 0, PKV_TOKTYPE_UNKNOWN},
        [S_BOS] = {"<s>", 0, PKV_TOKTYPE_CONTROL},
        [S_EOS] = {"</s>", 0, PKV_TOKTYPE_CONTROL},
        [S_SP] = {"\xe2\x96\x81", -5, 0},
        [S_A] = {"a", -6, 0},
        [S_B] = {"b", -7, 0},
        [S_C] = {"c", -8, 0},
        [S_AB] = {"ab", -2, 0},
        [S_BC] = {"bc", -1, 0}, /* higher score than "ab": merged first */
        [S_ABC] = {"cab", -3, 0},
        [S_SPA] = {"\xe2\x96\x81" "a", -4, 0},
        [S_AA] = {"aa", -1, 0},
        [S_CTRL] = {"<ctrl>", 0, PKV_TOKTYPE_CONTROL},
        [S_UD] = {"<ud>", 0, PKV_TOKTYPE_USER_DEFINED},
        [S_XC3] = {"<0xC3>", 0, PKV_TOKTYPE_BYTE},
        [S_XA9] = {"<0xA9>", 0, PKV_TOKTYPE_BYTE},
    };
    return make_vocab(PKV_TOK_SPM, NULL, toks, S_COUNT, NULL, 0, extra);
}

TEST(tok_spm_merge_order) {
    tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.add_space_prefix = 0;
    pkv_tokenizer *tok = spm_vocab(&d);
    REQUIRE(tok);
    /* "bc" (-1) beats "ab" (-2); then "a"+"bc" is not a token */
    ENCODE_IS(tok, "abc", false, false, IDS(S_A, S_BC));
    /* "ab", then "c"+"ab" = "cab" */
    ENCODE_IS(tok, "cab", false, false, IDS(S_ABC));
    /* "aa" at 0 and at 1 tie: the leftmost merges, the other pair is stale */
    ENCODE_IS(tok, "aaa", false, false, IDS(S_AA, S_A));
    ENCODE_IS(tok, "aaaa", false, false, IDS(S_AA, S_AA));
    /* "ab" twice; "ba" and "abab" are not tokens */
    ENCODE_IS(tok, "abab", false, false, IDS(S_AB, S_AB));
    /* spaces become U+2581; "▁a" is a token */
    ENCODE_IS(tok, "a a", false, false, IDS(S_A, S_SPA));
    /* byte fallback: é = C3 A9 */
    ENCODE_IS(tok, "\xc3\xa9", false, false, IDS(S_XC3, S_XA9));
    /* a byte with neither a <0xXX> token nor a one-byte token is an error naming
     * it (llama.cpp's byte_to_token fails there too), never dropped or <unk> */
    CHECK(encode_fails(tok, "z", false, "byte 0x7A has no token"));
    CHECK(encode_fails(tok, "ab\xc3\xa9z", false, "byte 0x7A has no token"));
    ENCODE_IS(tok, "", false, false, NO_IDS);
    pkv_tokenizer_free(tok);
}

TEST(tok_spm_space_prefix_and_bos) {
    /* no keys: llama.cpp's SPM defaults BOS 1, EOS 2, add_bos, add_space_prefix */
    pkv_tokenizer *tok = spm_vocab(NULL);
    REQUIRE(tok);
    CHECK_EQ_INT(pkv_tokenizer_bos(tok), S_BOS);
    CHECK_EQ_INT(pkv_tokenizer_eos(tok), S_EOS);
    CHECK(pkv_tokenizer_add_bos(tok));
    ENCODE_IS(tok, "a", true, false, IDS(S_BOS, S_SPA));
    ENCODE_IS(tok, "", true, false, IDS(S_BOS));
    /* the prefix goes on the first fragment and on each after a special token */
    ENCODE_IS(tok, "a<ctrl>a", false, true, IDS(S_SPA, S_CTRL, S_SPA));
    ENCODE_IS(tok, "a<ud>a", false, false, IDS(S_SPA, S_UD, S_SPA));
    /* parse_special off: "<ctrl>" is text; of its characters only "c" is a
     * token, and '<' has no byte token either: an error naming it */
    CHECK(encode_fails(tok, "<ctrl>", false, "byte 0x3C has no token"));
    ENCODE_IS(tok, "<ctrl>", false, true, IDS(S_CTRL));
    pkv_tokenizer_free(tok);

    tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.add_eos = 1;
    d.bos = S_EOS; /* keys override the defaults */
    d.eos = S_BOS;
    d.add_space_prefix = 0;
    tok = spm_vocab(&d);
    REQUIRE(tok);
    ENCODE_IS(tok, "a", true, false, IDS(S_EOS, S_A, S_BOS));
    ENCODE_IS(tok, "a", false, false, IDS(S_A));
    pkv_tokenizer_free(tok);
}

/* ---------------------------------------------------------------- BPE (§4.4), in memory */

enum { B_A, B_B, B_C, B_AB, B_BC, B_ABC, B_AA, B_AAAA, B_SP, B_SPA, B_EOT, B_UD, B_COUNT };

static pkv_tokenizer *bpe_vocab(const char *pre, const char *const *merges, int n_merges) {
    static const vtok toks[B_COUNT] = {
        [B_A] = {"a", 0, 0},       [B_B] = {"b", 0, 0},     [B_C] = {"c", 0, 0},
        [B_AB] = {"ab", 0, 0},     [B_BC] = {"bc", 0, 0},   [B_ABC] = {"abc", 0, 0},
        [B_AA] = {"aa", 0, 0},     [B_AAAA] = {"aaaa", 0, 0},
        [B_SP] = {"\xc4\xa0", 0, 0}, /* GPT-2 maps the space byte to U+0120 */
        [B_SPA] = {"\xc4\xa0" "a", 0, 0},
        [B_EOT] = {"<|im_end|>", 0, 0}, /* a normal token, made control by its text */
        [B_UD] = {"<ud>", 0, PKV_TOKTYPE_USER_DEFINED},
    };
    return make_vocab(PKV_TOK_BPE, pre, toks, B_COUNT, merges, n_merges, NULL);
}

TEST(tok_bpe_merge_order) {
    static const char *const merges[] = {"b c", "a b", "a bc", "a a", "aa aa", "\xc4\xa0 a"};
    pkv_tokenizer *tok = bpe_vocab("gpt-2", merges, 6);
    REQUIRE(tok);
    /* rank 0 "b c" first, then rank 2 "a bc" */
    ENCODE_IS(tok, "abc", false, false, IDS(B_ABC));
    /* "ab" (rank 1) alone */
    ENCODE_IS(tok, "ab", false, false, IDS(B_AB));
    /* equal ranks: leftmost pair first, so aa|aa, then "aa aa" */
    ENCODE_IS(tok, "aaaa", false, false, IDS(B_AAAA));
    ENCODE_IS(tok, "aaa", false, false, IDS(B_AA, B_A));
    /* " a" is one gpt-2 piece: U+0120 a */
    ENCODE_IS(tok, "a a", false, false, IDS(B_A, B_SPA));
    /* a byte whose byte-level character is not a token: an error naming it
     * (llama.cpp drops it without a word) */
    CHECK(encode_fails(tok, "az", false, "byte 0x7A has no token"));
    CHECK(encode_fails(tok, "a\xc3\xa9", false, "byte 0xC3 has no token"));
    /* a merge whose result is not in the vocabulary: its characters are taken one by one */
    static const char *const orphan[] = {"a c"};
    pkv_tokenizer *tok2 = bpe_vocab("gpt-2", orphan, 1);
    REQUIRE(tok2);
    ENCODE_IS(tok2, "ac", false, false, IDS(B_A, B_C));
    pkv_tokenizer_free(tok2);
    /* BPE defaults: no BOS added unless the pre-tokenizer asks */
    CHECK(!pkv_tokenizer_add_bos(tok));
    pkv_tokenizer_free(tok);
}

TEST(tok_bpe_ignore_merges) {
    static const char *const merges[] = {"a b"};
    /* llama-bpe sets ignore_merges: a piece that is a token is taken whole */
    pkv_tokenizer *tok = bpe_vocab("llama-bpe", merges, 1);
    REQUIRE(tok);
    ENCODE_IS(tok, "abc", false, false, IDS(B_ABC));
    CHECK(pkv_tokenizer_add_bos(tok)); /* llama3 pre-tokenizers add BOS */
    pkv_tokenizer_free(tok);
    /* qwen2 merges: ab + c */
    tok = bpe_vocab("qwen2", merges, 1);
    REQUIRE(tok);
    ENCODE_IS(tok, "abc", false, false, IDS(B_AB, B_C));
    pkv_tokenizer_free(tok);
    /* an unknown pre-tokenizer name falls back to "default" */
    tok = bpe_vocab("no-such-pre", merges, 1);
    REQUIRE(tok);
    CHECK_EQ_INT(tok->pre, TOK_PRE_DEFAULT);
    pkv_tokenizer_free(tok);
}

/* ---------------------------------------------------------------- special tokens (§4.2) */

TEST(tok_special_longest_first) {
    enum { W, X, Y, Z, WX, XYZ, CTL, N };
    static const vtok toks[N] = {
        [W] = {"w", 0, 0},   [X] = {"x", 0, 0}, [Y] = {"y", 0, 0}, [Z] = {"z", 0, 0},
        [WX] = {"wx", 0, PKV_TOKTYPE_USER_DEFINED},
        [XYZ] = {"xyz", 0, PKV_TOKTYPE_USER_DEFINED},
        [CTL] = {"<c>", 0, PKV_TOKTYPE_CONTROL},
    };
    tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.add_space_prefix = 0;
    pkv_tokenizer *tok = make_vocab(PKV_TOK_SPM, NULL, toks, N, NULL, 0, &d);
    REQUIRE(tok);
    /* longer special text first over the whole text: "xyz" wins over the
     * earlier "wx" (a leftmost-first scan would take "wx") */
    ENCODE_IS(tok, "wxyz", false, false, IDS(W, XYZ));
    ENCODE_IS(tok, "wxwx", false, false, IDS(WX, WX));
    ENCODE_IS(tok, "xyzwxyz", false, false, IDS(XYZ, W, XYZ));
    /* control tokens only with parse_special; user-defined always */
    ENCODE_IS(tok, "<c>wx", true, true, IDS(1, CTL, WX)); /* default BOS id 1 */
    pkv_tokenizer_free(tok);
}

TEST(tok_special_eog_and_types) {
    static const char *const merges[] = {"a b"};
    pkv_tokenizer *tok = bpe_vocab("gpt-2", merges, 1);
    REQUIRE(tok);
    /* "<|im_end|>" is detected by its text: end of generation, and control */
    CHECK(pkv_tokenizer_is_eog(tok, B_EOT));
    CHECK(!pkv_tokenizer_is_eog(tok, B_A));
    CHECK_EQ_INT(pkv_tokenizer_type(tok, B_EOT), PKV_TOKTYPE_CONTROL);
    CHECK_EQ_INT(pkv_tokenizer_type(tok, B_UD), PKV_TOKTYPE_USER_DEFINED);
    ENCODE_IS(tok, "a<|im_end|>", false, true, IDS(B_A, B_EOT));
    CHECK_EQ_INT(pkv_tokenizer_find(tok, "<|im_end|>"), B_EOT);
    CHECK_EQ_INT(pkv_tokenizer_find(tok, "nope"), -1);
    pkv_tokenizer_free(tok);
}

/* ---------------------------------------------------------------- decoding */

static bool piece_is(const pkv_tokenizer *tok, int32_t id, bool special, const char *want,
                     size_t want_len) {
    char buf[64];
    int n = pkv_tokenizer_piece(tok, id, special, buf, sizeof buf);
    return n == (int)want_len && memcmp(buf, want, want_len) == 0;
}

TEST(tok_decode_pieces) {
    pkv_tokenizer *tok = spm_vocab(NULL);
    REQUIRE(tok);
    CHECK(piece_is(tok, S_SPA, false, " a", 2));        /* U+2581 -> space */
    CHECK(piece_is(tok, S_XC3, false, "\xc3", 1));      /* byte token -> byte */
    CHECK(piece_is(tok, S_CTRL, false, "", 0));         /* control: nothing */
    CHECK(piece_is(tok, S_CTRL, true, "<ctrl>", 6));    /* unless asked */
    CHECK(piece_is(tok, S_UD, false, "<ud>", 4));       /* user-defined: text */
    CHECK_EQ_INT(pkv_tokenizer_piece(tok, S_COUNT, false, NULL, 0), -1);
    /* a short buffer: the full length comes back, the buffer holds a prefix */
    char small[1];
    CHECK_EQ_INT(pkv_tokenizer_piece(tok, S_SPA, false, small, 1), 2);
    CHECK(small[0] == ' ');
    pkv_tokenizer_free(tok);

    static const char *const merges[] = {"a b"};
    tok = bpe_vocab("gpt-2", merges, 1);
    REQUIRE(tok);
    CHECK(piece_is(tok, B_SPA, false, " a", 2)); /* U+0120 -> 0x20 */
    pkv_tokenizer_free(tok);
}

TEST(tok_bpe_byte_mapping) {
    /* GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68
     * to 256.. in byte order (space 0x20 is the 33rd: U+0120) */
    CHECK_EQ_INT(tok_bpe_byte_to_cp('A'), 'A');
    CHECK_EQ_INT(tok_bpe_byte_to_cp(0x00), 0x100);
    CHECK_EQ_INT(tok_bpe_byte_to_cp(' '), 0x120);
    CHECK_EQ_INT(tok_bpe_byte_to_cp('\n'), 0x10A);
    CHECK_EQ_INT(tok_bpe_byte_to_cp(0x7F), 0x121);
    CHECK_EQ_INT(tok_bpe_byte_to_cp(0xAD), 0x143);
    CHECK_EQ_INT(tok_bpe_byte_to_cp(0xE9), 0xE9);
    for (int b = 0; b < 256; b++)
        CHECK_EQ_INT(tok_bpe_cp_to_byte(tok_bpe_byte_to_cp((uint8_t)b)), b);
    CHECK_EQ_INT(tok_bpe_cp_to_byte(0x144), -1);
    CHECK_EQ_INT(tok_bpe_cp_to_byte(0xAD), -1);
}

/* ---------------------------------------------------------------- fixture vocabularies */

typedef struct {
    gguf_file file;
    pkv_tokenizer *tok;
} loaded_vocab;

static bool load_vocab(const char *path, loaded_vocab *v) {
    pkv_error err = {0};
    memset(v, 0, sizeof *v);
    if (gguf_open(&v->file, path, &err) != 0) {
        printf("    %s: %s\n", path, err.msg);
        return false;
    }
    v->tok = pkv_tokenizer_load(&v->file, &err);
    if (!v->tok) {
        printf("    %s: %s\n", path, err.msg);
        gguf_close(&v->file);
        return false;
    }
    return true;
}

static void unload_vocab(loaded_vocab *v) {
    pkv_tokenizer_free(v->tok);
    gguf_close(&v->file);
}

/* Checks every record of an ids fixture; returns the number of records. */
static int check_ids_fixture(const pkv_tokenizer *tok, const char *ref_path) {
    file_buf fb;
    if (!read_file(ref_path, &fb)) {
        test_fail(__FILE__, __LINE__, "%s missing", ref_path);
        return 0;
    }
    static char text[1 << 16];
    static int32_t want[1 << 14];
    size_t text_len = 0;
    int n_records = 0;
    char *cursor = fb.data, *line;
    while ((line = next_line(&cursor))) {
        if (line[0] == '#') continue;
        char *f[3];
        int nf = split_tabs(line, f, 3);
        if (!strcmp(f[0], "T")) {
            text_len = nf > 1 ? unescape(f[1], strlen(f[1]), text) : 0;
            continue;
        }
        if (strlen(f[0]) != 2) continue;
        bool add_special = f[0][0] == '1', parse_special = f[0][1] == '1';
        int n_want = nf > 1 ? parse_ids(f[1], want, 1 << 14) : 0;
        CHECK_MSG(encode_is(tok, text, text_len, add_special, parse_special, want, n_want),
                  "%s: record %d", ref_path, n_records);
        n_records++;
    }
    free(fb.data);
    return n_records;
}

TEST(tok_bpe_llama3_vs_hf) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("tokenizer/bpe-llama3.gguf"), &v));
    CHECK_EQ_INT(pkv_tokenizer_kind(v.tok), PKV_TOK_BPE);
    CHECK(pkv_tokenizer_add_bos(v.tok)); /* from the llama-bpe pre-tokenizer */
    CHECK(check_ids_fixture(v.tok, FIXTURE("tokenizer/bpe-llama3.ref")) >= 160);
    unload_vocab(&v);
}

TEST(tok_bpe_qwen2_vs_hf) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("tokenizer/bpe-qwen2.gguf"), &v));
    CHECK(!pkv_tokenizer_add_bos(v.tok));
    CHECK(check_ids_fixture(v.tok, FIXTURE("tokenizer/bpe-qwen2.ref")) >= 160);
    /* both im_end (EOS) and endoftext (by text) end generation */
    CHECK(pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|im_end|>")));
    CHECK(pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|endoftext|>")));
    CHECK(!pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|im_start|>")));
    unload_vocab(&v);
}

TEST(tok_spm_vs_sentencepiece) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("tokenizer/spm.gguf"), &v));
    CHECK_EQ_INT(pkv_tokenizer_kind(v.tok), PKV_TOK_SPM);
    CHECK(check_ids_fixture(v.tok, FIXTURE("tokenizer/spm.ref")) >= 80);
    unload_vocab(&v);
}

/* The vocabularies of the Qwen3 and Phi-3 fixture models (written by
 * tools/make-model-fixtures.py as the converter writes them) against the
 * reference tokenizers on the same vocabularies: HF tokenizers for Qwen3's
 * byte-level BPE, whose <think> and </think> are user-defined tokens that
 * split out of any text; sentencepiece for Phi-3's SPM, with its added
 * control tokens, [PAD] padding and no BOS. */
TEST(tok_qwen3_vocab_vs_hf) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("models/tiny-qwen3-f32.gguf"), &v));
    CHECK_EQ_INT(pkv_tokenizer_kind(v.tok), PKV_TOK_BPE);
    CHECK(!pkv_tokenizer_add_bos(v.tok));
    CHECK(check_ids_fixture(v.tok, FIXTURE("models/tiny-qwen3.tok")) >= 16);
    int32_t think = pkv_tokenizer_find(v.tok, "<think>");
    CHECK(think >= 0 && pkv_tokenizer_type(v.tok, think) == PKV_TOKTYPE_USER_DEFINED);
    CHECK(!pkv_tokenizer_is_eog(v.tok, think));
    CHECK(pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|im_end|>")));
    CHECK_EQ_INT(pkv_tokenizer_eos(v.tok), pkv_tokenizer_find(v.tok, "<|im_end|>"));
    unload_vocab(&v);
}

TEST(tok_phi3_vocab_vs_sentencepiece) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("models/tiny-phi3-f32.gguf"), &v));
    CHECK_EQ_INT(pkv_tokenizer_kind(v.tok), PKV_TOK_SPM);
    CHECK(!pkv_tokenizer_add_bos(v.tok));
    CHECK(check_ids_fixture(v.tok, FIXTURE("models/tiny-phi3.tok")) >= 12);
    /* <|end|> ends a turn, as <|endoftext|> (the EOS) does */
    CHECK(pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|end|>")));
    CHECK(pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|endoftext|>")));
    CHECK(!pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|user|>")));
    CHECK_EQ_INT(pkv_tokenizer_type(v.tok, pkv_tokenizer_find(v.tok, "[PAD511]")), PKV_TOKTYPE_UNUSED);
    /* with parse_special the control tokens are one id each */
    int32_t ids[16];
    pkv_error err = {0};
    int n = pkv_tokenizer_encode(v.tok, "<|user|>", 8, false, true, ids, 16, &err);
    CHECK(n == 1 && ids[0] == pkv_tokenizer_find(v.tok, "<|user|>"));
    unload_vocab(&v);
}

/* Decoding the ids of any text gives the text back (byte-level BPE loses
 * nothing; special tokens rendered). */
static void check_round_trip(const pkv_tokenizer *tok, const char *text) {
    int32_t ids[1024];
    char out[4096];
    pkv_error err = {0};
    int n = pkv_tokenizer_encode(tok, text, strlen(text), false, true, ids, 1024, &err);
    REQUIRE(n >= 0 && n <= 1024);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int k = pkv_tokenizer_piece(tok, ids[i], true, out + len, (int)(sizeof out - len));
        REQUIRE(k >= 0 && len + (size_t)k < sizeof out);
        len += (size_t)k;
    }
    CHECK_MSG(len == strlen(text) && !memcmp(out, text, len), "round trip of \"%s\"", text);
}

TEST(tok_bpe_round_trip) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("tokenizer/bpe-llama3.gguf"), &v));
    check_round_trip(v.tok, "Hello, world! \xf0\x9f\xa6\x99 \xe4\xbd\xa0\xe5\xa5\xbd\n\tcode();");
    check_round_trip(v.tok, "<|begin_of_text|>x<|eot_id|>  \n\n 12345 \xc3\xa9t\xc3\xa9");
    unload_vocab(&v);
}

/* A long mixed text (100K+ tokens): the whole of it survives an encode/decode
 * round trip. How fast that runs is measured, not asserted here. */
static char *long_text(size_t *len) {
    static const char *const parts[] = {"The quick brown fox jumps over the lazy dog. ",
                                        "for (int i = 0; i < n; i++) {\n\tx += 1;\n}\n",
                                        "Numbers 12345 and 3.14159; ",
                                        "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c ",
                                        "I'm sure it's fine.   ",
                                        "\xc3\x84pfel \xc3\xbc"
                                        "ber Stra\xc3\x9f"
                                        "e\n\n"};
    size_t cap = 600000, n = 0;
    char *s = malloc(cap);
    for (int k = 0; s && n + 64 < cap; k++) {
        const char *p = parts[k % 6];
        size_t m = strlen(p);
        if (n + m >= cap) break;
        memcpy(s + n, p, m);
        n += m;
    }
    *len = n;
    return s;
}

/* Encodes the text and decodes it back; returns the token count. */
static int long_round_trip(const pkv_tokenizer *tok, const char *text, size_t len) {
    int32_t *ids = malloc(sizeof(int32_t) * 400000);
    char *out = malloc(len + 1);
    pkv_error err = {0};
    int n = ids && out ? pkv_tokenizer_encode(tok, text, len, false, true, ids, 400000, &err) : -1;
    size_t got = 0;
    for (int i = 0; i < n && got <= len; i++) {
        int k = pkv_tokenizer_piece(tok, ids[i], true, out + got, (int)(len + 1 - got));
        if (k < 0 || got + (size_t)k > len) {
            got = len + 1;
            break;
        }
        got += (size_t)k;
    }
    CHECK_MSG(got == len && !memcmp(out, text, len), "the long text does not survive a round trip");
    free(ids);
    free(out);
    return n;
}

TEST(tok_bpe_long_text) {
    loaded_vocab v;
    REQUIRE(load_vocab(FIXTURE("tokenizer/bpe-llama3.gguf"), &v));
    size_t len;
    char *text = long_text(&len);
    REQUIRE(text);
    CHECK(long_round_trip(v.tok, text, len) >= 100000);
    free(text);
    unload_vocab(&v);
}

/* ---------------------------------------------------------------- loading from GGUF */

static const char *const k_small_tokens[] = {"<unk>", "<s>", "</s>", "a", "b"};

static gguf_writer *small_vocab_writer(const char *model) {
    gguf_writer *w = gguf_writer_new();
    gguf_write_str(w, "general.architecture", "llama");
    if (model) gguf_write_str(w, "tokenizer.ggml.model", model);
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", k_small_tokens, 5);
    return w;
}

/* Loading fails with a message naming the key, never crashes. */
static void check_load_error(gguf_writer *w, pkv_status code, const char *key) {
    mem_gguf m;
    if (!open_written(w, &m)) {
        test_fail(__FILE__, __LINE__, "could not write the test file");
        return;
    }
    pkv_error err = {0};
    pkv_tokenizer *tok = pkv_tokenizer_load(&m.file, &err);
    CHECK_MSG(!tok && err.code == code && strstr(err.msg, key), "want %s error naming %s, got: %s",
              pkv_status_name(code), key, tok ? "success" : err.msg);
    pkv_tokenizer_free(tok);
    close_written(&m);
}

TEST(tok_load_errors) {
    check_load_error(small_vocab_writer(NULL), PKV_ERR_FORMAT, "tokenizer.ggml.model");
    check_load_error(small_vocab_writer("bert"), PKV_ERR_UNSUPPORTED, "bert");
    /* BPE needs merges */
    check_load_error(small_vocab_writer("gpt2"), PKV_ERR_FORMAT, "tokenizer.ggml.merges");
    /* fewer scores than tokens */
    gguf_writer *w = small_vocab_writer("llama");
    const float scores[] = {0, 0};
    gguf_write_arr_f32(w, "tokenizer.ggml.scores", scores, 2);
    check_load_error(w, PKV_ERR_FORMAT, "tokenizer.ggml.scores");
    /* token types of the wrong element type */
    w = small_vocab_writer("llama");
    gguf_write_arr_f32(w, "tokenizer.ggml.token_type", (const float[]){1, 1, 1, 1, 1}, 5);
    check_load_error(w, PKV_ERR_FORMAT, "tokenizer.ggml.token_type");
    /* tokens must be strings */
    w = gguf_writer_new();
    gguf_write_str(w, "tokenizer.ggml.model", "llama");
    gguf_write_arr_i32(w, "tokenizer.ggml.tokens", (const int32_t[]){1, 2}, 2);
    check_load_error(w, PKV_ERR_FORMAT, "tokenizer.ggml.tokens");
    /* an id key of the wrong type */
    w = small_vocab_writer("llama");
    gguf_write_str(w, "tokenizer.ggml.bos_token_id", "1");
    check_load_error(w, PKV_ERR_FORMAT, "bos_token_id");
    /* every special-token id outside the vocabulary (5 tokens) is refused, naming
     * the key and the file, rather than silently replaced by a default */
    static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
                                          "tokenizer.ggml.eom_token_id", "tokenizer.ggml.padding_token_id"};
    for (int i = 0; i < 6; i++) {
        w = small_vocab_writer("llama");
        gguf_write_u32(w, id_keys[i], i % 2 ? 5 : 99);
        char want[96];
        snprintf(want, sizeof want, "mem.gguf: %s = %d is outside the vocabulary [0, 5)", id_keys[i], i % 2 ? 5 : 99);
        check_load_error(w, PKV_ERR_FORMAT, want);
        w = small_vocab_writer("llama");
        gguf_write_i32(w, id_keys[i], -1);
        check_load_error(w, PKV_ERR_FORMAT, id_keys[i]);
    }
}

TEST(tok_load_keys) {
    gguf_writer *w = small_vocab_writer("llama");
    gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 4);
    gguf_write_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_write_bool(w, "tokenizer.ggml.add_space_prefix", false);
    mem_gguf m;
    REQUIRE(open_written(w, &m));
    pkv_error err = {0};
    pkv_tokenizer *tok = pkv_tokenizer_load(&m.file, &err);
    REQUIRE_MSG(tok, "%s", err.msg);
    CHECK_EQ_INT(pkv_tokenizer_bos(tok), 4);
    CHECK_EQ_INT(pkv_tokenizer_eos(tok), 2);
    CHECK(!pkv_tokenizer_add_bos(tok));
    /* no token types: every token is normal, so "<s>" is plain text here */
    CHECK_EQ_INT(pkv_tokenizer_type(tok, 1), PKV_TOKTYPE_NORMAL);
    ENCODE_IS(tok, "ab", true, true, IDS(3, 4));
    size_t len;
    const char *text = pkv_tokenizer_text(tok, 3, &len);
    CHECK(text && len == 1 && text[0] == 'a');
    CHECK(pkv_tokenizer_text(tok, 5, &len) == NULL);
    pkv_tokenizer_free(tok);
    close_written(&m);
}

/* Random bytes: no crash, and a short output buffer gives the same count and
 * the same leading ids. */
TEST(tok_random_bytes) {
    loaded_vocab vocabs[3];
    const char *paths[3] = {FIXTURE("tokenizer/bpe-llama3.gguf"),
                            FIXTURE("tokenizer/bpe-qwen2.gguf"), FIXTURE("tokenizer/spm.gguf")};
    for (int v = 0; v < 3; v++) REQUIRE(load_vocab(paths[v], &vocabs[v]));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    char text[256];
    int32_t full[1024], part[8];
    for (int iter = 0; iter < 300; iter++) {
        size_t len = (size_t)(iter % 97);
        for (size_t i = 0; i < len; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t b = (uint8_t)(state >> 56);
            /* bias towards spaces, newlines and special-token bytes */
            text[i] = (char)(b < 40 ? " \n\t<|>"[b % 6] : b);
        }
        for (int v = 0; v < 3; v++) {
            pkv_error err = {0};
            bool ps = iter & 1;
            int n = pkv_tokenizer_encode(vocabs[v].tok, text, len, true, ps, full, 1024, &err);
            int k = pkv_tokenizer_encode(vocabs[v].tok, text, len, true, ps, part, 8, &err);
            REQUIRE_MSG(n >= 0 && n <= 1024 && k == n, "iter %d vocab %d: %d vs %d (%s)", iter, v,
                        n, k, err.msg);
            CHECK(memcmp(full, part, sizeof(int32_t) * (size_t)(n < 8 ? n : 8)) == 0);
            for (int i = 0; i < n; i++)
                CHECK(full[i] >= 0 && full[i] < pkv_tokenizer_n_vocab(vocabs[v].tok));
        }
    }
    for (int v = 0; v < 3; v++) unload_vocab(&vocabs[v]);
}

/* The chat formats are tested in test_chat.c. */

/* ---------------------------------------------------------------- real model (Gemma 3 270M) */

#define GEMMA_PATH "models/gemma-3-270m-q4_k_m.gguf"

/* llama.cpp's llama-tokenize output for gemma3-270m.inp (§4.6). */
TEST(real_tok_gemma3_vs_llamacpp) {
    loaded_vocab v;
    REQUIRE_MSG(load_vocab(GEMMA_PATH, &v), "%s missing (make model)", GEMMA_PATH);
    CHECK_EQ_INT(pkv_tokenizer_n_vocab(v.tok), 262144);
    CHECK_EQ_INT(pkv_tokenizer_bos(v.tok), 2);
    CHECK_EQ_INT(pkv_tokenizer_eos(v.tok), 1);
    CHECK(check_ids_fixture(v.tok, FIXTURE("tokenizer/gemma3-270m.ref")) >= 160);
    /* <end_of_turn> ends generation besides <eos> (§4.6) */
    CHECK(pkv_tokenizer_is_eog(v.tok, 106));
    CHECK(pkv_tokenizer_is_eog(v.tok, 1));
    CHECK(!pkv_tokenizer_is_eog(v.tok, 105));
    /* "</s>" (212) is a user-defined tag in Gemma 3, but llama.cpp recognises
     * its text as end-of-generation and treats it as control */
    CHECK(pkv_tokenizer_is_eog(v.tok, 212));
    CHECK_EQ_INT(pkv_tokenizer_type(v.tok, 212), PKV_TOKTYPE_CONTROL);
    unload_vocab(&v);
}

/* ---------------------------------------------------------------- real models (Qwen2.5-Coder Instruct) */

/* llama.cpp's llama-tokenize output for qwen2.5-coder.inp (the qwen2
 * pre-tokenizer's digits, contractions, scripts, white-space runs, emoji and
 * code; written by tools/make-tokenizer-ref-llamacpp.sh). The 0.5B and 1.5B
 * models share the vocabulary, so one reference serves both. */
static void check_qwen_vocab(const char *path) {
    loaded_vocab v;
    REQUIRE_MSG(load_vocab(path, &v), "%s missing (make model NAME=...)", path);
    CHECK_EQ_INT(pkv_tokenizer_kind(v.tok), PKV_TOK_BPE);
    CHECK(!pkv_tokenizer_add_bos(v.tok));
    CHECK(check_ids_fixture(v.tok, FIXTURE("tokenizer/qwen2.5-coder.ref")) >= 4 * 60);
    /* end of generation as llama.cpp decides it (src/llama-vocab.cpp): the
     * ChatML end of turn, <|endoftext|>, and the coder's FIM pad, repo-name and
     * file-separator tokens */
    const char *eog[] = {"<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"};
    for (size_t i = 0; i < sizeof eog / sizeof *eog; i++) {
        int32_t id = pkv_tokenizer_find(v.tok, eog[i]);
        CHECK_MSG(id >= 0 && pkv_tokenizer_is_eog(v.tok, id), "%s should end generation", eog[i]);
    }
    CHECK(!pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|im_start|>")));
    CHECK(!pkv_tokenizer_is_eog(v.tok, pkv_tokenizer_find(v.tok, "<|fim_prefix|>")));
    unload_vocab(&v);
}

TEST(real_tok_qwen05_vs_llamacpp) { check_qwen_vocab("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"); }

/* make test-qwen1.5b */
TEST(manual_qwen15_tok_vs_llamacpp) { check_qwen_vocab("models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"); }

TEST(real_tok_gemma3_chat_example) {
    loaded_vocab v;
    REQUIRE_MSG(load_vocab(GEMMA_PATH, &v), "%s missing (make model)", GEMMA_PATH);
    pkv_chat_style st;
    pkv_error err = {0};
    REQUIRE(pkv_chat_style_for_model(&v.file, "gemma3", v.tok, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_GEMMA);
    CHECK_STR(st.bos, "<bos>");
    pkv_chat_message msgs[] = {{"user", "Test"}};
    char buf[256];
    int system_end = -1;
    int n = pkv_chat_render(&st, msgs, 1, buf, sizeof buf, &system_end, &err);
    REQUIRE(n > 0);
    CHECK_EQ_INT(system_end, 0);
    /* docs/engine.md §4.6: add_special=false, parse_special=true */
    CHECK(encode_is(v.tok, buf, (size_t)n, false, true,
                    IDS(2, 105, 2364, 107, 3694, 106, 107, 105, 4368, 107)));
    unload_vocab(&v);
}

TEST(real_tok_gemma3_round_trip) {
    loaded_vocab v;
    REQUIRE_MSG(load_vocab(GEMMA_PATH, &v), "%s missing (make model)", GEMMA_PATH);
    check_round_trip(v.tok, "Hello, world! \xf0\x9f\xa6\x99 \xe4\xbd\xa0\xe5\xa5\xbd\n\tcode();");
    check_round_trip(v.tok, "<start_of_turn>user\n  spaces    and\ttabs\t\t<end_of_turn>\n");
    check_round_trip(v.tok, "\xf4\x8f\xbf\xbd byte fallback \xee\x80\x80 \xc3\xa9t\xc3\xa9");
    unload_vocab(&v);
}

TEST(real_tok_gemma3_long_text) {
    gguf_file f;
    pkv_error err = {0};
    REQUIRE_MSG(gguf_open(&f, GEMMA_PATH, &err) == 0, "%s missing (make model): %s", GEMMA_PATH, err.msg);
    pkv_tokenizer *tok = pkv_tokenizer_load(&f, &err);
    REQUIRE_MSG(tok, "%s", err.msg);
    size_t len;
    char *text = long_text(&len);
    REQUIRE(text);
    CHECK(long_round_trip(tok, text, len) >= 100000);
    free(text);
    pkv_tokenizer_free(tok);
    gguf_close(&f);
}
