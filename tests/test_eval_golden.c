/*
 * Golden prompts: for fixed (task, length, sample, haystack size, depth) the
 * generators must produce exactly the text, gold answers and answer spans
 * that tools/eval-golden.py computes. That script is an independent Python
 * implementation of the documented PRNG (src/eval/rng.h) and of the
 * construction rules of docs/evaluation.md §1-2 (RULER's list-insert semantics,
 * " ".join of sentence groups, ...); the table below is its --c output.
 */
#include <string.h>

#include "eval/rng.h"
#include "eval/tasks.h"
#include "test.h"

typedef struct {
    const char *task;
    int length, sample, units, aux;
    double depth; /* -1: not a grid task */
    uint64_t hash; /* FNV-1a-64 of context + question + answer_prefix */
    int context_len, question_len, prefix_len;
    int n_gold;
    const char *gold[10];
    int n_spans;
    pkv_byte_span spans[8];
    int question; /* multi-question tasks (docs/evaluation.md §2.5) */
} golden_case;

static const golden_case GOLDEN[] = {
    {"niah_single_1", 1024, 0, 12, 0, -1, 0x288aecb1aae2ef98ULL, 1272, 79, 74,
     1, {"1211812"}, 1, {{723, 730}}, 0},
    {"niah_single_1", 1024, 3, 40, 0, -1, 0x7b7fed6222af3f7dULL, 3793, 80, 75,
     1, {"6733765"}, 1, {{1174, 1181}}, 0},
    {"niah_single_2", 1024, 1, 300, 0, -1, 0xa4cb647b16a94f0eULL, 1785, 80, 75,
     1, {"4768557"}, 1, {{1607, 1614}}, 0},
    {"niah_single_3", 2048, 2, 250, 0, -1, 0x0c9f3da718bd07b2ULL, 1531, 79, 74,
     1, {"dece976b-fcd8-4722-905c-f7e5550ebecf"}, 1, {{545, 581}}, 0},
    {"niah_multikey_1", 1024, 0, 400, 0, -1, 0xd04d9b435ced75d0ULL, 2523, 80, 75,
     1, {"8794472"}, 1, {{1484, 1491}}, 0},
    {"niah_multikey_2", 1024, 4, 30, 0, -1, 0xc657fa79ee21b3daULL, 2091, 80, 75,
     1, {"1160355"}, 1, {{1702, 1709}}, 0},
    {"niah_multikey_3", 4096, 0, 9, 0, -1, 0x8778f4c04a3c6185ULL, 1267, 103, 98,
     1, {"d643fcca-2a67-4591-9b70-1810f6df0b2b"}, 1, {{203, 239}}, 0},
    {"niah_multivalue", 1024, 2, 350, 0, -1, 0x5dd1360b6d18c6b0ULL, 2254, 87, 78,
     4, {"1241776", "2227720", "5630024", "1659290"}, 4, {{192, 199}, {464, 471}, {1032, 1039}, {1176, 1183}}, 0},
    {"niah_multiquery", 2048, 1, 333, 0, -1, 0x4f003b0bf80005ccULL, 2161, 132, 123,
     4, {"5061657", "8426520", "5275810", "9118666"}, 4, {{858, 865}, {1310, 1317}, {1573, 1580}, {1802, 1809}}, 0},
    {"vt", 1024, 0, 20, 9, -1, 0x0779ebd7e46256ceULL, 3215, 81, 129,
     5, {"SGEWQ", "SAYLH", "BOKRJ", "LVBIB", "CIEDM"}, 5, {{1305, 1322}, {1683, 1705}, {1976, 1998}, {2449, 2471}, {2832, 2854}}, 0},
    {"vt", 4096, 3, 60, 12, -1, 0xa205b9c94442f327ULL, 7085, 81, 129,
     5, {"OGXLH", "AIZCB", "TNZUA", "YALJY", "NJTWA"}, 5, {{1575, 1592}, {2313, 2335}, {2786, 2808}, {3619, 3641}, {4362, 4384}}, 0},
    {"cwe", 1024, 0, 45, 0, -1, 0x5999b36c5bdfbe3dULL, 1897, 62, 65,
     10, {"blossom", "gold", "steady", "deliver", "wise", "release", "stream", "brother", "sauce", "fuel"}, 0, {}, 0},
    {"cwe", 4096, 1, 30, 0, -1, 0xcf98d63f413bdbecULL, 6515, 62, 65,
     10, {"pick", "potato", "ramp", "cake", "round", "contain", "trot", "load", "greasy", "contest"}, 0, {}, 0},
    {"fwe", 1024, 0, 300, 0, -1, 0xe45516362122fbb7ULL, 1548, 147, 89,
     3, {"ffdaqe", "hrzdyt", "jvqdde"}, 0, {}, 0},
    {"fwe", 4096, 2, 700, 0, -1, 0x48e0fd720b46feecULL, 3542, 147, 89,
     3, {"zaqovi", "wynfrh", "cvoqwa"}, 0, {}, 0},
    {"longeval_lines", 1024, 0, 25, 0, -1, 0x35e0d7670df35faaULL, 1552, 105, 56,
     1, {"54519"}, 1, {{610, 615}}, 0},
    {"niah_passkey_noise", 512, 0, 15, 0, 0, 0x922478efdd365815ULL, 1543, 80, 75,
     1, {"6832544"}, 1, {{184, 191}}, 0},
    {"niah_passkey_noise", 512, 0, 15, 0, 100, 0xa5b773295b1f5c94ULL, 1545, 82, 77,
     1, {"8613752"}, 1, {{1536, 1543}}, 0},
    {"niah_passkey_essay", 1024, 0, 200, 0, 50, 0xf8a23a103742ab0bULL, 1249, 80, 75,
     1, {"5460268"}, 1, {{620, 627}}, 0},
    {"niah_passkey_essay", 1024, 1, 200, 0, 100, 0x5bc4796eede30409ULL, 1252, 82, 77,
     1, {"3436462"}, 1, {{1242, 1249}}, 0},
    {"niah_classic", 2048, 0, 300, 0, 25, 0xb68ebc17d8355993ULL, 1736, 92, 7,
     1, {"The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."}, 1, {{327, 422}}, 0},
    {"niah_classic", 2048, 1, 300, 0, 0, 0xb87955f446691eaeULL, 1774, 92, 7,
     1, {"The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."}, 1, {{39, 134}}, 0},
    {"niah_multiquestion", 2048, 1, 333, 0, -1, 0xbe3e3fd9009ba7a2ULL, 2144, 78, 73,
     1, {"8517665"}, 1, {{1201, 1208}}, 0},
    {"niah_multiquestion", 2048, 1, 333, 0, -1, 0x97514d0652112efcULL, 2144, 77, 72,
     1, {"1572481"}, 1, {{182, 189}}, 1},
    {"niah_multiquestion", 2048, 1, 333, 0, -1, 0x8ba102e98ff3efd0ULL, 2144, 78, 73,
     1, {"9460336"}, 1, {{451, 458}}, 2},
    {"niah_multiquestion", 2048, 1, 333, 0, -1, 0xa67f2cdb137d6fdaULL, 2144, 78, 73,
     1, {"5219515"}, 1, {{912, 919}}, 3},
    {"longeval_multiquestion", 1024, 2, 25, 0, -1, 0xc8157847df25a53fULL, 1551, 107, 58,
     1, {"30852"}, 1, {{1310, 1315}}, 0},
    {"longeval_multiquestion", 1024, 2, 25, 0, -1, 0xbb75a37dcdf6a559ULL, 1551, 103, 54,
     1, {"82559"}, 1, {{1168, 1173}}, 1},
    {"longeval_multiquestion", 1024, 2, 25, 0, -1, 0x198c969786431533ULL, 1551, 103, 54,
     1, {"40176"}, 1, {{556, 561}}, 2},
    {"longeval_multiquestion", 1024, 2, 25, 0, -1, 0x0292dc144629abffULL, 1551, 108, 59,
     1, {"20630"}, 1, {{939, 944}}, 3},
};

