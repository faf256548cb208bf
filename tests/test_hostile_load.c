/* The loader's bounds on hostile input (issue 40), below the CLI: the wire-format depth
 * walk on nesting built in memory (3000 If levels refused, 64 loaded as far as the walk
 * goes, TypeProto nesting bounded, truncated bytes left to protobuf-c), the regular-file
 * check on a FIFO and a directory, regular expressions bounded before regcomp, and the
 * attribute schema table covering every default-domain op the registry implements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cpu_host.h"
#include "ir/attr_schema.h"
#include "ir/file_read.h"
#include "ir/op_registry.h"
#include "ir/vp_regex.h"
#include "onnx/wire_depth.h"

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (!n) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(buf *b, uint64_t v) {
    uint8_t t[10];
    int k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    put(b, t, (size_t)k);
}

/* field `num` (length-delimited) holding inner, into out; inner is freed */
static void wrap(buf *out, int num, buf *inner) {
    put_varint(out, (uint64_t)num << 3 | 2);
    put_varint(out, inner->n);
    put(out, inner->p, inner->n);
    free(inner->p);
    *inner = (buf){0};
}

/* ModelProto bytes: graph -> node -> attribute g -> graph ... `depth` graphs deep */
static buf nested_graphs(int depth) {
    buf g = {0};
    for (int d = 1; d < depth; d++) {
        buf attr = {0}, node = {0}, outer = {0};
        wrap(&attr, 6, &g);       /* AttributeProto.g */
        wrap(&node, 5, &attr);    /* NodeProto.attribute */
        wrap(&outer, 1, &node);   /* GraphProto.node */
        g = outer;
    }
    buf model = {0};
    put_varint(&model, 1 << 3); /* ir_version 8 */
    put_varint(&model, 8);
    wrap(&model, 7, &g);        /* ModelProto.graph */
    return model;
}

/* ModelProto: graph -> input ValueInfoProto -> TypeProto with `depth` sequence levels */
static buf nested_types(int depth) {
    buf t = {0};
    for (int d = 0; d < depth; d++) {
        buf seq = {0}, type = {0};
        wrap(&seq, 1, &t);   /* Sequence.elem_type */
        wrap(&type, 4, &seq); /* TypeProto.sequence_type */
        t = type;
    }
    buf vi = {0}, g = {0}, model = {0};
    wrap(&vi, 2, &t);   /* ValueInfoProto.type */
    wrap(&g, 11, &vi);  /* GraphProto.input */
    wrap(&model, 7, &g);
    return model;
}

static void test_depth(void) {
    vp_error err;
    buf m = nested_graphs(3000);
    vp_status s = vp_onnx_check_depth(m.p, m.n, "deep.onnx", &err);
    check(s == VP_ERR_UNSUPPORTED && strstr(err.msg, "deep.onnx: graphs are nested 3000 deep"), "3000 graphs refused: %s",
          s ? err.msg : "accepted");
    check(s && m.n > 10 && vp_onnx_check_depth(m.p, m.n / 2, "half.onnx", &err) == VP_OK,
          "truncated bytes left to the unpacker");
    free(m.p);
    m = nested_graphs(VP_WIRE_MAX_GRAPH_DEPTH);
    s = vp_onnx_check_depth(m.p, m.n, "ok.onnx", &err);
    check(s == VP_OK, "%d graphs deep passes the walk: %s", VP_WIRE_MAX_GRAPH_DEPTH, s ? err.msg : "ok");
    free(m.p);
    m = nested_graphs(VP_WIRE_MAX_GRAPH_DEPTH + 1);
    check(vp_onnx_check_depth(m.p, m.n, "ok.onnx", &err) == VP_ERR_UNSUPPORTED, "%d graphs deep refused",
          VP_WIRE_MAX_GRAPH_DEPTH + 1);
    free(m.p);
    m = nested_types(1000);
    s = vp_onnx_check_depth(m.p, m.n, "types.onnx", &err);
    check(s == VP_ERR_UNSUPPORTED && strstr(err.msg, "protobuf messages are nested"), "a TypeProto 1000 deep refused: %s",
          s ? err.msg : "accepted");
    free(m.p);
}

