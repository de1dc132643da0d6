/* promptkv bench: speed and memory, measured like llama-bench (src/bench/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench/bench.h"
#include "commands.h"
#include "flags.h"
#include "press_args.h"

static const char BENCH_USAGE[] =
    "usage: promptkv bench -m MODEL [-p LIST] [-n N] [--depths LIST] [options]\n"
    "       promptkv bench --membw-only [-t N]\n"
    "\n"
    "Measures like llama-bench (random token ids, logits of the last prompt token only, a warmup\n"
    "run, repetitions; t/s is the median, with stddev and min):\n"
    "  -m, --model F        the model\n"
    "  -p LIST              prefill tests: prompt lengths, e.g. 512,4096 (default 512; 0: none)\n"
    "  -n N                 decode test: N steps from an empty cache (default 128; 0: none)\n"
    "      --depths LIST    decode ms/token after a prompt of each length, e.g. 1024,4096,16384\n"
    "      --depth-gen N    decode steps timed at each depth (default 32)\n"
    "      --streams LIST   concurrent streams, e.g. 1,2,4,8: each its own prompt of --stream-depth\n"
    "                       tokens (pressed by each press), then --depth-gen steps of all, batched\n"
    "                       (one step for all: pkv_batch_decode) and one by one; t/s of all streams\n"
    "      --stream-depth N prompt of each stream (default 512)\n"
    "      --paired         with --streams: each count N > 1 batched against one stream batched, the\n"
    "                       two timed in turns within every repetition, with the ratio of their t/s\n"
    "                       repetition by repetition (instead of the batched and one-by-one runs)\n"
    "      --presses LIST   presses compared at each depth (and in prefill tests), comma-separated\n"
    "                       NAME[:KEY=VALUE...], e.g. none,snapkv:budget=1024,streamingllm:budget=1024\n"
    "                       (default none; a --press below is added to the list)\n"
    "      --separate-prefill  one prefill per press with the press inside it (peak RSS per press);\n"
    "                       default: one prefill per depth, each press compresses a copy of its cache\n"
    "  -r N                 repetitions (default 5)\n"
    "      --no-warmup      skip the warmup run\n"
    "  -t N                 threads (default: all CPUs)\n"
    "  -b N                 prefill chunk in tokens (default 512)\n"
    "      --cache-type T   how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0\n"
    "                       (q8_0/q4_0: ggml blocks of 32, for head sizes divisible by 32)\n"
    "      --cache-type-k T, --cache-type-v T\n"
    "                       the same for keys or for values alone (-ctk, -ctv)\n"
    "      --residual-type T  how prefills keep their residual stream between layers: f32 (default),\n"
    "                       f16 or q8_0 (half or a quarter of a long prefill's activations)\n"
    "      --residual-spill DIR  keep a long prefill's residual stream in a file in DIR between layers\n"
    "                       (on disk, not tmpfs; the same bits; read and written once a layer)\n"
    "      --seed S         seed of the random tokens\n"
    "      --simd S         auto (default), scalar, avx2, avx512\n"
    "      --gguf-layout    keep the weights in the file's row layout, not interleaved for decode\n"
    "  -o md|csv            output format (default md)\n"
    "      --svg FILE       plot decode ms/token against prompt length (with --depths)\n"
    "      --no-membw       do not measure memory bandwidth (then no bandwidth-bound fraction); else it is\n"
    "                       read once at the start and again beside every decode repetition, and each\n"
    "                       repetition's fraction uses the readings just before and after it\n"
    "      --membw-size S   bandwidth buffer (default 1G; keep it far above the last-level cache)\n"
    "      --membw-only     only measure memory read bandwidth with 1..N threads\n"
    "      --mem CAP        the longest prompt whose KV cache + activations fit in CAP (e.g. 8G),\n"
    "                       for each press: peak RSS of real prefills at the probe lengths, a linear\n"
    "                       fit, solved for CAP\n"
    "      --mem-probe LIST probe lengths for --mem (default 2048,4096; make them exceed the budget)\n";

enum { MAX_LIST = 32 };

typedef struct {
    int v[MAX_LIST];
    int n;
} int_list;

static bool parse_list(const char *cmd, const char *flag, const char *s, long lo, long hi, int_list *out) {
    out->n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (out->n == MAX_LIST) {
            cli_error(cmd, "%s: at most %d values", flag, MAX_LIST);
            return false;
        }
        if (!cli_int(cmd, flag, tok, lo, hi, &v)) return false;
        out->v[out->n++] = (int)v;
    }
    if (out->n == 0) {
        cli_error(cmd, "%s expects a comma-separated list of numbers", flag);
        return false;
    }
    return true;
}

/* "snapkv:budget=1024:window=32" -> a configured press; NULL (error printed) on a bad one. */
static pkv_press_cfg *parse_press_entry(const char *cmd, const char *entry) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", entry);
    char *save = NULL, *name = strtok_r(buf, ":", &save);
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new(name ? name : "", &err);
    if (!cfg) {
        cli_error(cmd, "--presses: %s", err.msg);
        return NULL;
    }
    for (char *kv = strtok_r(NULL, ":", &save); kv; kv = strtok_r(NULL, ":", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            cli_error(cmd, "--presses: '%s' in '%s' is not KEY=VALUE", kv, entry);
            pkv_press_cfg_free(cfg);
            return NULL;
        }
        *eq = '\0';
        for (char *p = kv; *p; p++)
            if (*p == '-') *p = '_';
        if (pkv_press_cfg_set(cfg, kv, eq + 1, &err)) {
            cli_error(cmd, "--presses: %s", err.msg);
            pkv_press_cfg_free(cfg);
            return NULL;
        }
    }
    if (pkv_press_cfg_check(cfg, &err)) {
        cli_error(cmd, "--presses: '%s': %s", entry, err.msg);
        pkv_press_cfg_free(cfg);
        return NULL;
    }
    return cfg;
}

