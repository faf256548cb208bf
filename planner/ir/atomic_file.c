/* Atomic outputs: write a temporary beside the target, then rename it into place.
 *
 * In: a path to write.  Out: the file (or directory) under that path, whole, or the
 * previous one untouched and no temporary left.  Invariants: the temporary lives in
 * the target's own folder (rename never crosses file systems), is named
 * ".<base>.XXXXXX" (hidden, unique per writer, so concurrent writers never share one),
 * and is removed on every failure path; data reaches the disk (fsync) before the
 * rename makes it visible.  atomic_file.h says what each call promises. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/atomic_file.h"

static mode_t current_umask(void) {
    mode_t m = umask(022);
    umask(m);
    return m;
}

/* Splits path into its folder ("." when it has none) and its last component. */
static int split_path(const char *path, char *dir, size_t dsize, char *base, size_t bsize) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return -1;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0; /* "out/" is "out" */
    char *slash = strrchr(p, '/');
    const char *b = slash ? slash + 1 : p;
    if (!*b || !strcmp(b, ".") || !strcmp(b, "..")) return -1;
    if (snprintf(base, bsize, "%s", b) >= (int)bsize) return -1;
    if (!slash) return snprintf(dir, dsize, ".") >= (int)dsize ? -1 : 0;
    if (slash == p) return snprintf(dir, dsize, "/") >= (int)dsize ? -1 : 0;
    *slash = 0;
    return snprintf(dir, dsize, "%s", p) >= (int)dsize ? -1 : 0;
}

/* "<dir>/.<base>.XXXXXX" for mkstemp/mkdtemp. */
static int temp_template(const char *path, char *tmp, size_t size) {
    char dir[4096], base[NAME_MAX + 1];
    if (split_path(path, dir, sizeof dir, base, sizeof base)) return -1;
    return snprintf(tmp, size, "%s/.%s.XXXXXX", dir, base) >= (int)size ? -1 : 0;
}

/* The folder holding a file, opened and fsynced so a rename in it is durable; errors
 * are ignored (the rename itself has already succeeded). */
static void sync_folder(const char *file) {
    char dir[4096], base[NAME_MAX + 1];
    if (split_path(file, dir, sizeof dir, base, sizeof base)) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

vp_status vp_atomic_file_open(vp_atomic_file *af, const char *path, vp_error *err) {
    memset(af, 0, sizeof *af);
    if (snprintf(af->path, sizeof af->path, "%s", path) >= (int)sizeof af->path)
        return vp_fail(err, VP_ERR_USAGE, "%s: path too long", path);
    snprintf(af->real, sizeof af->real, "%s", path);
    struct stat st;
    int exists = lstat(path, &st) == 0;
    if (exists && S_ISLNK(st.st_mode)) { /* replace what the link points at, keep the link */
        char *r = realpath(path, NULL);
        if (r && strlen(r) < sizeof af->real) snprintf(af->real, sizeof af->real, "%s", r);
        free(r);
        exists = stat(af->real, &st) == 0;
    }
    if (exists && !S_ISREG(st.st_mode)) { /* a device or a pipe: no rename, write in place */
        af->f = fopen(path, "w");
        if (!af->f) return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        return VP_OK;
    }
    if (temp_template(af->real, af->tmp, sizeof af->tmp))
        return vp_fail(err, VP_ERR_USAGE, "%s: not a file name (or too long)", path);
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        int e = errno;
        af->tmp[0] = 0;
        return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    /* mkstemp makes 0600; fopen gives 0666 & ~umask, or keeps an existing file's mode */
    mode_t mode = exists ? (st.st_mode & 07777) : (0666 & ~current_umask());
    if (fchmod(fd, mode) || !(af->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        af->tmp[0] = 0;
        return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return VP_OK;
}

vp_status vp_atomic_file_commit(vp_atomic_file *af, vp_error *err) {
    int e = errno; /* what the last failed write left, should the stream's error flag be set */
    FILE *f = af->f;
    af->f = NULL;
    if (!f) return vp_fail(err, VP_ERR_INVALID, "%s: not open for writing", af->path);
    const char *what = NULL;
    if (ferror(f)) what = "write failed", e = e ? e : EIO;
    else if (fflush(f)) what = "write failed", e = errno;
    else if (af->tmp[0] && fsync(fileno(f))) what = "write failed", e = errno;
    if (what) fclose(f);
    else if (fclose(f)) what = "write failed", e = errno;
    if (!what && af->tmp[0] && rename(af->tmp, af->real)) what = "cannot rename into place", e = errno;
    if (what) {
        if (af->tmp[0]) unlink(af->tmp);
        af->tmp[0] = 0;
        return vp_fail(err, VP_ERR_IO, "%s: %s: %s", af->path, what, strerror(e));
    }
    if (af->tmp[0]) sync_folder(af->real);
    af->tmp[0] = 0;
    return VP_OK;
}

void vp_atomic_file_abort(vp_atomic_file *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp[0]) unlink(af->tmp);
    af->tmp[0] = 0;
}

/* ---- directories ---- */

/* Removes a directory of plain files (what our temporaries and their predecessors hold). */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4096 + NAME_MAX + 2];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* Whether every entry of old is a plain file that fresh also holds: then old is a
 * previous output of the same writer (or empty) and may be replaced whole. */
static int replaceable(const char *old, const char *fresh) {
    DIR *d = opendir(old);
    if (!d) return 0;
    int ok = 1;
    struct dirent *e;
    char p[4096 + NAME_MAX + 2];
    struct stat st;
    while (ok && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", old, e->d_name);
        ok = !lstat(p, &st) && S_ISREG(st.st_mode);
        snprintf(p, sizeof p, "%s/%s", fresh, e->d_name);
        ok = ok && !lstat(p, &st) && S_ISREG(st.st_mode);
    }
    closedir(d);
    return ok;
}

/* Whether the existing folder path may not be renamed: ".", "..", "/", the working
 * directory (renaming it would leave the shell that ran us in a removed folder). */
static int must_stay(const char *path) {
    char dir[4096], base[NAME_MAX + 1];
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) return 0;
    if (split_path(path, dir, sizeof dir, base, sizeof base)) return 1;
    struct stat cwd;
    return !stat(".", &cwd) && cwd.st_dev == st.st_dev && cwd.st_ino == st.st_ino;
}

