#include "json_writer.h"

#include <math.h>

void vp_json_init(vp_json *j, FILE *f, int pretty) {
    j->f = f;
    j->depth = 0;
    j->need_comma[0] = 0;
    j->after_key = 0;
    j->pretty = pretty;
}

static void indent(vp_json *j) {
    if (!j->pretty) return;
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++) fputs("  ", j->f);
}

/* Separator before a value or a key at the current level. */
static void before_item(vp_json *j) {
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->need_comma[j->depth]) fputc(',', j->f);
    if (j->depth) indent(j);
    j->need_comma[j->depth] = 1;
}

static void open_level(vp_json *j, char c) {
    before_item(j);
    fputc(c, j->f);
    if (j->depth < 63) j->depth++;
    j->need_comma[j->depth] = 0;
}

static void close_level(vp_json *j, char c) {
    int had = j->need_comma[j->depth];
    if (j->depth) j->depth--;
    if (had) indent(j);
    fputc(c, j->f);
}

void vp_json_begin_object(vp_json *j) { open_level(j, '{'); }
void vp_json_end_object(vp_json *j) { close_level(j, '}'); }
void vp_json_begin_array(vp_json *j) { open_level(j, '['); }
void vp_json_end_array(vp_json *j) { close_level(j, ']'); }

static void write_escaped(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

void vp_json_key(vp_json *j, const char *key) {
    before_item(j);
    write_escaped(j->f, key);
    fputs(j->pretty ? ": " : ":", j->f);
    j->after_key = 1;
}

void vp_json_string(vp_json *j, const char *s) {
    before_item(j);
    write_escaped(j->f, s);
}

void vp_json_int(vp_json *j, int64_t v) {
    before_item(j);
    fprintf(j->f, "%lld", (long long)v);
}

void vp_json_double(vp_json *j, double v) {
    before_item(j);
    if (isfinite(v)) fprintf(j->f, "%.17g", v);
    else fputs("null", j->f);
}

void vp_json_bool(vp_json *j, int v) {
    before_item(j);
    fputs(v ? "true" : "false", j->f);
}

void vp_json_null(vp_json *j) {
    before_item(j);
    fputs("null", j->f);
}

void vp_json_finish(vp_json *j) { fputc('\n', j->f); }
