/* Loading the models in models/ with their meta.json for tests: dims bound, shapes
 * inferred, optionally the training step built. */
#ifndef VP_TEST_MODEL_UTIL_H
#define VP_TEST_MODEL_UTIL_H

#include "ir/ir.h"
#include "memory/plan.h"
#include "remat/remat.h"
#include "mini_json.h"
#include "train/training.h"

typedef struct test_model {
    char name[64];
    char dir[4096];
    mj *meta;
    vp_graph *g;
    vp_training t;
    char freeze[1024];   /* regex of the model's buffers (not trainable in torch) */
} test_model;

/* Lists model names (folders of models/ with a meta.json), sorted; returns the count. */
int test_model_list(char names[][64], int max);
/* The same for the folders of dir that hold a meta.json. */
int test_model_list_in(const char *dir, char names[][64], int max);

/* Loads models/<name>: meta, graph, dims, inference.  Then, when spec is not NULL,
 * builds the training step (spec->freeze is set to the model's buffers). */
vp_status test_model_load(test_model *m, const char *name, vp_train_spec *spec, vp_error *err);
/* The same for dir/<name> (a folder with meta.json, model.onnx and fixtures/). */
vp_status test_model_load_in(test_model *m, const char *dir, const char *name, vp_train_spec *spec, vp_error *err);
void test_model_free(test_model *m);

/* Loads models/<name> as a training step with the ce:logits loss and optimizer opt
 * ("sgd", "momentum", "adam", "adamw"). */
vp_status test_model_load_step(test_model *m, const char *name, const char *opt, vp_error *err);

/* Feeds the fixture batch (x.pb, labels.pb) to an executor of m's training step. */
struct vp_exec;
vp_status test_model_feed(struct vp_exec *x, const test_model *m, vp_error *err);

/* Copies the state a step carries to the next (parameters, optimizer state, loss scale). */
vp_status test_model_carry(struct vp_exec *x, const test_model *m, vp_error *err);
/* The loss of the step x last ran. */
vp_status test_model_loss(struct vp_exec *x, const test_model *m, double *loss, vp_error *err);
/* Runs `steps` steps on x (already fed), each step's loss into losses[k], carrying the
 * state from each step to the next. */
vp_status test_model_run_steps(struct vp_exec *x, const test_model *m, int steps, double *losses, vp_error *err);

/* models/<name>'s training step (ce:logits loss, optimizer opt, optimizer state offloaded
 * when offload is set) planned without checkpointing for device profile `device`. */
typedef struct test_planned {
    test_model m;
    vp_graph *g; /* the planned graph: m.g, or a copy freed with it */
    vp_plan p;
} test_planned;
vp_status test_model_plan(test_planned *pl, const char *name, const char *opt, int offload, const char *device,
                          vp_error *err);
/* dir/<name>'s step of spec (its freeze set to the model's buffers, as test_model_load_in
 * does) through the pipeline's verified plan on dev, with checkpointing remat under
 * budget (0: none). */
vp_status test_model_plan_in(test_planned *pl, const char *dir, const char *name, vp_train_spec *spec,
                             const vp_device_profile *dev, int fused, int64_t budget, vp_remat_kind remat, vp_error *err);
void test_planned_free(test_planned *pl);

/* The pipeline's plan stage (vp_pipeline_plan: checkpointing, schedule, liveness,
 * workspaces, offsets, verify) on a step built already: a test that plans one step
 * several ways (devices, fused or separate updates, budgets) goes through the same passes
 * as the command line.  No checkpointing: the plan is of g itself; *p is the caller's to
 * free, on failure too. */
vp_status test_plan_step(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, vp_plan *p,
                         vp_error *err);
/* The same with checkpointing (vp_plan_with_remat_opts's arguments): *planned is g or a
 * copy the caller frees. */
vp_status test_plan_step_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                               int64_t budget, vp_remat_kind kind, const vp_remat_opts *opts, vp_graph **planned,
                               vp_plan *p, vp_remat_result *rr, vp_error *err);

/* Makes value id of g a float32 initializer of that shape owning fresh, unfilled data
 * (*data, for the caller to fill); returns id. */
int test_f32_initializer(vp_graph *g, int id, int rank, const int64_t *dims, float **data);

/* Reads models/<name>/fixtures/<file> (a TensorProto). */
vp_status test_model_fixture(const test_model *m, const char *file, vp_tensor *out, vp_error *err);

/* Runs `steps` training steps of m's graph naively and of plan p (whose graph may be a
 * checkpointed copy with the same value ids), feeding the fixture batch, and compares
 * every step's loss and, at the end, every value in ids, bit for bit.  Returns 1 when
 * identical, 0 when not (why names the first difference), -1 on an error (why). */
struct vp_plan;
int test_compare_planned(test_model *m, const struct vp_plan *p, int steps, const int *ids, int n_ids, char *why,
                         size_t why_len);

/* Runs `steps` steps of plan p (built in process or read from a file) on backend b,
 * feeding m's fixture batch by input name, and writes each step's loss to losses (a
 * float32 loss widened exactly).  Returns 0, or -1 with why. */
struct vp_backend;
int test_plan_losses(const test_model *m, const struct vp_plan *p, struct vp_backend *b, int steps, double *losses,
                     char *why, size_t why_len);

/* For torch.onnx exports committed with fixtures under DATA_DIR/NAME (meta.json with
 * "dims" and "lr", model.onnx, fixtures/): loads the model as an SGD training step with
 * the ce:logits loss. */
vp_status test_model_load_fixture_dir(test_model *m, const char *data_dir, const char *name, vp_error *err);

/* Loads each fixture model in data_dir (at least at_least of them, else a failed check),
 * calls each(m) on it, frees it; a model that does not load is a failed check naming it.
 * Returns check_summary(), the test's exit code. */
/* Checks that the step trains exactly the parameters meta.json's "params" names (torch's
 * named_parameters) and that training printed no warning. */
void test_model_check_params(test_model *m);
int test_model_each_fixture(const char *data_dir, int at_least, void (*each)(test_model *m));
/* Checks the step against the fixtures: logits.pb, grads/<param>.pb after the first
 * step, losses.pb over the steps (logits and losses within 1e-5 relative to each
 * tensor's scale, gradients within grad_tol). */
void test_model_check_torch(test_model *m, double grad_tol);
/* Checks that m's plan verifies and runs `steps` steps bit-identically to naive. */
void test_model_check_planned(test_model *m, int steps);
/* max |got - want| / max |want| */
double test_rel_error(const vp_tensor *got, const vp_tensor *want);
/* The id of the value named name, -1 when none. */
int test_value_named(const vp_graph *g, const char *name);

#endif
