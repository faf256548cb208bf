#include "ir/vp_status.h"

#include <stdio.h>
#include <string.h>

vp_status vp_fail(vp_error *err, vp_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void vp_error_prefix(vp_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.300s%.700s", head, old);
}

const char *vp_status_name(vp_status s) {
    switch (s) {
    case VP_OK: return "ok";
    case VP_ERR_IO: return "io error";
    case VP_ERR_PARSE: return "parse error";
    case VP_ERR_INVALID: return "invalid input";
    case VP_ERR_UNSUPPORTED: return "unsupported";
    case VP_ERR_NOMEM: return "out of memory";
    case VP_ERR_RUNTIME: return "runtime error";
    case VP_ERR_USAGE: return "usage error";
    }
    return "unknown error";
}

int vp_status_exit_code(vp_status s) {
    switch (s) {
    case VP_OK: return 0;
    case VP_ERR_RUNTIME:
    case VP_ERR_NOMEM: return 1;
    default: return 2;
    }
}
