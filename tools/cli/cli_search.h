/* plan --auto: the joint search (planner/search) run over the model on the command
 * line, its table printed for people and carried in the JSON report. */
#ifndef VP_CLI_SEARCH_H
#define VP_CLI_SEARCH_H

#include "cli.h"
#include "json_writer.h"
#include "search/search.h"

/* Runs the search over model at dims; prints the table and the reason unless quiet. */
vp_status cli_search(const char *model, const cli_pairs *dims, const vp_train_spec *spec, const vp_search_space *sp,
                     const vp_device_profile *dev, int64_t budget, int quiet, vp_search_result *r, vp_error *err);

/* The table as the JSON report's "search" key (a vp_report_ctx.extra hook; arg: the result). */
void cli_search_json(vp_json *j, const void *arg);

#endif
