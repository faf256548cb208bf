/* Opening input files safely: models, external data, tensors, CSVs.
 *
 * A path a user gives may name a FIFO, a directory, a device or a socket.  fopen() on a
 * FIFO blocks until a writer appears (forever, for a command run by hand), and reading a
 * directory or /dev/zero gives nonsense or never ends.  Every reader of an input file
 * opens it through vp_file_open_regular(), which refuses anything that is not a regular
 * file, naming its kind, and never blocks. */
#ifndef VP_FILE_READ_H
#define VP_FILE_READ_H

#include <stdio.h>
#include <sys/stat.h>

#include "ir/vp_status.h"

/* Opens path read-only if it is a regular file (symlinks followed).  Returns the file
 * descriptor (the caller closes it), or -1 with err filled as
 * "<path>: cannot open: <strerror>" or "<path>: is a FIFO, not a regular file"
 * (a directory, a character device, ...).  Opened with O_NONBLOCK, then fstat'ed, so a
 * FIFO without a writer is refused at once; the flag is cleared before returning. */
int vp_file_open_regular(const char *path, vp_error *err);

/* The same as a stdio stream ("rb"), for line readers such as the CSV parsers; NULL with
 * err filled on failure.  fclose() it. */
FILE *vp_file_fopen_regular(const char *path, vp_error *err);

/* "a FIFO", "a directory", "a character device", ... for a st_mode (for messages). */
const char *vp_file_kind(mode_t mode);

#endif
