/* Atomic outputs: a file or a directory appears whole under its name, or not at all.
 *
 * In: the path a command writes.  Out: a temporary beside it (same folder, so the
 * rename stays on one file system) that the caller fills; commit renames it over the
 * path, abort removes it.  Invariants: a reader of the path sees the previous contents
 * or the new ones, never a prefix; a failed write (disk full, file-size limit, a
 * refused input) leaves any previous output byte-identical and no temporary behind;
 * two writers of the same path leave one of their outputs whole.  Every failure names
 * the path and the errno text ("gpt.vplan: write failed: No space left on device").
 *
 *   vp_atomic_file af;
 *   if ((s = vp_atomic_file_open(&af, path, err))) return s;
 *   fprintf(af.f, ...);                        // write errors are found by commit
 *   return vp_atomic_file_commit(&af, err);   // or vp_atomic_file_abort(&af)
 *
 * A path that names something other than a regular file (/dev/stdout, a pipe) is
 * written in place, as fopen would; a symbolic link keeps pointing where it did and
 * its target is replaced.  The new file gets fopen's permissions (0666 & ~umask). */
#ifndef VP_ATOMIC_FILE_H
#define VP_ATOMIC_FILE_H

#include <stdio.h>

#include "ir/vp_status.h"

typedef struct vp_atomic_file {
    FILE *f;         /* where the caller writes; NULL once committed or aborted */
    char path[4096]; /* the target as given, for messages */
    char real[4096]; /* the file rename() replaces (a symbolic link's target) */
    char tmp[4096];  /* the temporary beside it; empty when writing in place */
} vp_atomic_file;

/* Creates "<dir>/.<base>.XXXXXX" beside path and opens it for writing (binary and text
 * are the same here). */
vp_status vp_atomic_file_open(vp_atomic_file *af, const char *path, vp_error *err);

/* Checks the stream's error flag, flushes, fsyncs and closes it, then renames the
 * temporary over the path.  On any failure the temporary is removed and the previous
 * file is left as it was.  af->f is NULL afterwards either way. */
vp_status vp_atomic_file_commit(vp_atomic_file *af, vp_error *err);

/* Closes and removes the temporary (nothing if already committed or aborted). */
void vp_atomic_file_abort(vp_atomic_file *af);

/* A directory written whole: files go into af->tmp ("<parent>/.<base>.XXXXXX"), then
 * commit puts it in place.  A missing target is renamed in; an existing one that is
 * empty or holds only plain files the new one also holds (a previous run of the same
 * writer) is replaced as a whole (exchanged atomically where the kernel can, else moved
 * aside, the new one renamed in, the old one removed); any other existing directory
 * keeps its other files and takes the new files one by one, each renamed in whole.  A
 * folder that cannot be renamed ("-o .", "..", the working directory) is the last case,
 * its temporary "<path>/.atomic.XXXXXX" inside it. */
typedef struct vp_atomic_dir {
    char path[4096]; /* the target directory */
    char tmp[4096];  /* the temporary directory the caller writes into; empty when done */
    int inside;      /* tmp is inside path: commit moves the files, never the folder */
} vp_atomic_dir;

vp_status vp_atomic_dir_open(vp_atomic_dir *ad, const char *path, vp_error *err);
/* Puts the directory in place; on failure removes the temporary and leaves the target
 * as it was. */
vp_status vp_atomic_dir_commit(vp_atomic_dir *ad, vp_error *err);
/* Removes the temporary directory and what was written into it. */
void vp_atomic_dir_abort(vp_atomic_dir *ad);
/* Rewrites a message that names a file in the temporary directory to name it under the
 * target ("out/.gen.x1Y2z3/m_step.c: ..." becomes "out/gen/m_step.c: ..."). */
void vp_atomic_dir_error_path(const vp_atomic_dir *ad, vp_error *err);

#endif
