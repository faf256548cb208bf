/* The memory report of a plan: bytes per category, the peak step and what is live
 * there, the arena against its lower bound, and the verdict against a budget; as text
 * for people and JSON for scripts. */
#ifndef VP_REPORT_H
#define VP_REPORT_H

#include <stdio.h>

#include "json_writer.h"
#include "memory/plan.h"
#include "parallel/parallel.h"
#include "remat/remat.h"

/* One rank of a tensor-parallel step (planner/parallel): what was split and what it
 * sends a step. */
typedef struct vp_report_tp {
    int ranks, rank;
    int n_column, n_row, n_sliced; /* products split by columns, by rows; weights sliced */
    int n_embedding;               /* embeddings split by vocabulary rows */
    int vocab_parallel_loss;       /* the LM head split by vocabulary, the loss across ranks */
    int64_t vocab;                 /* that vocabulary (0: none split) */
    int n_gather, n_scatter;       /* --sp: all-gathers and reduce-scatters in the forward */
    int n_param_copy;              /* --sp: parameters whose gradients are all-reduced */
    int n_regather;                /* --sp: all-gathers run again in the backward */
    int n_seq_share, n_seq_gather; /* --sp: values whole on every rank cut to its positions; split
                                      ones gathered whole for ops that mix tokens */
    int allreduces_forward, allreduces_backward; /* every collective, by phase */
    int64_t payload_bytes;         /* the all-reduced tensors' bytes, a step */
    int64_t bytes_sent;            /* what this rank sends of them in a ring: 2(n-1)/n */
    double comm_seconds;           /* those bytes over the device profile's link */
    int n_replicated;              /* products left whole on every rank, and why (borrowed) */
    const vp_tp_replicated *replicated;
} vp_report_tp;

typedef struct vp_report_ctx {
    const char *model;
    const char *knobs;       /* "loss ce:logits, optimizer adamw, ..." */
    int top_live;            /* how many of the largest live buffers to list at the peak */
    const vp_remat_result *remat; /* checkpointing decisions, or NULL */
    const vp_report_tp *tp;  /* tensor parallelism, or NULL */
    /* more keys for the JSON report's top object (the joint search's table), or NULL */
    void (*extra)(vp_json *j, const void *arg);
    const void *extra_arg;
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
