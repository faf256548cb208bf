/* The plan file: writing (here) and reading (runtime/plan_load.c) model.vplan.
 *
 * On disk: the 6 bytes "VPLAN\n", a little-endian u16 format version, a u64 payload
 * length, the payload's u64 FNV-1a checksum, then the payload, a vplan.Plan protobuf
 * (codegen/vplan.proto).  A truncated file, a bad checksum or another version is
 * refused with a message that says which. */
#ifndef VP_PLAN_FILE_H
#define VP_PLAN_FILE_H

#include "memory/plan.h"

#define VP_PLAN_MAGIC "VPLAN\n"
#define VP_PLAN_VERSION 1
#define VP_PLAN_HEADER_BYTES 24

typedef struct vp_knob {
    const char *name;
    const char *value;
} vp_knob;

vp_status vp_plan_write(const vp_plan *p, const char *model, const vp_knob *knobs, int n_knobs, const char *path,
                        vp_error *err);

uint64_t vp_fnv1a64(const uint8_t *p, size_t n);

#endif
