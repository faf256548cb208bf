/* The memory timeline of a plan as one SVG 1.1 file.
 *
 * In: a built plan.  Out: two charts sharing the step axis.  Above, the bytes live at
 * each step stacked by category, with the arena and budget lines and the peak marked;
 * below, the arena layout: one rectangle per buffer from its first step to its last and
 * from its offset to offset + size, so fragmentation and reuse are visible at a glance.
 * Only alias roots are counted: an alias shares its root's storage.
 *
 * The file stays bounded for any plan size: the stack is sampled at most TL_MAX_X
 * places (each bucket shows its step of highest total, so the envelope keeps the
 * peak), and layout rectangles too small to see are merged into a coarse grid. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeline_internal.h"
#include "ir/atomic_file.h"

/* Stack order, bottom to top: what lives the whole step first, the activation hump and
 * the short-lived temporaries on top where their swings are readable. */
static const vp_category stack_order[VP_CAT_COUNT] = {
    VP_CAT_PARAMETERS, VP_CAT_OPTIMIZER_STATE, VP_CAT_CONSTANTS,   VP_CAT_INPUTS,       VP_CAT_WEIGHT_COPIES,
    VP_CAT_GRADIENTS,  VP_CAT_ACTIVATIONS,     VP_CAT_WORKSPACE,   VP_CAT_COMM,         VP_CAT_TEMPORARIES,
    VP_CAT_HOST, /* not in the arena: drawn only if a host buffer ever is */
};
/* Tableau 10: distinct in print and for the common colour-vision deficiencies. */
static const char *const cat_color[VP_CAT_COUNT] = {
    "#4e79a7", /* parameters */
    "#f28e2b", /* gradients */
    "#76b7b2", /* optimizer_state */
    "#e15759", /* activations */
    "#edc948", /* temporaries */
    "#b07aa1", /* workspace */
    "#59a14f", /* inputs */
    "#9c755f", /* constants */
    "#ff9da7", /* weight_copies */
    "#bab0ac", /* communication */
    "#d7b5a6", /* host */
};
static const char *const phase_color[] = {"#a0cbe8", "#ffbe7d", "#ff9d9a", "#8cd17d", "#d4a6c8", "#bab0ac"};
static const char *const phase_label[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};

/* ---- data ---- */

int vp_tl_is_root(const vp_buffer *b) { return b->alias_of < 0 && b->size > 0 && b->last >= b->first; }

int vp_tl_cat_index(const vp_buffer *b) { return (int)b->cat >= 0 && b->cat < VP_CAT_COUNT ? (int)b->cat : VP_CAT_TEMPORARIES; }

static int64_t live_at(const tl_ctx *c, int cat, int s) { return c->live[(size_t)cat * ((size_t)c->n + 1) + (size_t)s]; }

static int64_t total_at(const tl_ctx *c, int s) {
    int64_t t = 0;
    for (int k = 0; k < VP_CAT_COUNT; k++) t += live_at(c, k, s);
    return t;
}

/* Bytes live per category and step, by difference arrays over the roots' lifetimes. */
static vp_status live_compute(tl_ctx *c) {
    size_t stride = (size_t)c->n + 1;
    c->live = calloc(stride * VP_CAT_COUNT, sizeof *c->live);
    if (!c->live) return VP_ERR_NOMEM;
    for (int b = 0; b < c->p->n_buffers; b++) {
        const vp_buffer *buf = &c->p->buffers[b];
        /* the host block (offload) is not the arena's: neither its live bytes nor its layout */
        if (!vp_tl_is_root(buf) || buf->cat == VP_CAT_HOST || buf->first < 0 || buf->first >= c->n) continue;
        int64_t *row = c->live + (size_t)vp_tl_cat_index(buf) * stride;
        row[buf->first] += buf->size;
        row[buf->last + 1 < c->n ? buf->last + 1 : c->n] -= buf->size;
    }
    for (int k = 0; k < VP_CAT_COUNT; k++)
        for (int s = 1; s < c->n; s++) c->live[(size_t)k * stride + (size_t)s] += c->live[(size_t)k * stride + (size_t)s - 1];
    return VP_OK;
}

static int bucket_lo(const tl_ctx *c, int j) { return (int)((int64_t)j * c->n / c->nx); }

