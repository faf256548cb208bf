/* The process's memo of oneDNN workspace sizes, behind vp_dn_workspace_bytes_memo (dn.h).
 *
 * In: a key, every number oneDNN's answer depends on (dn.c composes it: the family's
 * signature, the tensors' dtypes, the threads the primitives are built for, the ISA
 * oneDNN dispatches to and its hints, its default math mode), and the bytes once a
 * context has built them.
 * Out: the bytes of a key seen before.  Keeps true: a key maps to what a fresh context
 * builds for it, so a plan is the same with the memo or without; one mutex guards the
 * table and its counters, so plans made on several threads at once share it; everything
 * is freed at exit (atexit, registered with the first size) or by vp_dn_memo_clear.
 *
 * Process-wide rather than per plan because the planner has no session to hang it on:
 * checkpointing, the search and the tensor-parallel ranks each build many plans of the
 * same convolutions through vp_plan_build, each of which used to make a context and its
 * primitives again. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dn_memo.h"

typedef struct memo_entry {
    int n_key;
    int64_t key[DN_MEMO_MAX_KEY];
    int64_t bytes;
} memo_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static memo_entry **table; /* open addressing on the key's hash */
static size_t cap, used;
static int64_t hits, misses;
static int registered; /* the atexit handler */

static uint64_t hash_key(const int64_t *key, int n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)key[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

static memo_entry **slot_of(const int64_t *key, int n) {
    size_t i = (size_t)hash_key(key, n) & (cap - 1);
    while (table[i] && (table[i]->n_key != n || memcmp(table[i]->key, key, (size_t)n * sizeof *key)))
        i = (i + 1) & (cap - 1);
    return &table[i];
}

int vp_dn_memo_find(const int64_t *key, int n, int64_t *bytes) {
    pthread_mutex_lock(&lock);
    memo_entry *e = cap ? *slot_of(key, n) : NULL;
    if (e) *bytes = e->bytes;
    if (e) hits++;
    else misses++;
    pthread_mutex_unlock(&lock);
    return e != NULL;
}

static void forget_all(void) {
    for (size_t i = 0; i < cap; i++) free(table[i]);
    free(table);
    table = NULL;
    cap = used = 0;
}

static void at_exit(void) {
    pthread_mutex_lock(&lock);
    forget_all();
    pthread_mutex_unlock(&lock);
}

/* Doubles the table; 1 when out of memory (the table stays as it was). */
static int grow(void) {
    size_t old_cap = cap;
    memo_entry **old = table;
    table = calloc(old_cap ? old_cap * 2 : 64, sizeof *table);
    if (!table) {
        table = old;
        return 1;
    }
    cap = old_cap ? old_cap * 2 : 64;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) *slot_of(old[i]->key, old[i]->n_key) = old[i];
    free(old);
    return 0;
}

void vp_dn_memo_put(const int64_t *key, int n, int64_t bytes) {
    if (n < 1 || n > DN_MEMO_MAX_KEY) return;
    pthread_mutex_lock(&lock);
    if (!registered) registered = !atexit(at_exit) ? 1 : -1;
    /* without the handler a size would outlive the process's last free: keep none */
    if (registered > 0 && ((used + 1) * 2 <= cap || !grow())) {
        memo_entry **slot = slot_of(key, n);
        if (!*slot && (*slot = malloc(sizeof **slot))) { /* another thread may have built it too */
            (*slot)->n_key = n;
            memcpy((*slot)->key, key, (size_t)n * sizeof *key);
            (*slot)->bytes = bytes;
            used++;
        }
    }
    pthread_mutex_unlock(&lock);
}

vp_dn_memo_counts vp_dn_memo_count(void) {
    pthread_mutex_lock(&lock);
    vp_dn_memo_counts c = {hits, misses, (int64_t)used};
    pthread_mutex_unlock(&lock);
    return c;
}

void vp_dn_memo_clear(void) {
    pthread_mutex_lock(&lock);
    forget_all();
    hits = misses = 0;
    pthread_mutex_unlock(&lock);
}
