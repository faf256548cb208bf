/* The arena layout chart of the memory timeline (timeline.c draws the rest of the page).
 *
 * In: the page state with its plan.  Out: below the live-bytes chart, one rectangle per
 * buffer from its first step to its last and from its offset to offset + size.  Keeps
 * the file bounded: rectangles too small to see are summed into a coarse grid, drawn a
 * run of cells at a time. */
#include <math.h>
#include <stdlib.h>

#include "timeline_internal.h"

/* ---- the arena layout ---- */

typedef struct tl_grid {
    int w, h;
    float *cover; /* cover[(row * w + col) * VP_CAT_COUNT + cat]: px^2 of small buffers */
} tl_grid;

/* Spreads a rectangle over the grid cells it overlaps, by overlapped area. */
static void grid_add(tl_grid *g, double x, double y, double w, double h, int cat) {
    int c0 = (int)(x / TL_CELL), c1 = (int)((x + w) / TL_CELL), r0 = (int)(y / TL_CELL), r1 = (int)((y + h) / TL_CELL);
    for (int r = r0 < 0 ? 0 : r0; r <= r1 && r < g->h; r++) {
        double oy = fmin(y + h, (r + 1) * TL_CELL) - fmax(y, r * TL_CELL);
        for (int col = c0 < 0 ? 0 : c0; col <= c1 && col < g->w; col++) {
            double ox = fmin(x + w, (col + 1) * TL_CELL) - fmax(x, col * TL_CELL);
            if (ox > 0 && oy > 0) g->cover[((size_t)r * (size_t)g->w + (size_t)col) * VP_CAT_COUNT + (size_t)cat] += (float)(ox * oy);
        }
    }
}

/* A cell's dominant category and how solid to draw it (0: empty). */
static int grid_cell(const tl_grid *g, int r, int col, double *opacity) {
    const float *v = g->cover + ((size_t)r * (size_t)g->w + (size_t)col) * VP_CAT_COUNT;
    int best = 0;
    double total = 0;
    for (int k = 0; k < VP_CAT_COUNT; k++) {
        total += v[k];
        if (v[k] > v[best]) best = k;
    }
    double fill = total / (TL_CELL * TL_CELL);
    *opacity = fill <= 0 ? 0 : fill >= 0.5 ? 1.0 : fill >= 0.15 ? 0.65 : 0.35;
    return best;
}

/* Cells in runs of one category and opacity per row, one rectangle each. */
static void grid_write(const tl_ctx *c, const tl_grid *g) {
    for (int r = 0; r < g->h; r++) {
        for (int col = 0; col < g->w;) {
            double op, op2;
            int cat = grid_cell(g, r, col, &op), end = col + 1;
            while (end < g->w && grid_cell(g, r, end, &op2) == cat && op2 == op) end++;
            if (op > 0)
                fprintf(c->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" class=\"c%d\" opacity=\"%.2f\"/>\n",
                        TL_LEFT + col * TL_CELL, TL_TOP2 + r * TL_CELL, (end - col) * TL_CELL, TL_CELL, cat, op);
            col = end;
        }
    }
}

static void write_buffer_rect(const tl_ctx *c, const vp_buffer *b, double x, double y, double w, double h) {
    char s[48];
    const vp_value *v = b->value >= 0 && b->value < c->p->g->n_values ? &c->p->g->values[b->value] : NULL;
    fprintf(c->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" class=\"c%d%s\"><title>", x, y, w, h,
            vp_tl_cat_index(b), w > 3 && h > 3 ? " buf" : "");
    vp_tl_put_xml(c->f, v && v->name ? v->name : "?");
    fprintf(c->f, ": %s, %s, steps %d-%d, offset %lld</title></rect>\n", vp_human_bytes(b->size, s, sizeof s),
            vp_category_name(b->cat), b->first, b->last, (long long)b->offset);
}

vp_status vp_tl_write_layout(tl_ctx *c) {
    tl_axis a = vp_tl_byte_axis((double)c->p->arena_bytes);
    c->ymax2 = a.top;
    vp_tl_text(c->f, TL_LEFT, TL_TOP2 - 10, "h", "start", "Arena layout: offset against lifetime, one rectangle per buffer");
    vp_tl_write_byte_axis(c, &a, TL_TOP2, TL_PH2);
    tl_grid g = {(int)ceil(TL_PW / TL_CELL), (int)ceil(TL_PH2 / TL_CELL), NULL};
    g.cover = calloc((size_t)g.w * (size_t)g.h * VP_CAT_COUNT, sizeof *g.cover);
    if (!g.cover) return VP_ERR_NOMEM;
    for (int i = 0; i < c->p->n_buffers; i++) {
        const vp_buffer *b = &c->p->buffers[i];
        if (!vp_tl_is_root(b) || b->cat == VP_CAT_HOST) continue;
        if (b->first < 0 || b->first >= c->n) continue;
        double x = vp_tl_x(c, b->first), w = vp_tl_x(c, b->last < c->n ? b->last + 1 : c->n) - x;
        double y = vp_tl_y2(c, (double)(b->offset + b->size)), h = vp_tl_y2(c, (double)b->offset) - y;
        /* thinner than a pixel, antialiasing would wash a stack of them out: the grid
         * sums their coverage instead */
        if (w * h >= TL_MIN_AREA && w >= 1 && h >= 1) write_buffer_rect(c, b, x, y, w, h);
        else grid_add(&g, x - TL_LEFT, y - TL_TOP2, w, h, vp_tl_cat_index(b));
    }
    grid_write(c, &g);
    free(g.cover);
    double ya = vp_tl_y2(c, (double)c->p->arena_bytes);
    vp_tl_line(c->f, TL_LEFT, ya, TL_LEFT + TL_PW, ya, "arena");
    vp_tl_write_step_axis(c, TL_TOP2 + TL_PH2);
    vp_tl_text(c->f, TL_LEFT + TL_PW / 2, TL_TOP2 + TL_PH2 + 34, "lbl", "middle", "step");
    vp_tl_text(c->f, TL_LEFT + TL_PW + 24, TL_TOP2 + 4, "h", "start", "colours as above;");
    vp_tl_text(c->f, TL_LEFT + TL_PW + 24, TL_TOP2 + 20, "lbl", "start", "hover a buffer for its name,");
    vp_tl_text(c->f, TL_LEFT + TL_PW + 24, TL_TOP2 + 36, "lbl", "start", "size, lifetime and offset");
    return VP_OK;
}