static void show_progress(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "bench: %s\n", line);
}

/* Each result on stderr as it completes: a long run that is stopped keeps them. */
static void show_result(void *user, const pkv_bench_result *r) {
    (void)user;
    fprintf(stderr, "bench: result: %s | %s | %.3f t/s median (min %.3f) | %.2f ms/token | prefill %.2f s | press %.3f s "
                    "| cache %llu B (full %llu) | peak RSS %llu B | BW frac %.3f\n",
            r->test, r->press, r->tok_per_s.median, r->tok_per_s.min, r->ms_per_token.median, r->prefill_seconds,
            r->press_seconds, (unsigned long long)r->cache_bytes, (unsigned long long)r->cache_bytes_full,
            (unsigned long long)r->peak_rss, r->bw_fraction);
}

static double load_average(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

typedef struct {
    cli_engine_args engine;
    int_list prompts, depths, probes, streams;
    int n_gen, depth_gen, stream_depth;
    bool shared_prefill, csv, membw, membw_only, paired;
    uint64_t membw_size, mem_cap;
    const char *svg_path, *csv_path, *presses;
    press_args pa;
    pkv_bench_opts o;
} bench_args;

static const cli_flag BENCH_FLAGS[] = {
    {"--no-warmup", NULL, CLI_FALSE, offsetof(bench_args, o.warmup), 0, 0, NULL},
    {"--separate-prefill", NULL, CLI_FALSE, offsetof(bench_args, shared_prefill), 0, 0, NULL},
    {"--no-membw", NULL, CLI_FALSE, offsetof(bench_args, membw), 0, 0, NULL},
    {"--membw-only", NULL, CLI_TRUE, offsetof(bench_args, membw_only), 0, 0, NULL},
    {"--paired", NULL, CLI_TRUE, offsetof(bench_args, paired), 0, 0, NULL},
    {"-n", NULL, CLI_INT, offsetof(bench_args, n_gen), 0, 1 << 20, NULL},
    {"--depth-gen", NULL, CLI_INT, offsetof(bench_args, depth_gen), 1, 1 << 20, NULL},
    {"--stream-depth", NULL, CLI_INT, offsetof(bench_args, stream_depth), 1, 1 << 24, NULL},
    {"--presses", NULL, CLI_TEXT, offsetof(bench_args, presses), 0, 0, NULL},
    {"-r", NULL, CLI_INT, offsetof(bench_args, o.reps), 1, 1000, NULL},
    {"--seed", NULL, CLI_U64, offsetof(bench_args, o.seed), 0, 0, NULL},
    {"--svg", NULL, CLI_TEXT, offsetof(bench_args, svg_path), 0, 0, NULL},
    {"--csv", NULL, CLI_TEXT, offsetof(bench_args, csv_path), 0, 0, NULL},
    {"--membw-size", NULL, CLI_SIZE, offsetof(bench_args, membw_size), 0, 0, NULL},
    {"--mem", NULL, CLI_SIZE, offsetof(bench_args, mem_cap), 0, 0, NULL},
    {"--residual-type", NULL, CLI_RESIDUAL_TYPE, offsetof(bench_args, o.residual_type), 0, 0, NULL},
    {"--residual-spill", NULL, CLI_TEXT, offsetof(bench_args, o.residual_spill_dir), 0, 0, NULL},
    {NULL, NULL, 0, 0, 0, 0, NULL},
};

/* The flags that take lists, and -o. */
static int parse_list_flag(void *args, int argc, char **argv, int *i) {
    bench_args *a = args;
    const char *cmd = "bench", *f = argv[*i], *v;
    bool known = !strcmp(f, "-p") || !strcmp(f, "--depths") || !strcmp(f, "--mem-probe") || !strcmp(f, "-o") ||
                 !strcmp(f, "--streams");
    if (!known) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(f, "-p")) {
        if (!strcmp(v, "0")) a->prompts.n = 0;
        else if (!parse_list(cmd, f, v, 1, 1 << 24, &a->prompts)) return -1;
    } else if (!strcmp(f, "--depths")) {
        if (!parse_list(cmd, f, v, 1, 1 << 24, &a->depths)) return -1;
    } else if (!strcmp(f, "--streams")) {
        if (!parse_list(cmd, f, v, 1, PKV_BENCH_MAX_STREAMS, &a->streams)) return -1;
    } else if (!strcmp(f, "--mem-probe")) {
        if (!parse_list(cmd, f, v, 1, 1 << 24, &a->probes)) return -1;
        if (a->probes.n > PKV_BENCH_MAX_PROBES) {
            cli_error(cmd, "--mem-probe: at most %d lengths", PKV_BENCH_MAX_PROBES);
            return -1;
        }
    } else if (!strcmp(v, "csv")) {
        a->csv = true;
    } else if (strcmp(v, "md")) {
        cli_error(cmd, "-o must be md or csv, got '%s'", v);
        return -1;
    }
    return 1;
}

