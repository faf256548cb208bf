/* The memory timeline's page state and drawing helpers, shared by its two files:
 * timeline.c (the data, the live-bytes chart, the page) and timeline_layout.c (the
 * arena layout).  Internal to codegen. */
#ifndef VP_TIMELINE_INTERNAL_H
#define VP_TIMELINE_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "plan_artifacts.h"
#include "report.h"

#define TL_MAX_X 2000    /* stack samples along x */
#define TL_W 1280.0      /* canvas */
#define TL_H 930.0
#define TL_LEFT 96.0     /* plot area, both charts */
#define TL_PW 930.0
#define TL_TOP1 112.0    /* live-bytes chart */
#define TL_PH1 320.0
#define TL_TOP2 540.0    /* arena layout */
#define TL_PH2 320.0
#define TL_CELL 2.0      /* grid pitch for layout rectangles too small to draw alone */
#define TL_MIN_AREA 8.0  /* px^2; rectangles never overlap, so at most plot area / 8 of them */

typedef struct tl_ctx {
    const vp_plan *p;
    FILE *f;
    int n;            /* steps */
    int nx;           /* stack samples */
    int64_t *live;    /* live[c * (n + 1) + s]: bytes of category c live at step s */
    int *sample;      /* bucket -> its step of highest total */
    int64_t max_live; /* highest total */
    double ymax1;     /* top of the live-bytes axis, bytes */
    double ymax2;     /* top of the layout axis, bytes */
} tl_ctx;

typedef struct tl_axis {
    double unit;      /* bytes per displayed unit */
    const char *name; /* B, KiB, ... */
    double step;      /* tick distance, displayed units */
    double top;       /* axis top, bytes */
} tl_axis;

/* A buffer that owns its storage and lives at least one step (aliases share their root's). */
int vp_tl_is_root(const vp_buffer *b);
/* b's category as an index of the colour and stack tables. */
int vp_tl_cat_index(const vp_buffer *b);
/* x of a step, y of bytes on the layout chart. */
double vp_tl_x(const tl_ctx *c, double step);
double vp_tl_y2(const tl_ctx *c, double bytes);
/* Byte axis for values up to vmax: binary units, about five ticks. */
tl_axis vp_tl_byte_axis(double vmax);
/* s as XML character data. */
void vp_tl_put_xml(FILE *f, const char *s);
void vp_tl_text(FILE *f, double x, double y, const char *cls, const char *anchor, const char *s);
void vp_tl_line(FILE *f, double x1, double y1, double x2, double y2, const char *cls);
/* A byte axis from top over height h; the step axis at y. */
void vp_tl_write_byte_axis(const tl_ctx *c, const tl_axis *a, double top, double h);
void vp_tl_write_step_axis(const tl_ctx *c, double y);
/* The lower chart: one rectangle per buffer, small ones merged into a grid. */
vp_status vp_tl_write_layout(tl_ctx *c);

#endif