/* Each bucket is drawn as its step of highest total, so no peak is averaged away. */
static vp_status buckets_compute(tl_ctx *c) {
    c->nx = c->n < TL_MAX_X ? c->n : TL_MAX_X;
    c->sample = malloc(((size_t)c->nx + 1) * sizeof *c->sample);
    if (!c->sample) return VP_ERR_NOMEM;
    for (int j = 0; j < c->nx; j++) {
        int best = bucket_lo(c, j);
        int64_t best_total = total_at(c, best);
        for (int s = best + 1; s < bucket_lo(c, j + 1); s++) {
            int64_t t = total_at(c, s);
            if (t > best_total) best_total = t, best = s;
        }
        c->sample[j] = best;
        if (best_total > c->max_live) c->max_live = best_total;
    }
    return VP_OK;
}

/* ---- scales and units ---- */

double vp_tl_x(const tl_ctx *c, double step) { return TL_LEFT + TL_PW * step / (c->n > 0 ? c->n : 1); }
static double y1_of(const tl_ctx *c, double bytes) { return TL_TOP1 + TL_PH1 * (1.0 - bytes / c->ymax1); }
double vp_tl_y2(const tl_ctx *c, double bytes) { return TL_TOP2 + TL_PH2 * (1.0 - bytes / c->ymax2); }

/* 1, 2, 2.5 or 5 times a power of ten, at least x. */
static double nice_step(double x) {
    double e = pow(10.0, floor(log10(x > 0 ? x : 1)));
    const double m[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (m[i] * e >= x) return m[i] * e;
    return 10 * e;
}


/* Byte axis for values up to vmax: binary units, about five ticks. */
tl_axis vp_tl_byte_axis(double vmax) {
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    tl_axis a = {1, "B", 1, 1};
    if (vmax < 1) vmax = 1;
    int k = 0;
    while (k < 4 && vmax / a.unit >= 1024) a.unit *= 1024, k++;
    a.name = names[k];
    a.step = nice_step(vmax / a.unit / 5);
    if (k == 0 && a.step < 1) a.step = 1;
    a.top = ceil(vmax / a.unit / a.step - 1e-9) * a.step * a.unit;
    if (k < 4 && a.top / a.unit >= 1024) return vp_tl_byte_axis(a.top); /* "1.25 MiB", not "1250 KiB" */
    return a;
}

/* ---- output helpers ---- */

void vp_tl_put_xml(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20) fputc(*s, f); /* XML 1.0 forbids most control bytes */
        }
    }
}

void vp_tl_text(FILE *f, double x, double y, const char *cls, const char *anchor, const char *s) {
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" class=\"%s\" text-anchor=\"%s\">", x, y, cls, anchor);
    vp_tl_put_xml(f, s);
    fputs("</text>\n", f);
}

void vp_tl_line(FILE *f, double x1, double y1, double x2, double y2, const char *cls) {
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" class=\"%s\"/>\n", x1, y1, x2, y2, cls);
}

static const char *model_name(const vp_graph *g) {
    if (g->path && g->path[0]) return g->path;
    if (g->graph_name && g->graph_name[0]) return g->graph_name;
    return "plan";
}

/* ---- the page ---- */

static void write_head(const tl_ctx *c) {
    FILE *f = c->f;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.2f\" height=\"%.2f\" "
               "viewBox=\"0 0 %.2f %.2f\" font-family=\"Helvetica, Arial, sans-serif\">\n", TL_W, TL_H, TL_W, TL_H);
    fprintf(f, "<style type=\"text/css\"><![CDATA[\n"
               "text{fill:#222}.title{font-size:17px;font-weight:bold}.sub{font-size:12px;fill:#444}\n"
               ".h{font-size:13px;font-weight:bold}.tick{font-size:10px;fill:#555}.lbl{font-size:11px}\n"
               ".grid{stroke:#e4e4e4;stroke-width:1}.axis{stroke:#888;stroke-width:1}\n"
               ".arena{stroke:#222;stroke-width:1.5;stroke-dasharray:6,3}.budget{stroke:#d62728;stroke-width:1.5;"
               "stroke-dasharray:2,2}\n.peak{stroke:#d62728;stroke-width:1.2;stroke-dasharray:4,3}"
               ".peakt{font-size:11px;fill:#d62728;font-weight:bold}.bud{font-size:11px;fill:#d62728}\n"
               ".buf{stroke:#fff;stroke-width:0.4}\n");
    for (int k = 0; k < VP_CAT_COUNT; k++) fprintf(f, ".c%d{fill:%s}", k, cat_color[k]);
    fprintf(f, "\n]]></style>\n<rect x=\"0\" y=\"0\" width=\"%.2f\" height=\"%.2f\" fill=\"#ffffff\"/>\n", TL_W, TL_H);
}

