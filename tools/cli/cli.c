#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_load.h"

vp_status cli_parse_int(const char *opt, const char *arg, int64_t *out, vp_error *err) {
    char *end;
    errno = 0;
    long long v = arg ? strtoll(arg, &end, 10) : 0;
    if (!arg || !*arg || *end || errno || v < 0)
        return vp_fail(err, VP_ERR_USAGE, "%s expects a non-negative integer, got '%s'", opt, arg ? arg : "");
    *out = v;
    return VP_OK;
}

vp_status cli_parse_dim(cli_dims *dims, const char *arg, vp_error *err) {
    const char *eq = arg ? strchr(arg, '=') : NULL;
    if (!eq || eq == arg)
        return vp_fail(err, VP_ERR_USAGE, "--dim expects NAME=VALUE (for example --dim batch=32), got '%s'",
                       arg ? arg : "");
    if (dims->n == CLI_MAX_DIMS) return vp_fail(err, VP_ERR_USAGE, "too many --dim options (at most %d)", CLI_MAX_DIMS);
    int64_t v = 0;
    vp_status s = cli_parse_int("--dim", eq + 1, &v, err);
    if (s) return s;
    static char names[CLI_MAX_DIMS][128];
    size_t len = (size_t)(eq - arg);
    if (len >= sizeof names[0]) return vp_fail(err, VP_ERR_USAGE, "--dim name too long: '%s'", arg);
    memcpy(names[dims->n], arg, len);
    names[dims->n][len] = 0;
    dims->b[dims->n].name = names[dims->n];
    dims->b[dims->n].value = v;
    dims->n++;
    return VP_OK;
}

vp_status cli_load(const char *path, const cli_dims *dims, vp_graph **out, vp_error *err) {
    vp_status s = vp_onnx_load(path, out, err);
    if (s) return s;
    s = vp_bind_dims(*out, dims->b, dims->n, err);
    if (s) {
        vp_graph_free(*out);
        *out = NULL;
    }
    return s;
}

int cli_report(vp_status s, const vp_error *err) {
    if (s == VP_OK) return 0;
    fprintf(stderr, "onnx-vplan: %s\n", err->msg);
    return vp_status_exit_code(s);
}
