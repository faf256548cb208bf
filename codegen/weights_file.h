/* The weights file: the persistent part of a plan's arena (parameters, constants,
 * optimizer and running state), written by `codegen` beside the generated step (the
 * initial contents), by the generated NAME_save and by `run --save-weights` (after
 * training), and read by the generated NAME_init and by `export`.
 *
 * Format (runtime/vplanrt.h): magic, version, the plan's checksum, the payload length,
 * then each persistent buffer's bytes in plan order, so two runs of the same plan are
 * compared with cmp, and a file is never loaded into another plan's arena. */
#ifndef VP_WEIGHTS_FILE_H
#define VP_WEIGHTS_FILE_H

#include <stdint.h>

#include "memory/plan.h"

/* Buffer b holds state that outlives a step and is not fed by the caller: a parameter,
 * a constant or carried state (its own storage, not an alias, not an input). */
int vp_weights_persistent(const vp_plan *p, int b);
/* The payload length: the persistent buffers' bytes. */
int64_t vp_weights_payload_bytes(const vp_plan *p);

/* Writes the file; data[b] is buffer b's bytes on the host (read for persistent b). */
vp_status vp_weights_write(const vp_plan *p, uint64_t plan_checksum, const void *const *data, const char *path,
                           vp_error *err);
/* Reads a file written for this plan; data[b] (persistent b) points into *blob, heap,
 * owned by the caller. */
vp_status vp_weights_read(const vp_plan *p, uint64_t plan_checksum, const char *path, uint8_t **blob,
                          const void **data, vp_error *err);

#endif
