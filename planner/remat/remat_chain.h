/* The forward pass as a chain of blocks cut at articulation points (remat_blocks.c),
 * each with a menu of what to keep, and the dynamic programs that choose one option per
 * block under a memory budget (remat_dp.c).  Internal to the planner's checkpointing.
 *
 * A block's menu runs from option 0, keep everything the backward reads, to the last,
 * which keeps the least.  Options may recompute the block's output (its cut) too: it is
 * then alive only while the next block's backward and this one's read it.  The options are the Pareto
 * frontier of kept bytes against recompute time over the sets of nodes to recompute:
 * every subset for small blocks, a greedy chain for large ones (Rockmate builds such
 * menus per block with an ILP).  Identical blocks (transformer layers) share one menu. */
#ifndef VP_REMAT_CHAIN_H
#define VP_REMAT_CHAIN_H

#include <stdint.h>

#include "ir/ir.h"
#include "memory/plan.h"

typedef struct block {
    int first, last;        /* forward positions, inclusive */
    int layer;              /* the layer of the model it is (module paths), -1 when none or several */
    int cut;                /* the value leaving the block, -1 for the last */
    int64_t cut_bytes;
    int64_t all_bytes;      /* activations the backward reads, produced in the block */
    double fwd_seconds;
    uint64_t signature;     /* identical blocks share a signature */
    int menu_owner;         /* the block whose menu arrays this one shares */
    int n_opts;
    int64_t *kept;          /* per option: bytes kept for the backward, the cut aside */
    int64_t *peak;          /* per option: the block's own live bytes at most during its backward */
    double *time;           /* per option: seconds of recompute */
    char *drops_cut;        /* per option: the cut is recomputed too, not kept */
    int none;               /* the option keeping the least with the cut kept: a segment's end */
    int *drop_start;        /* per option: its dropped nodes are drops[drop_start[o] .. drop_start[o+1]) */
    int *drops;             /* block-relative positions */
} block;

/* A block inside a longer segment recomputed from the last kept cut, its cut dropped. */
enum { OPT_ALL = 0, OPT_DROPPED = -1 };

typedef struct chain {
    int *fwd;   /* forward node ids in order */
    int nf;
    block *b;
    int nb;
    int n_layers;  /* layers the exporter's module paths name (0: none, cut by structure alone) */
    int n_layer_blocks; /* blocks that hold one whole layer each */
    char *pinned;  /* per value: shared by the layers, kept all step, no block's to drop */
    int *piece_cuts; /* the cuts in order, before layers were joined (-1: the last piece's) */
    int n_pieces;
} chain;

/* The chain: cut where one activation alone crosses; where the exporter names modules
 * (torch 2.x's name_scopes) and a list of them repeats (model.layers.0, .1, ...), the
 * pieces inside one layer joined, so each layer whose edges are such cuts is one block. */
vp_status vp_chain_find(const vp_graph *g, const vp_device_profile *dev, chain *c, vp_error *err);
/* Per forward position (fwd lists the forward nodes) the layer its module path puts it
 * in, or -1; returns the number of layers (remat_layers.c). */
int vp_chain_layers(const vp_graph *g, const int *fwd, int nf, int *layer_of);
/* Fills b's menu (remat_menu.c): fwd lists the forward nodes, pos maps a graph node to
 * its forward position (-1 when not forward); pinned values are kept by every option;
 * piece_cut (NULL: none) per forward position the cut of the piece of a joined block
 * ending there (-1: none), -2 where no piece ends: the pieces' options are combined. */
vp_status vp_chain_build_menu(const vp_graph *g, const vp_device_profile *dev, const int *fwd, const int *pos,
                              const char *pinned, const int *piece_cut, block *b, vp_error *err);
/* Frees the arrays of b's menu (not b). */
void vp_chain_free_menu(block *b);
/* Whether a backward node reads v; v's size in bytes. */
int vp_chain_read_by_backward(const vp_graph *g, int v);
int64_t vp_chain_value_bytes(const vp_graph *g, int v);
void vp_chain_free(chain *c);
/* keep[] per value from one option per block; NULL: every block keeps only its cut. */
void vp_chain_keep(const vp_graph *g, const chain *c, const int *choice, char *keep);
/* 'A' keep all, 'N' keep the cut only, 'D' dropped in a segment, 'S' in between;
 * lower case when the option recomputes the cut too. */
char vp_chain_letter(const block *b, int o);
static inline int vp_chain_none(const block *b) { return b->none; }
/* The cut's bytes when option o keeps it. */
static inline int64_t vp_chain_cut(const block *b, int o) { return o >= 0 && b->drops_cut[o] ? 0 : b->cut_bytes; }

/* Models of the step's peak for one option per block, each with its dynamic program
 * minimising recompute time under room bytes (1 when a choice was found).  The prefix
 * model follows the backward pass block by block; the working-set model bounds it by
 * everything kept plus the largest working set.  Neither is exact: the caller plans
 * the choices of both on the real arena and keeps the best that fits. */
int64_t vp_chain_peak(const block *b, int nb, const int *choice);
int vp_chain_dp_prefix(const block *b, int nb, int64_t room, int *choice);
/* The same with every cut kept: the choices of the models before cuts could be dropped,
 * which the real arena sometimes prefers at the tightest budgets. */
int vp_chain_dp_prefix_kept_cuts(const block *b, int nb, int64_t room, int *choice);
int64_t vp_chain_peak_working_set(const block *b, int nb, const int *choice);
int vp_chain_dp_working_set(const block *b, int nb, int64_t room, int *choice);

#endif