static int parse_args(bench_args *a, int argc, char **argv) {
    const char *cmd = "bench";
    a->engine.n_threads = a->o.n_threads;
    a->engine.n_batch = a->o.n_batch;
    a->engine.cache = (cli_cache_types){a->o.cache_type_k, a->o.cache_type_v};
    int rc = cli_parse_command(cmd, BENCH_USAGE, false, &a->pa, &a->engine, BENCH_FLAGS, a, parse_list_flag, true, argc,
                               argv);
    if (rc) return rc;
    a->o.n_threads = a->engine.n_threads;
    a->o.n_batch = a->engine.n_batch;
    a->o.cache_type_k = a->engine.cache.k;
    a->o.cache_type_v = a->engine.cache.v;
    if (a->paired) {
        if (a->streams.n == 0) {
            cli_error(cmd, "--paired needs --streams");
            return -1;
        }
        for (int i = 0; i < a->streams.n; i++)
            if (a->streams.v[i] < 2) {
                cli_error(cmd, "--paired: stream counts must be >= 2 (each is paired with one stream), got %d",
                          a->streams.v[i]);
                return -1;
            }
    }
    return 0;
}

/* The presses to compare: --presses entries (default "none"), then --press. */
static int build_presses(const bench_args *a, pkv_press_cfg **list, int *n) {
    const char *cmd = "bench";
    *n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", a->presses ? a->presses : "none");
    for (char *save = NULL, *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) {
            cli_error(cmd, "--presses: at most %d presses", MAX_LIST);
            return -1;
        }
        if (!(list[*n] = parse_press_entry(cmd, e))) return -1;
        (*n)++;
    }
    if (a->pa.press || a->pa.n_opts) {
        if (*n == MAX_LIST) {
            cli_error(cmd, "--presses: at most %d presses", MAX_LIST);
            return -1;
        }
        if (!(list[*n] = press_args_build(&a->pa, cmd))) return -1;
        (*n)++;
    }
    return 0;
}

static double mib(uint64_t b) { return b / 1048576.0; }

static int run_membw(const bench_args *a, bool print, double *bw_at_threads) {
    int max_t = pkv_bench_n_threads(&a->o);
    if (print) printf("memory read bandwidth (%.0f MiB buffer, best of 5 passes):", mib(a->membw_size));
    for (int t = 1; t <= max_t; t++) {
        double bw;
        pkv_error err;
        if (pkv_bench_membw(a->membw_size, t, 5, &bw, &err)) {
            if (print) printf("\n"); /* the line begun above ends before the error's own line */
            fflush(stdout);
            cli_error("bench", "%s", err.msg);
            return -1;
        }
        if (print) printf(" %d thread%s %.2f GB/s;", t, t > 1 ? "s" : "", bw / 1e9);
        if (t == max_t) *bw_at_threads = bw;
    }
    if (print) printf("\n");
    return 0;
}