TEST(eval_golden_prompts) {
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++) {
        const golden_case *g = &GOLDEN[i];
        pkv_eval_spec spec = {pkv_eval_task_find(g->task), g->length, g->sample, g->depth, 0, g->question};
        REQUIRE_MSG(spec.task, "unknown task %s", g->task);
        pkv_eval_item it;
        pkv_error err;
        REQUIRE_MSG(pkv_eval_build(&spec, g->units, g->aux, &it, &err) == 0, "%s: %s", g->task, err.msg);
        uint64_t h = pkv_fnv1a64(it.context, strlen(it.context));
        h = pkv_fnv1a64_more(h, it.question, strlen(it.question));
        h = pkv_fnv1a64_more(h, it.answer_prefix, strlen(it.answer_prefix));
        CHECK_MSG(h == g->hash, "%s sample %d: prompt hash %016llx, want %016llx", g->task, g->sample,
                  (unsigned long long)h, (unsigned long long)g->hash);
        CHECK_EQ_INT(strlen(it.context), g->context_len);
        CHECK_EQ_INT(strlen(it.question), g->question_len);
        CHECK_EQ_INT(strlen(it.answer_prefix), g->prefix_len);
        CHECK_EQ_INT(it.n_gold, g->n_gold);
        for (int k = 0; k < it.n_gold && k < g->n_gold; k++) CHECK_STR(it.gold[k], g->gold[k]);
        CHECK_EQ_INT(it.n_needles, g->n_spans);
        for (int k = 0; k < it.n_needles && k < g->n_spans; k++) {
            CHECK_EQ_INT(it.needles[k].begin, g->spans[k].begin);
            CHECK_EQ_INT(it.needles[k].end, g->spans[k].end);
        }
        pkv_eval_item_free(&it);
    }
}
