/* Input files opened only when they are regular files (file_read.h): a FIFO, a
 * directory or a device given as a model, external data or a CSV is refused with its
 * kind named, and opening never blocks. */
#include "ir/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

const char *vp_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

int vp_file_open_regular(const char *path, vp_error *err) {
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        vp_fail(err, VP_ERR_IO, "%s: is %s, not a regular file", path, vp_file_kind(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        return -1;
    }
    return fd;
}

FILE *vp_file_fopen_regular(const char *path, vp_error *err) {
    int fd = vp_file_open_regular(path, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    return f;
}
