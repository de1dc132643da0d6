/* Memory read bandwidth: the denominator of the decode roofline. A decode step
 * reads every weight and the whole cache once, so bytes / bandwidth bounds
 * its time from below (docs/engine.md §6.4: decode saturates memory
 * bandwidth at a few threads). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/threads.h"
#include "bench/bench.h"

typedef struct {
    const uint64_t *buf;
    int64_t n_words;
    uint64_t sink[256]; /* per thread, so the reads cannot be optimised away */
} read_job;

/* Eight independent sums: enough loads in flight to saturate DRAM from one
 * core without SIMD. */
static void read_slice(void *arg, int ith, int nth) {
    read_job *j = arg;
    int64_t b, e;
    pkv_split(j->n_words, ith, nth, 8, &b, &e);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    const uint64_t *p = j->buf;
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
        s4 += p[i + 4];
        s5 += p[i + 5];
        s6 += p[i + 6];
        s7 += p[i + 7];
    }
    for (; i < e; i++) s0 += p[i];
    j->sink[ith % 256] += s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
}

/* A buffer of distinct values, every page resident, and the threads that read it. */
typedef struct {
    pkv_pool *pool;
    read_job *job;
    uint64_t *buf;
} reader;

static void reader_free(reader *r) {
    free(r->job);
    free(r->buf);
    pkv_pool_free(r->pool);
    memset(r, 0, sizeof *r);
}

/* What a reading needs, checked where a caller hands it in. */
static int check_args(const char *who, uint64_t buf_bytes, int passes, pkv_error *err) {
    if (buf_bytes < 4096 || passes < 1) return pkv_fail(err, PKV_ERR_ARG, "%s: buffer >= 4 KiB and passes >= 1", who);
    return 0;
}

static int reader_init(reader *r, uint64_t buf_bytes, int n_threads, pkv_error *err) {
    memset(r, 0, sizeof *r);
    int64_t n_words = (int64_t)(buf_bytes / sizeof(uint64_t));
    r->buf = malloc((size_t)n_words * sizeof *r->buf);
    if (!r->buf) return pkv_fail(err, PKV_ERR_NOMEM, "membw: out of memory for a %llu-byte buffer",
                                 (unsigned long long)buf_bytes);
    r->pool = pkv_pool_new(n_threads);
    r->job = calloc(1, sizeof *r->job);
    if (!r->pool || !r->job) {
        reader_free(r);
        return pkv_fail(err, PKV_ERR_NOMEM, "membw: out of memory for %d threads", n_threads);
    }
    /* distinct values, written once so every page is resident before timing */
    for (int64_t i = 0; i < n_words; i++) r->buf[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    r->job->buf = r->buf;
    r->job->n_words = n_words;
    return 0;
}

/* One untimed pass (threads awake, TLBs warm), then the best of `passes`. */
static double reader_measure(reader *r, int passes) {
    pkv_pool_run(r->pool, read_slice, r->job);
    double best = 0.0;
    for (int p = 0; p < passes; p++) {
        double t0 = pkv_now_seconds();
        pkv_pool_run(r->pool, read_slice, r->job);
        double dt = pkv_now_seconds() - t0;
        double bw = dt > 0.0 ? (double)r->job->n_words * sizeof(uint64_t) / dt : 0.0;
        if (bw > best) best = bw;
    }
    return best;
}

int pkv_bench_membw(uint64_t buf_bytes, int n_threads, int passes, double *bytes_per_s, pkv_error *err) {
    *bytes_per_s = 0.0;
    if (check_args("membw", buf_bytes, passes, err)) return -1;
    reader r;
    if (reader_init(&r, buf_bytes, n_threads, err)) return -1;
    *bytes_per_s = reader_measure(&r, passes);
    reader_free(&r);
    return 0;
}

/* ---------------------------------------------------------------- the probe
 *
 * Parent and child share a socket pair: the child answers each byte it
 * receives with one double (0 when it could not set up its buffer) and exits
 * when the parent's end closes. MSG_NOSIGNAL: a child that died makes a
 * reading fail, not the benchmark. */

struct pkv_membw_probe {
    pid_t pid;
    int fd; /* the parent's end */
};

static bool send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool recv_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

static _Noreturn void probe_child(int fd, uint64_t buf_bytes, int n_threads, int passes) {
    reader r;
    pkv_error err;
    bool ok = reader_init(&r, buf_bytes, n_threads, &err) == 0;
    char c;
    while (recv_all(fd, &c, 1)) {
        double bw = ok ? reader_measure(&r, passes) : 0.0;
        if (!send_all(fd, &bw, sizeof bw)) break;
    }
    _exit(0);
}

pkv_membw_probe *pkv_membw_probe_start(uint64_t buf_bytes, int n_threads, int passes, pkv_error *err) {
    if (check_args("membw probe", buf_bytes, passes, err)) return NULL;
    pkv_membw_probe *p = calloc(1, sizeof *p);
    int sv[2];
    if (!p || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        pkv_fail(err, p ? PKV_ERR_IO : PKV_ERR_NOMEM, "membw probe: %s", p ? strerror(errno) : "out of memory");
        free(p);
        return NULL;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        probe_child(sv[1], buf_bytes, n_threads, passes);
    }
    close(sv[1]);
    if (pid < 0) {
        pkv_fail(err, PKV_ERR_IO, "membw probe: fork: %s", strerror(errno));
        close(sv[0]);
        free(p);
        return NULL;
    }
    p->pid = pid;
    p->fd = sv[0];
    return p;
}

int pkv_membw_probe_read(void *probe, double *bytes_per_s, pkv_error *err) {
    pkv_membw_probe *p = probe;
    *bytes_per_s = 0.0;
    const char c = 1;
    if (!send_all(p->fd, &c, 1) || !recv_all(p->fd, bytes_per_s, sizeof *bytes_per_s))
        return pkv_fail(err, PKV_ERR_IO, "membw probe: the reading process did not answer");
    if (!(*bytes_per_s > 0.0))
        return pkv_fail(err, PKV_ERR_NOMEM, "membw probe: the reading process could not set up its buffer");
    return 0;
}

void pkv_membw_probe_stop(pkv_membw_probe *p) {
    if (!p) return;
    close(p->fd); /* the child's recv ends: it exits */
    while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    free(p);
}
