/* The plan file: writing (here) and reading (plan_load.c beside it) model.vplan.
 *
 * On disk: the 6 bytes "VPLAN\n", a little-endian u16 format version, a u64 payload
 * length, the payload's u64 FNV-1a checksum, then the payload, a vplan.Plan protobuf
 * (planner/plan/vplan.proto).  A truncated file, a bad checksum or another version is
 * refused with a message that says which.
 *
 * Version 2 carries the host block of optimizer-state offload (planner/train/offload.h):
 * Summary.host_bytes, and the buffers of category VP_CAT_HOST placed in it (their
 * offsets count from the block's start, not the arena's).  Writers write version 2;
 * readers read 1 (never a host block) and 2, and refuse a host buffer outside the block,
 * a host block without a host buffer, and an alias group split between the two. */
#ifndef VP_PLAN_FILE_H
#define VP_PLAN_FILE_H

#include "memory/plan.h"

#define VP_PLAN_MAGIC "VPLAN\n"
#define VP_PLAN_VERSION 2
#define VP_PLAN_VERSION_OLDEST 1 /* the oldest version read: no host block */
#define VP_PLAN_HEADER_BYTES 24

typedef struct vp_knob {
    const char *name;
    const char *value;
} vp_knob;

vp_status vp_plan_write(const vp_plan *p, const char *model, const vp_knob *knobs, int n_knobs, const char *path,
                        vp_error *err);

uint64_t vp_fnv1a64(const uint8_t *p, size_t n);

#endif
