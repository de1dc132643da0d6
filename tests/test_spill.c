/*
 * The residual stream on disk (pkv_session_opts.residual_spill_dir,
 * engine/stream.h, base/spill.h): a prefill that keeps it in a spill file
 * computes the same bits as one that keeps it in memory, holds less memory,
 * leaves nothing behind, and turns a failing disk into a clear error.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "base/spill.h"
#include "press_fixtures.h"
#include "promptkv.h"
#include "test.h"

/* A directory for spill files in the working tree (a disk: /tmp may be tmpfs). */
static bool make_dir(char *dir) {
    strcpy(dir, "pkv-spill-test-XXXXXX");
    return mkdtemp(dir) != NULL;
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Chunks written and read back at their offsets, out of order, are what was
 * written; the file has no name in the directory, open or closed. */
TEST(spill_file_round_trip) {
    char dir[32];
    REQUIRE(make_dir(dir));
    pkv_error err;
    pkv_spill f = {0};
    REQUIRE_MSG(pkv_spill_check_dir(dir, &err) == 0, "%s", err.msg);
    REQUIRE_MSG(pkv_spill_open(&f, dir, &err) == 0, "%s", err.msg);
    enum { CHUNK = 4096, N = 5 }; /* chunks of four pages */
    static float data[N][CHUNK], back[CHUNK];
    for (int c = 0; c < N; c++)
        for (int i = 0; i < CHUNK; i++) data[c][i] = (float)(c * CHUNK + i) * 0.37f - 1000.0f;
    for (int c = 0; c < N; c++)
        CHECK_MSG(pkv_spill_write(&f, data[c], sizeof data[c], (int64_t)c * (int64_t)sizeof data[c], &err) == 0, "%s",
                  err.msg);
    CHECK_EQ_INT(entries(dir), 0);
    CHECK(f.bytes_written == sizeof data);
    /* every chunk but the last was dropped from the page cache once the next was written */
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = sizeof data / (size_t)page;
    void *map = mmap(NULL, sizeof data, PROT_READ, MAP_SHARED, f.fd, 0);
    unsigned char *resident = calloc(pages, 1);
    if (map != MAP_FAILED && resident && !mincore(map, sizeof data, resident)) {
        size_t held = 0, before_last = (size_t)(N - 1) * sizeof data[0] / (size_t)page;
        for (size_t p = 0; p < before_last; p++) held += resident[p] & 1;
        CHECK_MSG(held == 0, "%zu of the %zu pages before the last chunk are in the page cache", held, before_last);
    } else {
        test_fail(__FILE__, __LINE__, "cannot map the spill file to see what is cached");
    }
    if (map != MAP_FAILED) munmap(map, sizeof data);
    free(resident);
    for (int c = N - 1; c >= 0; c--) {
        CHECK(pkv_spill_read(&f, back, sizeof back, (int64_t)c * (int64_t)sizeof back, &err) == 0);
        CHECK_MSG(!memcmp(back, data[c], sizeof back), "chunk %d differs", c);
    }
    /* past the end: an error, not zeros */
    CHECK(pkv_spill_read(&f, back, sizeof back, (int64_t)N * (int64_t)sizeof back, &err) == -1 &&
          err.code == PKV_ERR_IO && strstr(err.msg, "past its end") && strstr(err.msg, dir));
    pkv_spill_close(&f);
    pkv_spill_close(&f); /* twice is harmless */
    CHECK_EQ_INT(entries(dir), 0);
    CHECK(rmdir(dir) == 0);
}

/* Directories a spill file cannot use are refused by name, and so is a session asking for one. */
TEST(spill_dir_refused) {
    pkv_error err;
    CHECK(pkv_spill_check_dir("no-such-dir-for-spill", &err) == -1 && err.code == PKV_ERR_IO &&
          strstr(err.msg, "no-such-dir-for-spill") && strstr(err.msg, "No such file"));
    CHECK(pkv_spill_check_dir("Makefile", &err) == -1 && err.code == PKV_ERR_ARG && strstr(err.msg, "not a directory"));
    CHECK(pkv_spill_check_dir("", &err) == -1 && err.code == PKV_ERR_ARG);
    struct statfs fs;
    if (!statfs("/dev/shm", &fs) && fs.f_type == TMPFS_MAGIC)
        CHECK(pkv_spill_check_dir("/dev/shm", &err) == -1 && strstr(err.msg, "held in memory (tmpfs)"));
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-llama-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.residual_spill_dir = "no-such-dir-for-spill";
    CHECK(!pkv_session_new(m, &so, &err) && strstr(err.msg, "spill directory no-such-dir-for-spill"));
    pkv_model_free(m);
}

typedef struct {
    float *rows; /* [n][n_vocab] */
    int n_vocab;
} all_rows;

static void keep_row(void *user, int index, const float *logits) {
    all_rows *a = user;
    memcpy(a->rows + (size_t)index * a->n_vocab, logits, (size_t)a->n_vocab * sizeof(float));
}

/* Every row's logits of n tokens read in chunks of 7, then the logits of
 * `steps` decode steps after a SnapKV prefill of the same tokens, into out
 * ([n + steps][n_vocab]); the session's peak memory into *peak. */
static bool run_both(pkv_model *m, pkv_residual_type type, const char *spill, const int32_t *toks, int n, int steps,
                     float *out, uint64_t *peak) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 2;
    so.n_batch = 7;
    so.n_ctx = 512;
    so.residual_type = type;
    so.residual_spill_dir = spill;
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    all_rows a = {out, pkv_n_vocab(m)};
    bool ok = pkv_eval(s, toks, n, keep_row, &a, &err) == 0;
    *peak = pkv_session_peak_mem_bytes(s);
    pkv_session_reset(s);
    const char *opts[] = {"budget", "40", "window", "8", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    ok = ok && pkv_prefill(s, toks, n, cfg, NULL, &err) == 0;
    for (int i = 0; i < steps && ok; i++) {
        ok = pkv_decode(s, toks[i], &err) == 0;
        if (ok) memcpy(out + (size_t)(n + i) * a.n_vocab, pkv_logits(s), (size_t)a.n_vocab * sizeof(float));
    }
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    pkv_press_cfg_free(cfg);
    pkv_session_free(s);
    return ok;
}

/* On every architecture's tiny model (Gemma 3's sliding-window layers, Phi-3's
 * fused projections, Qwen's biases and QK-norm), a stream spilled to disk in
 * f32 gives the same bits as the stream in memory, every prompt row and every
 * decode step after a press; packed f16 rows spilled give the bits of f16 rows
 * in memory. The session's peak memory drops by at least the stream's f32
 * rows beyond one chunk. */
TEST(model_residual_spill_same_bits) {
    static const char *const MODELS[] = {FIXTURE("models/tiny-llama-f32.gguf"), FIXTURE("models/tiny-qwen2-f32.gguf"),
                                         FIXTURE("models/tiny-gemma3-f32.gguf"), FIXTURE("models/tiny-qwen3-f32.gguf"),
                                         FIXTURE("models/tiny-phi3-f32.gguf")};
    char dir[32];
    REQUIRE(make_dir(dir));
    enum { N = 150, STEPS = 4 };
    int32_t toks[N];
    for (size_t mi = 0; mi < sizeof MODELS / sizeof *MODELS; mi++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(MODELS[mi], NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        int nv = pkv_n_vocab(m);
        test_lcg_tokens(toks, N, nv, 7 + (uint32_t)mi);
        size_t floats = (size_t)(N + STEPS) * nv;
        float *mem = malloc(floats * sizeof(float)), *disk = malloc(floats * sizeof(float));
        REQUIRE(mem && disk);
        const pkv_residual_type types[] = {PKV_RESIDUAL_F32, PKV_RESIDUAL_F16};
        for (int ti = 0; ti < 2; ti++) {
            uint64_t peak_mem = 0, peak_disk = 0;
            if (!run_both(m, types[ti], NULL, toks, N, STEPS, mem, &peak_mem) ||
                !run_both(m, types[ti], dir, toks, N, STEPS, disk, &peak_disk))
                continue;
            size_t first = floats;
            for (size_t i = 0; i < floats && first == floats; i++)
                if (memcmp(&mem[i], &disk[i], sizeof(float))) first = i;
            CHECK_MSG(first == floats, "%s, %s rows: spilled differs at row %zu (%.9g vs %.9g)", MODELS[mi],
                      pkv_residual_type_name(types[ti]), first / (size_t)nv, mem[first], disk[first]);
            if (types[ti] == PKV_RESIDUAL_F32) {
                pkv_model_info info;
                pkv_model_get_info(m, &info);
                uint64_t stream = (uint64_t)(N - 16) * (uint64_t)info.n_embd * sizeof(float);
                CHECK_MSG(peak_mem >= peak_disk + stream, "%s: peak %llu in memory, %llu spilled: less than %llu apart",
                          MODELS[mi], (unsigned long long)peak_mem, (unsigned long long)peak_disk,
                          (unsigned long long)stream);
            }
            CHECK_EQ_INT(entries(dir), 0);
        }
        free(mem);
        free(disk);
        pkv_model_free(m);
    }
    CHECK(rmdir(dir) == 0);
}

/* A disk that refuses a write (here a file size limit, as a full disk would)
 * stops the prefill with an error naming the spill file; after a reset the
 * session reads the prompt again once the disk takes it, and nothing is left. */
TEST(model_residual_spill_write_fails) {
    char dir[32];
    REQUIRE(make_dir(dir));
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-llama-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_batch = 16;
    so.n_ctx = 512;
    so.residual_spill_dir = dir;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    int32_t toks[100];
    test_lcg_tokens(toks, 100, pkv_n_vocab(m), 3);
    struct rlimit old, small = {4096, 4096};
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small.rlim_max = old.rlim_max;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    int rc = pkv_prefill(s, toks, 100, NULL, NULL, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK_MSG(rc == -1 && err.code == PKV_ERR_IO && strstr(err.msg, "spill file in") && strstr(err.msg, dir) &&
                  strstr(err.msg, "File too large"),
              "%s", err.msg);
    pkv_session_reset(s);
    CHECK_MSG(pkv_prefill(s, toks, 100, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(pkv_decode(s, 5, &err) == 0);
    pkv_session_free(s);
    pkv_model_free(m);
    CHECK_EQ_INT(entries(dir), 0);
    CHECK(rmdir(dir) == 0);
}
