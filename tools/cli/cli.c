#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_load.h"
#include "report.h"

int cli_report(vp_status s, const vp_error *err) {
    if (s == VP_OK) return 0;
    fprintf(stderr, "onnx-vplan: %s\n", err->msg);
    return vp_status_exit_code(s);
}

static vp_onnx_load_opts load_opts; /* what cli_load_table parsed: one command per process */

cli_opt cli_load_table[] = {
    {"--lenient", CLI_SET, &load_opts.lenient, NULL,
     "load a model with attributes ONNX's schema does not have, or an opset\n"
     "newer than onnx-vplan implements, with a warning (default: refused;\n"
     "an attribute of the wrong type is refused either way)"},
    {0}};

void cli_pipeline_init(vp_pipeline_opts *po, const char *path, const cli_pairs *dims) {
    memset(po, 0, sizeof *po);
    po->model = path;
    po->load = load_opts;
    po->dims = dims->b;
    po->n_dims = dims->n;
    po->dump_to = stdout;
}

vp_status cli_load(const char *path, const cli_pairs *dims, vp_graph **out, vp_error *err) {
    vp_pipeline_opts po;
    cli_pipeline_init(&po, path, dims);
    po.until = VP_PIPELINE_LOAD;
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, err);
    *out = s ? NULL : r.g;
    if (s) vp_pipeline_result_free(&r);
    return s;
}

/* Calls f(t, arg) on every option of t and the tables it includes, in help order;
 * stops at the first nonzero answer and returns the option that gave it. */
static const cli_opt *walk(const cli_opt *t, int (*f)(const cli_opt *, void *), void *arg) {
    for (; t->kind != CLI_END; t++) {
        const cli_opt *hit = t->kind == CLI_TABLE ? walk(t->dest, f, arg) : f(t, arg) ? t : NULL;
        if (hit) return hit;
    }
    return NULL;
}

static int print_opt(const cli_opt *o, void *unused) {
    (void)unused;
    if (o->kind == CLI_POS) return 0;
    char head[256];
    size_t n = 0;
    for (const char *p = o->names; *p && n + 3 < sizeof head; p++) {
        head[n++] = *p == '|' ? ',' : *p;
        if (*p == '|') head[n++] = ' ';
    }
    snprintf(head + n, sizeof head - n, "%s%s", o->meta ? " " : "", o->meta ? o->meta : "");
    if (strlen(head) <= 20) printf("  %-22s", head);
    else printf("  %s\n%24s", head, "");
    for (const char *h = o->help ? o->help : ""; *h; h++) {
        putchar(*h);
        if (*h == '\n') printf("%24s", "");
    }
    putchar('\n');
    return 0;
}

static void print_help(const cli_cmd *c, const cli_opt *opts) {
    printf("usage: onnx-vplan %s %s\n\n%s\n", c->name, c->args, c->intro);
    walk(opts, print_opt, NULL);
    printf("  %-22s%s\n", "-h, --help", "this help");
    if (c->epilogue) printf("\n%s", c->epilogue);
}

/* Levenshtein distance, for suggesting the option a typo meant. */
static size_t distance(const char *a, size_t la, const char *b, size_t lb) {
    size_t row[128];
    if (lb >= 128) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* What the user typed, and the closest spelling of an option so far (for a suggestion). */
typedef struct nearest {
    const char *typed, *name;
    size_t len, dist;
} nearest;

static int has_name(const cli_opt *o, void *arg) {
    nearest *n = arg;
    for (const char *p = o->names; o->kind != CLI_POS && *p; p += *p == '|') {
        size_t len = strcspn(p, "|"), d = distance(n->typed, strlen(n->typed), p, len);
        if (d < n->dist) *n = (nearest){n->typed, p, len, d};
        if (!d) return 1;
        p += len;
    }
    return 0;
}

static vp_status unknown(const cli_cmd *c, const nearest *n, vp_error *err) {
    if (n->name && n->dist * 3 <= strlen(n->typed))
        return vp_fail(err, VP_ERR_USAGE, "%s: unknown option '%s'; did you mean %.*s? (see onnx-vplan %s --help)", c->name,
                       n->typed, (int)n->len, n->name, c->name);
    return vp_fail(err, VP_ERR_USAGE, "%s: unknown option '%s' (see onnx-vplan %s --help)", c->name, n->typed, c->name);
}

static vp_status bad(const cli_cmd *c, const char *opt, const char *v, const char *want, vp_error *err) {
    return vp_fail(err, VP_ERR_USAGE, "%s: %s expects %s, got '%s'", c->name, opt, want, v);
}

static int parse_int(const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < 0) return 0;
    *out = x;
    return 1;
}

