/* The memory report of a plan: bytes per category, the peak step and what is live
 * there, the arena against its lower bound, and the verdict against a budget; as text
 * for people and JSON for scripts. */
#ifndef VP_REPORT_H
#define VP_REPORT_H

#include <stdio.h>

#include "memory/plan.h"
#include "remat/remat.h"

typedef struct vp_report_ctx {
    const char *model;
    const char *knobs;       /* "loss ce:logits, optimizer adamw, ..." */
    int top_live;            /* how many of the largest live buffers to list at the peak */
    const vp_remat_result *remat; /* checkpointing decisions, or NULL */
} vp_report_ctx;

void vp_report_text(FILE *f, const vp_plan *p, const vp_report_ctx *c);
void vp_report_json(FILE *f, const vp_plan *p, const vp_report_ctx *c);
/* The arena's bytes by dtype, each buffer with storage of its own counted once (the
 * report's "memory by dtype", the JSON's dtype_bytes, the timeline's legend). */
void vp_report_dtype_bytes(const vp_plan *p, int64_t by[VP_DTYPE_COUNT_]);

/* "16GiB", "800MB", "1.5G", "123456" (bytes) -> bytes.  KB, MB, GB, TB are powers of
 * 1000; KiB, MiB, GiB, TiB and the bare K, M, G, T are powers of 1024. */
int vp_parse_size(const char *s, int64_t *out);
/* 1536 -> "1.5 KiB" */
const char *vp_human_bytes(int64_t b, char *buf, size_t len);

#endif