static void write_title(const tl_ctx *c) {
    const vp_plan *p = c->p;
    char t[1024], a[32], lb[32], bud[32];
    snprintf(t, sizeof t, "Memory plan: %s", model_name(p->g));
    vp_tl_text(c->f, TL_LEFT, 30, "title", "start", t);
    double over = p->lower_bound_bytes > 0 ? 100.0 * ((double)p->arena_bytes / (double)p->lower_bound_bytes - 1) : 0;
    int len = snprintf(t, sizeof t, "%d steps, %d buffers | arena %s | lower bound %s (arena +%.1f%%)", p->n_steps,
                       p->n_buffers, vp_human_bytes(p->arena_bytes, a, sizeof a),
                       vp_human_bytes(p->lower_bound_bytes, lb, sizeof lb), over);
    if (p->budget_bytes > 0 && len > 0 && (size_t)len < sizeof t)
        snprintf(t + len, sizeof t - (size_t)len, " | budget %s, %s", vp_human_bytes(p->budget_bytes, bud, sizeof bud),
                 p->arena_bytes <= p->budget_bytes ? "fits" : "does NOT fit");
    vp_tl_text(c->f, TL_LEFT, 50, "sub", "start", t);
    if (p->device.name) {
        snprintf(t, sizeof t, "device %s, %lld-byte alignment, %s optimizer update", p->device.name,
                 (long long)p->device.alignment, p->fused_update ? "fused" : "separate");
        vp_tl_text(c->f, TL_LEFT, 66, "sub", "start", t);
    }
}

/* Horizontal grid and tick labels of a byte axis over [top, top + h]. */
void vp_tl_write_byte_axis(const tl_ctx *c, const tl_axis *a, double top, double h) {
    char s[48];
    int decimals = a->step < 1 ? 2 : a->step != floor(a->step) ? 1 : 0;
    for (double v = 0; v <= a->top + 0.5 * a->step * a->unit; v += a->step * a->unit) {
        double y = top + h * (1.0 - v / a->top);
        vp_tl_line(c->f, TL_LEFT, y, TL_LEFT + TL_PW, y, v == 0 ? "axis" : "grid");
        if (v == 0) snprintf(s, sizeof s, "0");
        else snprintf(s, sizeof s, "%.*f %s", decimals, v / a->unit, a->name);
        vp_tl_text(c->f, TL_LEFT - 8, y + 3.5, "tick", "end", s);
    }
}

/* Step ticks and labels hanging from y. */
void vp_tl_write_step_axis(const tl_ctx *c, double y) {
    char s[32];
    double step = nice_step(c->n / 10.0);
    if (step < 1) step = 1;
    for (double v = 0; v <= c->n; v += step) {
        vp_tl_line(c->f, vp_tl_x(c, v), y, vp_tl_x(c, v), y + 4, "axis");
        snprintf(s, sizeof s, "%.0f", v);
        vp_tl_text(c->f, vp_tl_x(c, v), y + 15, "tick", "middle", s);
    }
}

/* The stacked value of categories stack_order[0..k] in bucket j. */
static int64_t stack_at(const tl_ctx *c, int k, int j) {
    int64_t v = 0;
    for (int i = 0; i <= k; i++) v += live_at(c, stack_order[i], c->sample[j]);
    return v;
}

/* One category's band as a step-shaped path: upper edge left to right, lower edge back;
 * only changes are emitted, so flat stretches cost nothing. */
static void write_band(const tl_ctx *c, int k) {
    FILE *f = c->f;
    fprintf(f, "<path class=\"c%d\" d=\"M%.2f,%.2f", stack_order[k], vp_tl_x(c, 0), y1_of(c, (double)stack_at(c, k, 0)));
    for (int j = 1; j < c->nx; j++)
        if (stack_at(c, k, j) != stack_at(c, k, j - 1))
            fprintf(f, "H%.2fV%.2f", vp_tl_x(c, bucket_lo(c, j)), y1_of(c, (double)stack_at(c, k, j)));
    fprintf(f, "H%.2f", vp_tl_x(c, c->n));
    int64_t below = k ? stack_at(c, k - 1, c->nx - 1) : 0;
    fprintf(f, "V%.2f", y1_of(c, (double)below));
    for (int j = c->nx - 1; j > 0; j--) {
        int64_t prev = k ? stack_at(c, k - 1, j - 1) : 0;
        if (prev != below) fprintf(f, "H%.2fV%.2f", vp_tl_x(c, bucket_lo(c, j)), y1_of(c, (double)prev));
        below = prev;
    }
    fprintf(f, "H%.2fZ\"><title>%s</title></path>\n", vp_tl_x(c, 0), vp_category_name(stack_order[k]));
}