/* NAME=VALUE: the name is copied, since argv holds it joined to the value. */
static vp_status store_pair(const cli_cmd *c, const cli_opt *o, const char *opt, const char *v, vp_error *err) {
    cli_pairs *p = o->dest;
    const char *eq = strchr(v, '=');
    int64_t x = 0;
    if (o->kind == CLI_DIM && (!eq || eq == v || !parse_int(eq + 1, &x)))
        return bad(c, opt, v, "NAME=VALUE with VALUE a non-negative integer (for example --dim batch=32)", err);
    if (!eq || eq == v || !eq[1]) return bad(c, opt, v, o->meta, err);
    if (p->n == CLI_MAX_PAIRS)
        return vp_fail(err, VP_ERR_USAGE, "%s: too many %s options (at most %d)", c->name, opt, CLI_MAX_PAIRS);
    if ((size_t)(eq - v) >= sizeof p->name[0])
        return vp_fail(err, VP_ERR_USAGE, "%s: %s name too long: '%s'", c->name, opt, v);
    snprintf(p->name[p->n], sizeof p->name[0], "%.*s", (int)(eq - v), v);
    p->value[p->n] = eq + 1;
    p->b[p->n] = (vp_dim_binding){p->name[p->n], x};
    p->n++;
    return VP_OK;
}

static vp_status store(const cli_cmd *c, const cli_opt *o, const char *opt, const char *v, vp_error *err) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_STR: *(const char **)o->dest = v; return VP_OK;
    case CLI_INT:
        if (!parse_int(v, o->dest)) return bad(c, opt, v, "a non-negative integer", err);
        return VP_OK;
    case CLI_NUM: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !(x >= 0) || !isfinite(x)) return bad(c, opt, v, "a non-negative number", err);
        *(double *)o->dest = x;
        return VP_OK;
    }
    case CLI_SIZE:
        if (!vp_parse_size(v, o->dest)) return bad(c, opt, v, "a size (examples: 16GiB, 800MB, 1.5G, 1073741824)", err);
        return VP_OK;
    case CLI_ENUM: {
        char want[256] = "";
        size_t n = 0;
        for (const char *w = o->meta; *w;) {
            size_t len = strcspn(w, "|");
            if (strlen(v) == len && !strncmp(v, w, len)) {
                *(const char **)o->dest = v;
                return VP_OK;
            }
            const char *sep = w == o->meta ? "" : w[len] ? ", " : " or ";
            n += (size_t)snprintf(want + n, n < sizeof want ? sizeof want - n : 0, "%s%.*s", sep, (int)len, w);
            w += len + (w[len] == '|');
        }
        return bad(c, opt, v, want, err);
    }
    case CLI_PAIR:
    case CLI_DIM: return store_pair(c, o, opt, v, err);
    default: return vp_fail(err, VP_ERR_INVALID, "internal: %s: option %s of kind %d", c->name, opt, (int)o->kind);
    }
}

/* The k-th positional argument: k counts down to it. */
static int is_pos(const cli_opt *o, void *k) { return o->kind == CLI_POS && (*(int *)k)-- == 0; }

int cli_parse(const cli_cmd *c, const cli_opt *opts, int argc, char **argv) {
    vp_error err;
    vp_status s = VP_OK;
    int n_pos = 0;
    int (*action)(void) = NULL;
    for (int i = 1; i < argc && !s; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_help(c, opts);
            return 0;
        }
        if (a[0] != '-') {
            int k = n_pos++;
            const cli_opt *o = walk(opts, is_pos, &k);
            if (o) *(const char **)o->dest = a;
            else
                s = vp_fail(&err, VP_ERR_USAGE, "%s: unexpected argument '%s' (usage: onnx-vplan %s %s)", c->name, a, c->name,
                            c->args);
            continue;
        }
        char opt[64];
        size_t len = a[1] == '-' ? strcspn(a, "=") : strlen(a);
        snprintf(opt, sizeof opt, "%.*s", (int)len, a);
        const char *v = a[len] ? a + len + 1 : NULL;
        nearest near = {opt, NULL, 0, 3};
        const cli_opt *o = walk(opts, has_name, &near);
        if (!o) s = unknown(c, &near, &err);
        else if (o->kind == CLI_ACTION) {
            if (v) s = vp_fail(&err, VP_ERR_USAGE, "%s: %s takes no value, got '%s'", c->name, opt, a);
            else action = (int (*)(void))o->dest; /* run once the whole line has parsed */
        } else if (o->kind == CLI_SET || o->kind == CLI_CLEAR) {
            if (v) s = vp_fail(&err, VP_ERR_USAGE, "%s: %s takes no value, got '%s'", c->name, opt, a);
            else *(int *)o->dest = o->kind == CLI_SET;
        } else if (!v && i + 1 >= argc)
            s = vp_fail(&err, VP_ERR_USAGE, "%s: %s needs a value (%s %s)", c->name, opt, opt, o->meta);
        else s = store(c, o, opt, v ? v : argv[++i], &err);
    }
    if (!s && action) return action(); /* --passes: no positional needed */
    const cli_opt *missing = walk(opts, is_pos, &n_pos);
    if (!s && missing)
        s = vp_fail(&err, VP_ERR_USAGE, "%s: missing %s (usage: onnx-vplan %s %s)", c->name, missing->names, c->name,
                    c->args);
    return s ? cli_report(s, &err) : CLI_CONTINUE;
}
