/* The DOT graph and the memory timeline of hand-built plans: the DOT file must render
 * with Graphviz's dot (full at 1826 steps, collapsed at 5206, and with backward nodes
 * whose names or inputs do not tie them to forward nodes; the render time is printed,
 * and a 300 s timeout only guards against a hang: how fast dot runs belongs to a
 * benchmark, not to a test on a shared machine), the timeline must be well-formed SVG
 * (checked here, and by xmllint when it is installed), and an unwritable path must fail
 * with VP_ERR_IO naming it.
 *
 * The plan (synth_plan.c) imitates a torch-exported transformer: blocks of forward nodes named
 * "/blocks.N/attn/MatMul", their backward nodes "<forward>_grad/<Op>_<k>", AdamW
 * updates "<param>_update/AdamW" with two moments each, buffers with categories,
 * lifetimes and first-fit offsets computed here.  Set VP_KEEP_ARTIFACTS=1 to keep the
 * files (their folder is printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu_host.h"
#include "plan_artifacts.h"
#include "synth_plan.h"

static int n_pass, n_fail;
static char tmpdir[256];

static void report(const char *name, int ok, const char *detail) {
    printf("%-46s %s%s%s\n", name, ok ? "ok" : "FAIL", detail && detail[0] ? "  " : "", detail ? detail : "");
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- checks ---- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0, *len = (size_t)n;
    return buf;
}

static int entity_ok(const char *s) {
    static const char *const ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (!strncmp(s, ents[i], strlen(ents[i]))) return 1;
    return s[1] == '#' && strchr(s, ';') != NULL;
}

/* A tag from '<' to '>': its name, whether it closes or is empty; '<' and bare '&' are
 * not allowed in attribute values.  Returns the position after '>', or NULL. */
static const char *scan_tag(const char *s, char *name, size_t cap, int *closing, int *empty) {
    s++;
    *closing = *s == '/';
    if (*closing) s++;
    size_t n = 0;
    while (*s && !strchr(" \t\r\n/>", *s) && n + 1 < cap) name[n++] = *s++;
    name[n] = 0;
    if (!n) return NULL;
    for (char q = 0; *s; s++) {
        if (q) {
            if (*s == q) q = 0;
            else if (*s == '<' || (*s == '&' && !entity_ok(s))) return NULL;
        } else if (*s == '"' || *s == '\'') {
            q = *s;
        } else if (*s == '>') {
            *empty = s[-1] == '/';
            return s + 1;
        }
    }
    return NULL;
}

/* Balanced tags, one <svg> root with the SVG namespace, escaped text.  Returns an error
 * message or NULL. */
static const char *xml_check(const char *doc) {
    char stack[64][64], name[64];
    int depth = 0, roots = 0;
    for (const char *s = doc; *s;) {
        if (!strncmp(s, "<?", 2) || !strncmp(s, "<!--", 4) || !strncmp(s, "<![CDATA[", 9)) {
            const char *end = strstr(s, s[1] == '?' ? "?>" : s[2] == '-' ? "-->" : "]]>");
            if (!end) return "unterminated declaration, comment or CDATA";
            s = end + 2;
            continue;
        }
        if (*s == '&' && !entity_ok(s)) return "bare '&' in text";
        if (*s != '<') {
            s++;
            continue;
        }
        int closing, empty = 0;
        const char *tag = s;
        s = scan_tag(s, name, sizeof name, &closing, &empty);
        if (!s) return "malformed tag";
        if (closing) {
            if (!depth || strcmp(stack[depth - 1], name)) return "mismatched closing tag";
            depth--;
            continue;
        }
        if (!depth) {
            if (roots++ || strcmp(name, "svg")) return "root is not a single <svg>";
            const char *gt = strchr(tag, '>');
            const char *ns = strstr(tag, "xmlns=\"http://www.w3.org/2000/svg\"");
            if (!ns || ns > gt) return "<svg> lacks the SVG namespace";
        }
        if (!empty) {
            if (depth == 64) return "nesting too deep";
            snprintf(stack[depth++], sizeof stack[0], "%s", name);
        }
    }
    return depth ? "unclosed element" : roots ? NULL : "no root element";
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Renders with dot (bounded by timeout); ok when it exits 0 and writes something. */
static int dot_renders(const char *dot, const char *svg, double *secs, char *why, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 300 dot -Tsvg '%s' -o '%s' 2>'%s.err'", dot, svg, svg);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = system(cmd);
    *secs = seconds_since(&t0);
    struct stat st;
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        snprintf(why, cap, "dot exited with %d (see %s.err)", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, svg);
        return 0;
    }
    if (stat(svg, &st) != 0 || st.st_size < 100) {
        snprintf(why, cap, "dot wrote no picture");
        return 0;
    }
    return 1;
}

static int have_xmllint(void) { return system("command -v xmllint >/dev/null 2>&1") == 0; }

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* ---- cases ---- */