static void test_regular(void) {
    char dir[] = "/tmp/vp_hostile_XXXXXX";
    if (!mkdtemp(dir)) {
        check(0, "mkdtemp");
        return;
    }
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    vp_error err;
    check(mkfifo(fifo, 0600) == 0 && vp_file_open_regular(fifo, &err) < 0 && strstr(err.msg, "is a FIFO, not a regular file"),
          "FIFO refused without blocking: %s", err.msg);
    check(vp_file_open_regular(dir, &err) < 0 && strstr(err.msg, "is a directory"), "directory refused: %s", err.msg);
    FILE *f = vp_file_fopen_regular("/dev/null", &err);
    check(!f && strstr(err.msg, "is a character device"), "/dev/null refused: %s", err.msg);
    int fd = vp_file_open_regular(VP_SOURCE_DIR "/README.md", &err);
    check(fd >= 0, "a regular file opens");
    if (fd >= 0) close(fd);
    unlink(fifo);
    rmdir(dir);
}

static void test_regex(void) {
    char *p = malloc(20001);
    memset(p, '(', 20000);
    p[20000] = 0;
    regex_t re;
    vp_error err;
    vp_status s = vp_regex_compile(&re, p, "--freeze", &err);
    check(s == VP_ERR_USAGE && strstr(err.msg, "--freeze: the regular expression is 20000 bytes long"), "20,000 '(': %s",
          s ? err.msg : "compiled");
    /* 65 groups deep, well under the length bound */
    for (int i = 0; i < 65; i++) p[i] = '(', p[65 + 1 + i] = ')';
    p[65] = 'a';
    p[131] = 0;
    s = vp_regex_compile(&re, p, "--qat-exclude", &err);
    check(s == VP_ERR_USAGE && strstr(err.msg, "nests groups 65 deep"), "65 deep: %s", s ? err.msg : "compiled");
    /* nested repetitions: 255^3 atoms once expanded (13 s and 3.4 GB in regcomp), refused;
     * 255^2 compiles (0.02 s) */
    s = vp_regex_compile(&re, "((a{255}){255}){255}", "--freeze", &err);
    check(s == VP_ERR_USAGE && strstr(err.msg, "expand it to 1.66e+07 atoms"), "((a{255}){255}){255}: %s",
          s ? err.msg : "compiled");
    s = vp_regex_compile(&re, "(a{255}){255}", "--freeze", &err);
    check(s == VP_OK, "(a{255}){255}: %s", s ? err.msg : "compiled");
    if (!s) regfree(&re);
    s = vp_regex_compile(&re, "^(blocks\\.[0-9]{1,2}\\.)?(attn|mlp)_[a-z]{2,8}|fc[0-9]+$", "--freeze", &err);
    check(s == VP_OK && regexec(&re, "blocks.11.attn_proj", 0, NULL, 0) == 0, "an ordinary pattern: %s", s ? err.msg : "ok");
    if (!s) regfree(&re);
    s = vp_regex_compile(&re, "[(][(](\\(fc[0-9]\\))", "--freeze", &err);
    check(s == VP_OK && regexec(&re, "(((fc1)", 0, NULL, 0) == 0, "brackets and escapes are not groups");
    if (!s) regfree(&re);
    free(p);
}

static void schema_covers(const vp_op_def *op, void *ctx) {
    int *missing = ctx;
    if (op->domain && op->domain[0] && strcmp(op->domain, "ai.onnx")) return;
    /* ONNX Runtime's gradient ops that the registry also takes in the default domain */
    if (!strcmp(op->name, "MaxPoolGrad") || !strcmp(op->name, "AveragePoolGrad")) return;
    if (!vp_op_schema_find(op->name, vp_attr_schema_max_opset)) {
        printf("no schema for %s: rerun tools/scripts/gen_attr_schema.py\n", op->name);
        (*missing)++;
    }
}

static void test_schema(void) {
    int missing = 0;
    vp_op_foreach(schema_covers, &missing);
    check(!missing, "every default-domain op of the registry has a schema (onnx %s)", vp_attr_schema_onnx_version);
    const vp_op_schema *g13 = vp_op_schema_find("Gemm", 13), *g1 = vp_op_schema_find("Gemm", 1);
    check(g13 && g13->since == 13 && g1 && g1->since == 1 && g1->n_attrs == 5, "Gemm's versions found");
    const vp_op_schema *ln = vp_op_schema_find("LayerNormalization", 13);
    check(ln && ln->since == 17, "an op newer than the opset gets its oldest schema");
    for (int i = 1; i < vp_n_op_schemas; i++) {
        int c = strcmp(vp_op_schemas[i - 1].op, vp_op_schemas[i].op);
        if (c > 0 || (c == 0 && vp_op_schemas[i - 1].since >= vp_op_schemas[i].since)) {
            check(0, "table sorted at row %d", i);
            return;
        }
    }
    check(1, "table sorted by op and version");
}

int main(void) {
    vp_cpu_host_install();
    test_depth();
    test_regular();
    test_regex();
    test_schema();
    return check_summary();
}
