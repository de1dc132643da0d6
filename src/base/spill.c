/* Spill files (spill.h). */
#include "base/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/error.h"

int pkv_spill_check_dir(const char *dir, pkv_error *err) {
    if (!dir || !*dir) return pkv_fail(err, PKV_ERR_ARG, "spill directory: empty name");
    struct stat st;
    if (stat(dir, &st)) return pkv_fail(err, PKV_ERR_IO, "spill directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return pkv_fail(err, PKV_ERR_ARG, "spill directory %s: not a directory", dir);
    if (access(dir, W_OK | X_OK)) return pkv_fail(err, PKV_ERR_IO, "spill directory %s: %s", dir, strerror(errno));
    struct statfs fs;
    if (statfs(dir, &fs)) return pkv_fail(err, PKV_ERR_IO, "spill directory %s: %s", dir, strerror(errno));
    if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
        return pkv_fail(err, PKV_ERR_ARG, "spill directory %s is held in memory (%s): spilling there saves nothing, "
                        "choose one on a disk", dir, fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
    return 0;
}

/* An unnamed file: O_TMPFILE where the file system has it, else a name
 * removed at once (the file lives while it is open). */
static int open_unnamed(const char *dir) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
    size_t n = strlen(dir) + sizeof "/promptkv-spill-XXXXXX";
    char *path = malloc(n);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(path, n, "%s/promptkv-spill-XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    free(path);
    return fd;
}

int pkv_spill_open(pkv_spill *f, const char *dir, pkv_error *err) {
    pkv_spill_close(f);
    memset(f, 0, sizeof *f);
    f->dir = dir;
    int fd = open_unnamed(dir);
    if (fd < 0) return pkv_fail(err, PKV_ERR_IO, "spill file in %s: %s", dir, strerror(errno));
    f->fd = fd;
    f->open = true;
    return 0;
}

/* The chunk written before this one is on its way to the disk (started when
 * it was written): wait for it and drop its pages, then start this one's. */
static void drop_behind(pkv_spill *f, int64_t off, int64_t len) {
    if (f->last_len) {
        sync_file_range(f->fd, f->last_off, f->last_len,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        posix_fadvise(f->fd, f->last_off, f->last_len, POSIX_FADV_DONTNEED);
    }
    sync_file_range(f->fd, off, len, SYNC_FILE_RANGE_WRITE);
    f->last_off = off;
    f->last_len = len;
}

/* All len bytes at off, read or written: pread and pwrite may move fewer. */
static int transfer(pkv_spill *f, bool write, void *buf, size_t len, int64_t off, pkv_error *err) {
    char *p = buf;
    for (size_t done = 0; done < len;) {
        ssize_t r = write ? pwrite(f->fd, p + done, len - done, off + (int64_t)done)
                          : pread(f->fd, p + done, len - done, off + (int64_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return pkv_fail(err, PKV_ERR_IO, "spill file in %s: %s %zu bytes at offset %lld: %s", f->dir,
                            write ? "writing" : "reading", len, (long long)off,
                            r < 0 ? strerror(errno) : write ? "nothing written" : "past its end");
        done += (size_t)r;
    }
    return 0;
}

int pkv_spill_write(pkv_spill *f, const void *buf, size_t len, int64_t off, pkv_error *err) {
    if (transfer(f, true, (void *)buf, len, off, err)) return -1;
    f->bytes_written += len;
    drop_behind(f, off, (int64_t)len);
    return 0;
}

int pkv_spill_read(pkv_spill *f, void *buf, size_t len, int64_t off, pkv_error *err) {
    if (transfer(f, false, buf, len, off, err)) return -1;
    /* reading goes in order: the next chunk is asked for now, read while this one is computed */
    posix_fadvise(f->fd, off + (int64_t)len, (int64_t)len, POSIX_FADV_WILLNEED);
    return 0;
}

void pkv_spill_close(pkv_spill *f) {
    if (f->open) close(f->fd);
    f->open = false;
    f->last_off = f->last_len = 0;
}