static void case_dot(const char *label, const test_synth *s, const char *file, int expect_collapsed) {
    char dot[512], svg[600], why[1200] = "";
    path_in_tmp(dot, sizeof dot, file);
    snprintf(svg, sizeof svg, "%s.svg", dot);
    vp_error err = {{0}};
    vp_status st = vp_dot_write(&s->p, dot, &err);
    size_t len = 0;
    char *text = st ? NULL : read_all(dot, &len);
    int ok = text != NULL;
    if (!ok) snprintf(why, sizeof why, "write failed: %s", err.msg);
    if (ok && !strstr(text, "peak")) ok = 0, snprintf(why, sizeof why, "no peak mark");
    if (ok && !strstr(text, "subgraph cluster_")) ok = 0, snprintf(why, sizeof why, "no clusters");
    if (ok && (strstr(text, "collapsed:") != NULL) != expect_collapsed)
        ok = 0, snprintf(why, sizeof why, "collapsed drawing %s", expect_collapsed ? "expected" : "unexpected");
    int small = s->p.n_steps < 100;
    if (ok && small && (!strstr(text, "MatMul\\\"odd\\\\&<x>") || !strstr(text, "KiB\"")))
        ok = 0, snprintf(why, sizeof why, "quote/backslash not escaped or edge sizes missing");
    if (ok && small && !strstr(text, "blocks.0 (backward)"))
        ok = 0, snprintf(why, sizeof why, "no backward cluster for blocks.0");
    double secs = 0;
    if (ok) ok = dot_renders(dot, svg, &secs, why, sizeof why);
    if (ok) snprintf(why, sizeof why, "%d steps, %zu bytes of DOT, dot -Tsvg %.2f s", s->p.n_steps, len, secs);
    free(text);
    report(label, ok, why);
}

static void case_timeline(const char *label, const test_synth *s, const char *file, size_t max_bytes) {
    char path[512], why[1200] = "";
    path_in_tmp(path, sizeof path, file);
    vp_error err = {{0}};
    vp_status st = vp_timeline_write(&s->p, path, &err);
    size_t len = 0;
    char *text = st ? NULL : read_all(path, &len);
    const char *bad = text ? xml_check(text) : err.msg;
    int ok = !bad;
    if (!ok) snprintf(why, sizeof why, "%s", bad);
    if (ok && s->p.n_steps && (!strstr(text, "<title>") || !strstr(text, "arena ") || !strstr(text, "peak")))
        ok = 0, snprintf(why, sizeof why, "tooltips, arena line or peak mark missing");
    if (ok && len > max_bytes) ok = 0, snprintf(why, sizeof why, "%zu bytes, over %zu", len, max_bytes);
    if (ok && have_xmllint()) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
        if (system(cmd) != 0) ok = 0, snprintf(why, sizeof why, "xmllint rejects %s", path);
    }
    if (ok) snprintf(why, sizeof why, "%d steps, %zu bytes%s", s->p.n_steps, len, have_xmllint() ? ", xmllint ok" : "");
    free(text);
    report(label, ok, why);
}

static void case_io_error(const test_synth *s) {
    const char *bad = "/nonexistent-dir/vp/plan.dot";
    vp_error e1 = {{0}}, e2 = {{0}};
    vp_status a = vp_dot_write(&s->p, bad, &e1), b = vp_timeline_write(&s->p, bad, &e2);
    int ok = a == VP_ERR_IO && b == VP_ERR_IO && strstr(e1.msg, bad) && strstr(e2.msg, bad);
    report("unwritable path -> VP_ERR_IO", ok, ok ? e1.msg : "wrong status or message");
}

static void case_empty(void) {
    vp_graph *g = vp_graph_new();
    vp_plan p;
    memset(&p, 0, sizeof p);
    p.g = g;
    test_synth s = {g, p, NULL, 0};
    case_timeline("timeline, empty plan", &s, "empty.svg", 1 << 16);
    char dot[512], svg[600], why[600] = "";
    path_in_tmp(dot, sizeof dot, "empty.dot");
    snprintf(svg, sizeof svg, "%s.svg", dot);
    vp_error err;
    double secs;
    int ok = vp_dot_write(&p, dot, &err) == VP_OK && dot_renders(dot, svg, &secs, why, sizeof why);
    report("dot, empty plan", ok, why);
    vp_graph_free(g);
}

static void cleanup(void) {
    if (getenv("VP_KEEP_ARTIFACTS") || n_fail) {
        printf("artifacts kept in %s\n", tmpdir);
        return;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* A plan of n_blocks blocks through both writers. */
static void case_plan(const char *what, int n_blocks, int64_t budget, int plain_names, int timeline) {
    test_synth s;
    char label[96], file[64];
    if (!test_synth_build(&s, n_blocks, budget, plain_names)) {
        test_synth_free(&s);
        snprintf(label, sizeof label, "build %s", what);
        report(label, 0, "could not build the plan");
        return;
    }
    snprintf(label, sizeof label, "dot, %s", what);
    snprintf(file, sizeof file, "blocks%d-%d.dot", n_blocks, plain_names);
    case_dot(label, &s, file, s.p.n_steps > 2000 || plain_names == 2);
    if (timeline) {
        snprintf(label, sizeof label, "timeline, %s", what);
        snprintf(file, sizeof file, "blocks%d.svg", n_blocks);
        case_timeline(label, &s, file, 4 << 20);
    }
    if (n_blocks < 10) case_io_error(&s);
    test_synth_free(&s);
}

int main(void) {
    vp_cpu_host_install();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/vp_artifacts_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (system("command -v dot >/dev/null 2>&1") != 0) {
        printf("graphviz's dot is not installed (apt-get install graphviz)\n");
        return 1;
    }
    /* steps: 1 + 10 per block forward, 1 loss, 2 + 10 per block backward, 7 updates a block */
    case_plan("3 blocks", 3, 8 << 20, 0, 1);
    case_empty();
    case_plan("70 blocks (1826 steps, full)", 70, 0, 0, 0);
    case_plan("70 blocks, unmatched grad names", 70, 0, 1, 0);
    case_plan("200 blocks (5206 steps, collapsed)", 200, 256 << 20, 0, 1);
    case_plan("200 blocks, unmatched grad names", 200, 0, 1, 0);
    case_plan("70 blocks, backward unrelated to forward", 70, 0, 2, 0);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    cleanup();
    return n_fail ? 1 : 0;
}
