/* The forward pass as a chain of blocks cut at articulation points, and the dynamic
 * programs that choose one option per block under a memory budget (remat_dp.c).  Shared
 * by the strategies in remat.c; not part of the library's interface. */
#ifndef VP_REMAT_CHAIN_H
#define VP_REMAT_CHAIN_H

#include <stdint.h>

typedef struct block {
    int first, last;        /* forward positions, inclusive */
    int cut;                /* the value leaving the block, -1 for the last */
    int64_t cut_bytes;
    int64_t all_bytes;      /* activations the backward reads, produced in the block */
    int64_t sel_bytes;      /* of which the outputs of expensive ops */
    double fwd_seconds, cheap_seconds;
    uint64_t signature;     /* identical blocks share a signature */
} block;

/* Options of a block: keep all its activations, keep the expensive ones, keep none (its
 * output, the cut, still kept), or D: part of a longer segment recomputed from the last
 * kept cut, its own cut dropped too. */
enum { OPT_ALL = 0, OPT_SELECTIVE, OPT_NONE, N_OPTS, OPT_DROPPED = N_OPTS };
extern const char vp_chain_letter[N_OPTS + 1];

int64_t vp_chain_opt_kept(const block *b, int o);
double vp_chain_opt_time(const block *b, int o);

/* Two models of the step's peak for one option per block, each with its dynamic program
 * minimising recompute time under room bytes (1 when a choice was found).  The prefix
 * model follows the backward pass block by block; the working-set model bounds it by
 * everything kept plus the largest working set.  Neither is exact: the caller plans
 * the choices of both on the real arena and keeps the best that fits. */
int64_t vp_chain_peak(const block *b, int nb, const int *choice);
int vp_chain_dp_prefix(const block *b, int nb, int64_t room, int *choice);
int64_t vp_chain_peak_working_set(const block *b, int nb, const int *choice);
int vp_chain_dp_working_set(const block *b, int nb, int64_t room, int *choice);

#endif