static int category_used(const tl_ctx *c, int cat) {
    for (int s = 0; s < c->n; s++)
        if (live_at(c, cat, s)) return 1;
    return 0;
}

/* Thin strip under the live-bytes chart: which phase each stretch of steps is in. */
static void write_phase_strip(const tl_ctx *c, double y) {
    int j0 = 0;
    for (int j = 1; j <= c->nx; j++) {
        int ph0 = c->p->g->nodes[c->p->steps[bucket_lo(c, j0)]].phase;
        if (j < c->nx && (int)c->p->g->nodes[c->p->steps[bucket_lo(c, j)]].phase == ph0) continue;
        int ph = ph0 >= 0 && ph0 <= VP_PHASE_COMM ? ph0 : 0;
        double x0 = vp_tl_x(c, bucket_lo(c, j0)), x1 = vp_tl_x(c, j < c->nx ? bucket_lo(c, j) : c->n);
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"7.00\" fill=\"%s\"><title>%s</title></rect>\n",
                x0, y, x1 - x0, phase_color[ph], phase_label[ph]);
        j0 = j;
    }
}

/* The arena and budget lines with their labels; a budget far above the arena would
 * squash the chart, so it is then only named at the top. */
static void write_limits(const tl_ctx *c) {
    char s[64], b[32];
    const vp_plan *p = c->p;
    double ya = y1_of(c, (double)p->arena_bytes);
    vp_tl_line(c->f, TL_LEFT, ya, TL_LEFT + TL_PW, ya, "arena");
    snprintf(s, sizeof s, "arena %s", vp_human_bytes(p->arena_bytes, b, sizeof b));
    vp_tl_text(c->f, TL_LEFT + TL_PW - 4, ya - 5, "lbl", "end", s);
    if (p->budget_bytes <= 0) return;
    snprintf(s, sizeof s, "budget %s", vp_human_bytes(p->budget_bytes, b, sizeof b));
    if ((double)p->budget_bytes > c->ymax1) return; /* the legend names it */
    double yb = y1_of(c, (double)p->budget_bytes);
    vp_tl_line(c->f, TL_LEFT, yb, TL_LEFT + TL_PW, yb, "budget");
    /* keep the two labels apart when the lines are close */
    double ty = fabs(yb - ya) < 16 && yb >= ya ? yb + 13 : yb - 5;
    vp_tl_text(c->f, TL_LEFT + TL_PW - 4, ty, "bud", "end", s);
}

static void write_peak(const tl_ctx *c) {
    const vp_plan *p = c->p;
    if (p->peak_step < 0 || p->peak_step >= c->n) return;
    char s[300], b[32];
    const vp_node *n = &p->g->nodes[p->steps[p->peak_step]];
    double x = vp_tl_x(c, p->peak_step + 0.5);
    vp_tl_line(c->f, x, TL_TOP1 - 16, x, TL_TOP2 + TL_PH2, "peak");
    snprintf(s, sizeof s, "peak: step %d, %s live (%.60s %.120s)", p->peak_step,
             vp_human_bytes(total_at(c, p->peak_step), b, sizeof b), n->op_type, n->name ? n->name : "");
    int right = x > TL_LEFT + TL_PW * 0.55;
    vp_tl_text(c->f, right ? x - 5 : x + 5, TL_TOP1 - 6, "peakt", right ? "end" : "start", s);
}