vp_status vp_atomic_dir_open(vp_atomic_dir *ad, const char *path, vp_error *err) {
    memset(ad, 0, sizeof *ad);
    if (snprintf(ad->path, sizeof ad->path, "%s", path) >= (int)sizeof ad->path)
        return vp_fail(err, VP_ERR_USAGE, "%s: path too long", path);
    ad->inside = must_stay(path);
    int bad = ad->inside ? snprintf(ad->tmp, sizeof ad->tmp, "%s/.atomic.XXXXXX", path) >= (int)sizeof ad->tmp
                         : temp_template(path, ad->tmp, sizeof ad->tmp);
    if (bad) {
        ad->tmp[0] = 0;
        return vp_fail(err, VP_ERR_USAGE, "%s: not a directory name (or too long)", path);
    }
    if (!mkdtemp(ad->tmp)) {
        int e = errno;
        ad->tmp[0] = 0;
        return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    struct stat st; /* mkdtemp makes 0700; mkdir gives 0777 & ~umask, keep an existing folder's */
    mode_t mode = !stat(path, &st) && S_ISDIR(st.st_mode) ? (st.st_mode & 07777) : (0777 & ~current_umask());
    if (chmod(ad->tmp, mode)) {
        int e = errno;
        vp_atomic_dir_abort(ad);
        return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return VP_OK;
}

/* Replaces the directory path, which replaceable() accepted, by tmp. */
static int replace_dir(vp_atomic_dir *ad) {
#ifdef RENAME_EXCHANGE
    if (!renameat2(AT_FDCWD, ad->tmp, AT_FDCWD, ad->path, RENAME_EXCHANGE)) {
        remove_flat_dir(ad->tmp); /* now the old directory */
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
    char aside[4096];
    if (temp_template(ad->path, aside, sizeof aside) || !mkdtemp(aside)) return -1;
    if (rename(ad->path, aside)) { /* onto the empty aside directory */
        int e = errno;
        rmdir(aside);
        errno = e;
        return -1;
    }
    if (rename(ad->tmp, ad->path)) {
        int e = errno;
        rename(aside, ad->path); /* put the old one back */
        errno = e;
        return -1;
    }
    remove_flat_dir(aside);
    return 0;
}

/* Moves each file of tmp into the existing directory path, each one replaced whole. */
static int move_files(vp_atomic_dir *ad, char *failed, size_t size) {
    DIR *d = opendir(ad->tmp);
    if (!d) return -1;
    int rc = 0;
    struct dirent *e;
    char from[4096 + NAME_MAX + 2], to[4096 + NAME_MAX + 2];
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(from, sizeof from, "%s/%s", ad->tmp, e->d_name);
        snprintf(to, sizeof to, "%s/%s", ad->path, e->d_name);
        if (rename(from, to)) {
            rc = -1;
            snprintf(failed, size, "%s", to);
        }
    }
    int en = errno;
    closedir(d);
    errno = en;
    return rc;
}

vp_status vp_atomic_dir_commit(vp_atomic_dir *ad, vp_error *err) {
    if (!ad->tmp[0]) return vp_fail(err, VP_ERR_INVALID, "%s: not open for writing", ad->path);
    struct stat st;
    char failed[4096 + NAME_MAX + 2];
    snprintf(failed, sizeof failed, "%s", ad->path);
    int rc;
    if (ad->inside) rc = move_files(ad, failed, sizeof failed);
    else if (lstat(ad->path, &st)) rc = errno == ENOENT ? rename(ad->tmp, ad->path) : -1;
    else if (S_ISDIR(st.st_mode) && replaceable(ad->path, ad->tmp)) rc = replace_dir(ad);
    else if (!stat(ad->path, &st) && S_ISDIR(st.st_mode)) rc = move_files(ad, failed, sizeof failed);
    else rc = -1, errno = ENOTDIR;
    if (rc) {
        int e = errno;
        vp_atomic_dir_abort(ad);
        return vp_fail(err, VP_ERR_IO, "%s: cannot put in place: %s", failed, strerror(e));
    }
    if (!lstat(ad->tmp, &st)) remove_flat_dir(ad->tmp); /* emptied by move_files */
    sync_folder(ad->path);
    ad->tmp[0] = 0;
    return VP_OK;
}

void vp_atomic_dir_abort(vp_atomic_dir *ad) {
    if (ad->tmp[0]) remove_flat_dir(ad->tmp);
    ad->tmp[0] = 0;
}

void vp_atomic_dir_error_path(const vp_atomic_dir *ad, vp_error *err) {
    if (!err || !ad->tmp[0]) return;
    char *at = strstr(err->msg, ad->tmp);
    if (!at) return;
    char rest[sizeof err->msg];
    snprintf(rest, sizeof rest, "%s", at + strlen(ad->tmp));
    *at = 0;
    size_t used = strlen(err->msg);
    snprintf(at, sizeof err->msg - used, "%s%s", ad->path, rest);
}
