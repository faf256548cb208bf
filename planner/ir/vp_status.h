/* Status codes and error messages shared by every onnx-vplan library function.
 *
 * A fallible function returns a vp_status and, on failure, fills a vp_error whose
 * message names the input, the node and the reason.  The command prints the message
 * and exits with vp_status_exit_code().  assert() is kept for broken internal
 * invariants only; nothing a user can feed us may reach one. */
#ifndef VP_STATUS_H
#define VP_STATUS_H

#include <stdarg.h>

typedef enum vp_status {
    VP_OK = 0,
    VP_ERR_IO,          /* file missing, unreadable, truncated on disk */
    VP_ERR_PARSE,       /* bytes that are not the format they claim to be */
    VP_ERR_INVALID,     /* well-formed input that breaks the rules (cycle, bad dim, ...) */
    VP_ERR_UNSUPPORTED, /* valid ONNX that we do not handle (op, attribute, dtype) */
    VP_ERR_NOMEM,
    VP_ERR_RUNTIME,     /* a failure while executing (bad index, backend error) */
    VP_ERR_USAGE,       /* bad command line */
} vp_status;

typedef struct vp_error {
    char msg[1024];
} vp_error;

/* Fills err (if not NULL) and returns code, so call sites read
 * `return vp_fail(err, VP_ERR_INVALID, "node '%s': ...", name);` */
vp_status vp_fail(vp_error *err, vp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context ("model.onnx: ") to an existing message. */
void vp_error_prefix(vp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *vp_status_name(vp_status s);

/* Exit code contract of the command: 0 ok, 1 runtime failure, 2 bad input or usage. */
int vp_status_exit_code(vp_status s);

#endif