static void write_legend(const tl_ctx *c) {
    char s[96], b[32];
    double x = TL_LEFT + TL_PW + 24, y = TL_TOP1 + 4;
    int peak = c->p->peak_step >= 0 && c->p->peak_step < c->n ? c->p->peak_step : -1;
    snprintf(s, sizeof s, peak >= 0 ? "live at the peak (step %d)" : "live bytes", peak);
    vp_tl_text(c->f, x, y, "h", "start", s);
    for (int k = VP_CAT_COUNT - 1; k >= 0; k--) {
        int cat = stack_order[k];
        y += 19;
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"12.00\" height=\"12.00\" class=\"c%d\"/>\n", x, y - 10, cat);
        vp_tl_text(c->f, x + 18, y, "lbl", "start", vp_category_name((vp_category)cat));
        vp_tl_text(c->f, x + 172, y, "lbl", "end", peak >= 0 ? vp_human_bytes(live_at(c, cat, peak), b, sizeof b) : "");
    }
    y += 19;
    vp_tl_text(c->f, x + 18, y, "h", "start", "total");
    vp_tl_text(c->f, x + 172, y, "h", "end", vp_human_bytes(peak >= 0 ? total_at(c, peak) : 0, b, sizeof b));
    y += 30;
    vp_tl_line(c->f, x, y - 4, x + 12, y - 4, "arena");
    vp_tl_text(c->f, x + 18, y, "lbl", "start", "arena size");
    y += 18;
    vp_tl_line(c->f, x, y - 4, x + 12, y - 4, "budget");
    if (c->p->budget_bytes <= 0) snprintf(s, sizeof s, "budget (none set)");
    else if ((double)c->p->budget_bytes > c->ymax1)
        snprintf(s, sizeof s, "budget %s, off the scale", vp_human_bytes(c->p->budget_bytes, b, sizeof b));
    else snprintf(s, sizeof s, "budget");
    vp_tl_text(c->f, x + 18, y, "lbl", "start", s);
    y += 18;
    vp_tl_line(c->f, x + 6, y - 10, x + 6, y + 2, "peak");
    vp_tl_text(c->f, x + 18, y, "lbl", "start", "peak step");
    y += 30;
    vp_tl_text(c->f, x, y, "h", "start", "phases (strip under chart)");
    for (int i = 0; i <= VP_PHASE_COMM; i++) {
        y += 17;
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"12.00\" height=\"7.00\" fill=\"%s\"/>\n", x, y - 7,
                phase_color[i]);
        vp_tl_text(c->f, x + 18, y, "lbl", "start", phase_label[i]);
    }
    /* mixed precision's effect at a glance: what the low dtypes hold */
    int64_t by[VP_DTYPE_COUNT_];
    vp_report_dtype_bytes(c->p, by);
    y += 30;
    vp_tl_text(c->f, x, y, "h", "start", "bytes by dtype");
    for (int t = 0; t < VP_DTYPE_COUNT_; t++) {
        if (!by[t]) continue;
        y += 17;
        vp_tl_text(c->f, x + 18, y, "lbl", "start", vp_dtype_name((vp_dtype)t));
        vp_tl_text(c->f, x + 172, y, "lbl", "end", vp_human_bytes(by[t], b, sizeof b));
    }
}

static void write_live_chart(tl_ctx *c) {
    tl_axis a = vp_tl_byte_axis(fmax((double)c->max_live, (double)c->p->arena_bytes) * 1.04);
    if (c->p->budget_bytes > 0 && (double)c->p->budget_bytes <= 1.5 * a.top)
        a = vp_tl_byte_axis(fmax(a.top, (double)c->p->budget_bytes * 1.04));
    c->ymax1 = a.top;
    vp_tl_text(c->f, TL_LEFT, TL_TOP1 - 24, "h", "start", "Live bytes per step, by category");
    vp_tl_write_byte_axis(c, &a, TL_TOP1, TL_PH1);
    for (int k = 0; k < VP_CAT_COUNT; k++)
        if (category_used(c, stack_order[k])) write_band(c, k);
    write_limits(c);
    write_phase_strip(c, TL_TOP1 + TL_PH1 + 3);
    vp_tl_write_step_axis(c, TL_TOP1 + TL_PH1 + 10);
    write_legend(c);
}

static vp_status write_page(tl_ctx *c) {
    vp_status s = live_compute(c);
    if (!s) s = buckets_compute(c);
    if (s) return s;
    write_head(c);
    write_title(c);
    if (c->n == 0) {
        vp_tl_text(c->f, TL_LEFT, TL_TOP1 + 40, "h", "start", "empty plan: no steps");
        fputs("</svg>\n", c->f);
        return VP_OK;
    }
    write_live_chart(c);
    s = vp_tl_write_layout(c);
    write_peak(c);
    fputs("</svg>\n", c->f);
    return s;
}

vp_status vp_timeline_write(const vp_plan *p, const char *path, vp_error *err) {
    if (!p || !p->g) return vp_fail(err, VP_ERR_INVALID, "%s: no plan to draw", path);
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (s) return s;
    FILE *f = af.f;
    tl_ctx c = {.p = p, .f = f, .n = p->n_steps > 0 ? p->n_steps : 0};
    s = write_page(&c);
    free(c.live);
    free(c.sample);
    if (s) vp_atomic_file_abort(&af);
    if (s == VP_ERR_NOMEM) return vp_fail(err, s, "%s: out of memory drawing the timeline", path);
    return s ? s : vp_atomic_file_commit(&af, err);
}
