/* What the strip search shares between its recursion (arena_strip.c) and its sweep for a
 * strip (arena_strip_sweep.c): step results, the search's state, a set of 128-bit keys.
 * See arena_strip.c for the method. */
#ifndef VP_ARENA_STRIP_INTERNAL_H
#define VP_ARENA_STRIP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* what a search step returns: no assignment (proved), one found and written, out of work
 * or memory, or (a sweep) out of its round's budget */
enum { STRIP_FAIL = 0, STRIP_DONE = 1, STRIP_OUT = -1, STRIP_PAUSE = 2 };

/* Work is counted at about VP_ARENA_EXACT_WORK_PER_SECOND's rate: 2 units per step a
 * sweep state's key reads and per candidate it tries, 8 per item a level copies and
 * sorts, 32 per item a sweep lists (measured on a quiet machine: 1.25G units in 4.1 to
 * 4.7 s on a perfect packing it does not solve; perfect_400 in 6.6M, 0.02 to 0.04 s). */

/* frames of the recursion (solve, sweep, pick) before the search gives up: the stack of
 * a planning thread, not the work, is what this protects */
#define STRIP_MAX_DEPTH 20000

/* A pass's orders (arena_strip.c runs four passes in turn): the sweep takes each step's
 * biggest or smallest buffers first; a level's sweeps run through its buffers thinnest
 * first, thickest first, or alternating (the thinnest, the thickest, the next thinnest,
 * ...). */
typedef struct strip_order {
    int small_first;
    enum { STRIP_LEAD_THIN, STRIP_LEAD_THICK, STRIP_LEAD_ALTERNATE } lead;
} strip_order;

typedef struct strip_key {
    uint64_t a, b;
} strip_key;

/* a set of 128-bit keys, open addressing (an all-zero key marks an empty slot, so every
 * key has its low bit set) */
typedef struct strip_keyset {
    strip_key *slot;
    size_t cap, used;
} strip_keyset;

/* a lossy set of 128-bit keys: a fixed table of buckets of two, where a new key pushes
 * out the older of a full bucket (a key forgotten costs work again, never an answer) */
typedef struct strip_cache {
    strip_key *slot; /* 2 * (mask + 1) keys */
    size_t mask;
} strip_cache;

/* items not yet placed on the search's path from the piece's root, and the offset they
 * were to sit on */
struct strip_pending {
    const int *S;
    int n;
    int64_t floor;
};

/* A point of the search kept for its completion (arena_strip_fallback.c): the offsets of
 * the items placed, and the pending groups, innermost first, each with its floor. */
typedef struct strip_snap {
    int64_t *off;           /* per item (those pending: stale) */
    unsigned char *pending; /* per item */
    int *items, *start;     /* group g: items[start[g] .. start[g + 1]) */
    int64_t *floor;         /* per group */
    int groups;             /* -1: none taken */
} strip_snap;

typedef struct strip {
    int64_t *lo, *hi, *sz, *off; /* per item of the piece */
    uint64_t *z1, *z2;           /* a random key per item: a set's key is their xor */
    unsigned char *mark;         /* scratch: the items of a strip, while its rest is listed */
    strip_keyset failed;         /* (set, height) with no assignment of strips */
    strip_keyset solved;         /* blocks (set, height) that have one */
    strip_keyset placed;         /* levels (set, height) the placement search left undecided */
    strip_cache dead;            /* sweep states with no flat completion (arena_strip_sweep.c) */
    int64_t work, limit;
    int depth, oom;
    int m;                       /* items of the piece */
    strip_order order;           /* the pass's */
    /* the best assignment above the bound met on the way (arena_strip_fallback.c) */
    struct strip_pending *pend;  /* a stack of lists of items pending on the path */
    int npend, pend_cap;
    int relative;                /* inside a block's check, whose offsets are not the piece's */
    int64_t fb_pending;          /* the least area (bytes x steps) pending at a snapshot so far */
    int64_t fb_top, *fb_off;     /* the lowest completion and its offsets */
    strip_snap snap, best;       /* scratch; the point behind the lowest completion */
} strip;

/* qsort's order on int64_t */
static inline int vp_strip_cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* a 64-bit mixer (splitmix64's finaliser) for keys */
uint64_t vp_strip_mix(uint64_t z);
int vp_strip_keyset_has(const strip_keyset *s, strip_key k);
/* 0, or -1 when out of memory */
int vp_strip_keyset_add(strip_keyset *s, strip_key k);
int vp_strip_cache_has(const strip_cache *c, strip_key k);
void vp_strip_cache_add(strip_cache *c, strip_key k);
/* the key of a set of items at a height: order-free */
strip_key vp_strip_set_key(const strip *st, const int *S, int ns, int64_t h);

/* A level's steps in one sweep direction, the same for every buffer it sweeps through
 * and every round (arena_strip_sweep.c builds them once a level and pass). */
typedef struct strip_steps {
    int built;
    int E;              /* steps strictly inside the span where something starts or ends */
    int64_t *ev;        /* their times, in the sweep's direction */
    int *eend;          /* per position in S: the index of its end step (E: at the span's end) */
    int *sidx;          /* per position in S: the index of its first step (-1: the span's start) */
    int *cs, *cl;       /* per step: the positions starting there, in the pass's size order */
    int64_t *suf;       /* per entry of cl: its bytes and those after it at its step */
    uint64_t *za, *zb;  /* per step: the keys of the items that start there or later */
} strip_steps;

/* 0, or -1 out of memory (st->oom set) */
int vp_strip_steps_build(strip *st, const int *S, int ns, int64_t T0, int64_t T1, int rev, strip_steps *sp);
void vp_strip_steps_free(strip_steps *sp);

/* Items S, flat at h over [t0, t1): an assignment of strips and time cuts into st->off,
 * from base up (arena_strip.c). */
int vp_strip_solve(strip *st, const int *S, int ns, int64_t t0, int64_t t1, int64_t h, int64_t base);

/* The strips of S (flat at H over [T0, T1)) through item x, which starts at T0 (rev: ends
 * at T1 and the sweep runs back; sp: S's steps in that direction): each complete one is
 * tried (it at base, the rest above) unless in `tried`; STRIP_DONE when one works,
 * STRIP_FAIL when none does, STRIP_PAUSE when `budget` sweep nodes ran out first
 * (arena_strip_sweep.c). */
int vp_strip_through(strip *st, const int *S, int ns, int64_t T0, int64_t T1, int64_t H, int64_t base, int x, int rev,
                     const strip_steps *sp, int64_t budget, strip_keyset *tried);

/* The stack of pending groups (arena_strip_fallback.c): push returns -1 when out of
 * memory.  A snapshot, taken when a strip is placed on the path, completes the placed
 * items when the area pending is the least yet, and keeps the lowest completion. */
int vp_strip_pend_push(strip *st, const int *S, int ns, int64_t floor);
void vp_strip_pend_pop(strip *st);
void vp_strip_snapshot(strip *st);
/* the snapshot behind the best completion again, each group with the complete search
 * for up to `exact` units */
void vp_strip_refine(strip *st, int64_t exact);
int vp_strip_snap_alloc(strip_snap *sn, int m); /* 0, or -1 out of memory */
void vp_strip_snap_free(strip_snap *sn);

/* Items S, flat at H over their span with no time cut and no item spanning it: the
 * placement search of arena_exact_search.c at capacity H, up to `work` units for each of
 * its orders (arena_strip_place.c).  STRIP_PAUSE when undecided. */
int vp_strip_place(strip *st, const int *S, int ns, int64_t H, int64_t base, int64_t work);

#endif