static int run_mem(pkv_model *m, const bench_args *a, pkv_press_cfg *const *presses, int n_presses) {
    pkv_error err;
    int_list probes = a->probes;
    if (probes.n == 0) probes = (int_list){{2048, 4096}, 2};
    if (a->csv)
        printf("press,cap_bytes,probe_lengths,probe_peak_bytes,probe_cache_bytes,fixed_bytes,bytes_per_token,"
               "max_tokens\n");
    else
        printf("\nlongest prompt whose KV cache + activations fit in %.0f MiB (peak RSS above the weights, "
               "measured at %d probe lengths and fitted a + b*n):\n\n"
               "| press | probe peaks MiB | cache KiB/token | a MiB | b KiB/token | max prompt (tokens) | vs none |\n"
               "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
               mib(a->mem_cap), probes.n);
    int64_t none_max = 0;
    for (int p = 0; p < n_presses; p++) {
        pkv_bench_memfit fit;
        if (pkv_bench_mem_fit(m, &a->o, a->mem_cap, presses[p], probes.v, probes.n, &fit, &err)) {
            cli_error("bench", "%s", err.msg);
            return -1;
        }
        if (!strcmp(fit.press, "none")) none_max = fit.max_tokens;
        char peaks[256] = "";
        size_t off = 0;
        for (int i = 0; i < fit.n_probes && off < sizeof peaks; i++) {
            if (a->csv)
                off += (size_t)snprintf(peaks + off, sizeof peaks - off, "%s%llu", i ? ";" : "",
                                        (unsigned long long)fit.probe_peak[i]);
            else
                off += (size_t)snprintf(peaks + off, sizeof peaks - off, "%s%d: %.1f", i ? ", " : "",
                                        fit.probe_len[i], mib(fit.probe_peak[i]));
        }
        if (a->csv) {
            printf("\"%s\",%llu,", fit.press, (unsigned long long)fit.cap);
            for (int i = 0; i < fit.n_probes; i++) printf("%s%d", i ? ";" : "", fit.probe_len[i]);
            printf(",%s,", peaks);
            for (int i = 0; i < fit.n_probes; i++) printf("%s%llu", i ? ";" : "", (unsigned long long)fit.probe_cache[i]);
            printf(",%.0f,%.1f,%lld\n", fit.fixed_bytes, fit.bytes_per_token, (long long)fit.max_tokens);
        } else {
            char ratio[32] = "", cache[32] = "-";
            if (none_max > 0) snprintf(ratio, sizeof ratio, "%.2fx", (double)fit.max_tokens / none_max);
            int last = fit.n_probes - 1;
            if (last > 0 && fit.probe_len[last] != fit.probe_len[0])
                snprintf(cache, sizeof cache, "%.2f",
                         ((double)fit.probe_cache[last] - (double)fit.probe_cache[0]) /
                             (fit.probe_len[last] - fit.probe_len[0]) / 1024.0);
            printf("| %s | %s | %s | %.1f | %.2f | %lld | %s |\n", fit.press, peaks, cache,
                   fit.fixed_bytes / 1048576.0, fit.bytes_per_token / 1024.0, (long long)fit.max_tokens, ratio);
        }
        if (!fit.rss_reset) fprintf(stderr, "bench: peak RSS could not be reset; probes share one peak\n");
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    bench_args a;
    memset(&a, 0, sizeof a);
    pkv_bench_opts_default(&a.o);
    a.prompts = (int_list){{512}, 1};
    a.n_gen = 128;
    a.depth_gen = 32;
    a.stream_depth = 512;
    a.shared_prefill = true;
    a.membw = true;
    a.membw_size = 1ull << 30;
    int pr = parse_args(&a, argc, argv);
    if (pr) return pr > 0 ? 0 : EXIT_USAGE;
    a.o.progress = show_progress;
    a.o.on_result = show_result;
    double bw = 0;
    if (a.membw_only) return run_membw(&a, true, &bw) ? EXIT_RUNTIME : 0;
    if (!a.engine.model_path) {
        cli_error(cmd, "a model is required (-m MODEL)");
        return EXIT_USAGE;
    }
    pkv_press_cfg *presses[MAX_LIST] = {0};
    int n_presses = 0, rc = EXIT_USAGE;
    pkv_model *m = NULL;
    pkv_bench_result *res = NULL;
    pkv_membw_probe *probe = NULL;
    if (build_presses(&a, presses, &n_presses)) goto done;
    rc = EXIT_RUNTIME;
    bool decodes = a.n_gen > 0 || a.depths.n > 0;
    if (a.membw && decodes && !a.mem_cap) {
        /* before any thread exists: the probe forks */
        pkv_error perr;
        if (!(probe = pkv_membw_probe_start(a.membw_size, pkv_bench_n_threads(&a.o), 3, &perr))) {
            cli_error(cmd, "%s", perr.msg);
            goto done;
        }
        a.o.read_bw = pkv_membw_probe_read;
        a.o.read_bw_user = probe;
    }
    if (!(m = cli_load_model_chat(cmd, a.engine.model_path, a.engine.simd, NULL, a.engine.gguf_layout))) goto done;

    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    if (!a.csv)
        printf("model: %s (%s, %.1f M params, %.1f MiB of weights), simd %s, threads %d, load average %.2f\n",
               a.engine.model_path, mi.name[0] ? mi.name : mi.arch, mi.n_params / 1e6, mib(mi.weight_bytes),
               pkv_simd_name(pkv_simd_detect()), pkv_bench_n_threads(&a.o), load_average());
    if (a.mem_cap) {
        rc = run_mem(m, &a, presses, n_presses) ? EXIT_RUNTIME : 0;
        goto done;
    }
    if (a.membw && (a.n_gen > 0 || a.depths.n > 0 || a.streams.n > 0)) {
        if (run_membw(&a, !a.csv, &bw)) goto done;
        a.o.mem_bw = bw;
    }
    int n_res = a.prompts.n * n_presses + (a.n_gen > 0) + a.depths.n * n_presses + 2 * a.streams.n * n_presses, k = 0;
    res = calloc((size_t)(n_res ? n_res : 1), sizeof *res);
    if (!res) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    pkv_error err;
    for (int i = 0; i < a.prompts.n; i++)
        for (int p = 0; p < n_presses; p++)
            if (pkv_bench_prefill(m, &a.o, a.prompts.v[i], presses[p], &res[k++], &err)) goto fail;
    if (a.n_gen > 0 && pkv_bench_decode(m, &a.o, a.n_gen, &res[k++], &err)) goto fail;
    if (a.depths.n > 0) {
        if (pkv_bench_depths(m, &a.o, a.depths.v, a.depths.n, a.depth_gen, (const pkv_press_cfg *const *)presses,
                             n_presses, a.shared_prefill, &res[k], &err))
            goto fail;
        k += a.depths.n * n_presses;
    }
    for (int p = 0; p < n_presses; p++)
        for (int i = 0; i < a.streams.n; i++) {
            if (a.paired) {
                if (pkv_bench_streams_paired(m, &a.o, a.streams.v[i], a.stream_depth, a.depth_gen, presses[p],
                                             &res[k], &err))
                    goto fail;
                k += 2;
                continue;
            }
            for (int batched = 1; batched >= 0; batched--)
                if (pkv_bench_streams(m, &a.o, a.streams.v[i], a.stream_depth, a.depth_gen, presses[p], batched,
                                      &res[k++], &err))
                    goto fail;
        }
    if (a.csv) pkv_bench_print_csv(stdout, res, k);
    else {
        printf("\n");
        pkv_bench_print_table(stdout, res, k);
    }
    if (a.csv_path) {
        FILE *f = fopen(a.csv_path, "w");
        if (!f) {
            cli_error(cmd, "cannot create %s", a.csv_path);
            goto done;
        }
        pkv_bench_print_csv(f, res, k);
        if (fclose(f) != 0) {
            cli_error(cmd, "cannot write %s", a.csv_path);
            goto done;
        }
    }
    if (a.svg_path) {
        FILE *f = fopen(a.svg_path, "w");
        if (!f) {
            cli_error(cmd, "cannot create %s", a.svg_path);
            goto done;
        }
        char title[300];
        snprintf(title, sizeof title, "%s: decode latency vs prompt length, %d threads",
                 mi.name[0] ? mi.name : a.engine.model_path, res[0].n_threads);
        pkv_bench_write_svg(f, res, k, title);
        if (fclose(f) != 0) {
            cli_error(cmd, "cannot write %s", a.svg_path);
            goto done;
        }
    }
    rc = 0;
    goto done;
fail:
    cli_error(cmd, "%s", err.msg);
done:
    free(res);
    for (int p = 0; p < n_presses; p++) pkv_press_cfg_free(presses[p]);
    pkv_model_free(m);
    pkv_membw_probe_stop(probe);
    return rc;
}
