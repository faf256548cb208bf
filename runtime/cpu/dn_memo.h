/* Inside the oneDNN fast path: the process's memo of workspace sizes (dn_memo.c), which
 * dn.c keys and fills.  The public side (counts, clearing) is in dn.h. */
#ifndef VP_DN_MEMO_H
#define VP_DN_MEMO_H

#include <stdint.h>

#include "dn.h"

enum { DN_MEMO_MAX_KEY = 64 };

/* 1 and *bytes when key (n numbers) is known; else 0.  Counts a hit or a miss. */
int vp_dn_memo_find(const int64_t *key, int n, int64_t *bytes);

/* Remembers key's bytes (nothing when out of memory: the next plan asks oneDNN again). */
void vp_dn_memo_put(const int64_t *key, int n, int64_t bytes);

#endif
