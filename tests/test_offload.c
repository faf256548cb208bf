/* Optimizer-state offload (planner/train/offload.h) on the bundled mlp, cnn and GPT with
 * Adam: the device holds no optimizer state and its arena shrinks by at least the
 * state's bytes; the host block holds them; the plan verifies (host and device checked
 * apart); planned, the offloaded step runs bit for bit as it does naively; and its
 * losses are those of the step without offload, bit for bit (the copies are exact).
 * The plan file carries the host block (format version 2): written and read back, the
 * plan verifies and trains to the in-process plan's losses bit for bit, and a damaged
 * host block (a short block, a host buffer said to be in the arena, a version-1 header)
 * is refused naming the buffer or the version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "exec.h"
#include "memory/verify.h"
#include "model_util.h"
#include "plan/plan_file.h"
#include "plan/plan_load.h"

#define STEPS 3

/* The two steps' losses over STEPS steps, run naively (each plan is checked against its
 * own naive run by test_compare_planned), bit for bit. */
static int same_losses(test_model *a, test_model *b) {
    vp_backend *be = vp_backend_cpu_new_with(1);
    vp_exec *xa = NULL, *xb = NULL;
    vp_error err;
    int same = 1;
    vp_status s = vp_exec_new(a->g, be, &xa, &err);
    if (!s) s = vp_exec_new(b->g, be, &xb, &err);
    if (!s) s = test_model_feed(xa, a, &err);
    if (!s) s = test_model_feed(xb, b, &err);
    for (int k = 0; k < STEPS && !s; k++) {
        s = vp_exec_run(xa, &err);
        if (!s) s = vp_exec_run(xb, &err);
        vp_tensor la = {0}, lb = {0};
        if (!s) s = vp_exec_get(xa, a->t.loss, &la, &err);
        if (!s) s = vp_exec_get(xb, b->t.loss, &lb, &err);
        if (!s) same &= !memcmp(la.data, lb.data, vp_tensor_nbytes(&la));
        free(la.data);
        free(lb.data);
        for (int c = 0; c < a->t.n_carry && !s; c++) s = vp_exec_copy_value(xa, a->t.carry[c].from, a->t.carry[c].to, &err);
        for (int c = 0; c < b->t.n_carry && !s; c++) s = vp_exec_copy_value(xb, b->t.carry[c].from, b->t.carry[c].to, &err);
    }
    if (s) printf("  %s\n", err.msg);
    vp_exec_free(xa);
    vp_exec_free(xb);
    vp_backend_free(be);
    return !s && same;
}

static void check_model(const char *name) {
    test_planned on, off;
    vp_error err;
    vp_status s = test_model_plan(&off, name, "adamw", 0, "cpu", &err);
    if (!s) s = test_model_plan(&on, name, "adamw", 1, "cpu", &err);
    if (s) {
        check(0, "%s: plan with and without offload: %s", name, err.msg);
        test_planned_free(&off);
        test_planned_free(&on);
        return;
    }
    int64_t state = on.m.t.offloaded_state_bytes, saved = off.p.arena_bytes - on.p.arena_bytes;
    check(on.m.t.n_offloaded == on.m.t.n_params && on.p.category_bytes[VP_CAT_OPTIMIZER_STATE] == 0 && saved >= state &&
              on.p.host_bytes >= state && off.p.host_bytes == 0,
          "%s: %d updates on the host; device arena %lld -> %lld bytes (%lld less, the state is %lld); host block %lld bytes",
          name, on.m.t.n_offloaded, (long long)off.p.arena_bytes, (long long)on.p.arena_bytes, (long long)saved,
          (long long)state, (long long)on.p.host_bytes);
    vp_verify_report rep;
    s = vp_plan_verify(&on.p, &rep, &err);
    check(!s, "%s: the offloaded plan verifies%s%s", name, s ? ": " : "", s ? err.msg : "");
    char why[512];
    int same = test_compare_planned(&on.m, &on.p, STEPS, NULL, 0, why, sizeof why);
    check(same == 1, "%s: planned with offload = naive over %d steps%s%s", name, STEPS, why[0] ? ": " : "", why);
    check(same_losses(&on.m, &off.m), "%s: losses with offload = without, bit for bit, over %d steps", name, STEPS);
    test_planned_free(&off);
    test_planned_free(&on);
}

/* Writes p to path and reads it back; 0 when the read succeeds, else 1 and the reader's
 * message in msg. */
static int write_read(const vp_plan *p, const char *name, const char *path, vp_loaded_plan *lp, char *msg, size_t len) {
    vp_error err;
    vp_status s = vp_plan_write(p, name, NULL, 0, path, &err);
    if (s) {
        snprintf(msg, len, "write: %.900s", err.msg);
        return 1;
    }
    s = vp_plan_read(path, lp, &err);
    snprintf(msg, len, "%s", s ? err.msg : "");
    return s != VP_OK;
}

static void expect_refused(const vp_plan *p, const char *name, const char *path, const char *what, const char *want) {
    vp_loaded_plan lp;
    char msg[1024];
    int refused = write_read(p, name, path, &lp, msg, sizeof msg);
    if (!refused) vp_loaded_plan_free(&lp);
    check(refused && strstr(msg, want), "%s plan file, %s: refused (%s)", name, what, refused ? msg : "accepted!");
}

static void file_case(const char *name) {
    test_planned on;
    vp_error err;
    char path[4400], msg[1024];
    snprintf(path, sizeof path, "%s/tests/offload_%.100s_%d.vplan", VP_BINARY_DIR, name, (int)getpid());
    if (test_model_plan(&on, name, "adamw", 1, "cpu", &err)) {
        check(0, "%s plan file: %s", name, err.msg);
        test_planned_free(&on);
        return;
    }
    vp_loaded_plan lp;
    if (write_read(&on.p, name, path, &lp, msg, sizeof msg)) {
        check(0, "%s plan file round trip: %s", name, msg);
    } else {
        vp_verify_report rep;
        vp_status s = vp_plan_verify(&lp.plan, &rep, &err);
        check(!s && lp.plan.host_bytes == on.p.host_bytes && lp.plan.arena_bytes == on.p.arena_bytes,
              "%s plan file round trip: host block %lld bytes (%lld planned), arena %lld, verify %s", name,
              (long long)lp.plan.host_bytes, (long long)on.p.host_bytes, (long long)lp.plan.arena_bytes, s ? err.msg : "sound");
        double planned[STEPS], read[STEPS];
        char why[512] = "";
        vp_backend *cpu = vp_backend_cpu_new();
        int bad = test_plan_losses(&on.m, &on.p, cpu, STEPS, planned, why, sizeof why) ||
                  test_plan_losses(&on.m, &lp.plan, cpu, STEPS, read, why, sizeof why);
        check(!bad && !memcmp(planned, read, sizeof planned), "%s plan file: %d steps from the file, losses %.9g .. %.9g = in process, bit for bit%s%s",
              name, STEPS, read[0], read[STEPS - 1], why[0] ? ": " : "", why);
        vp_backend_free(cpu);
        vp_loaded_plan_free(&lp);
    }
    /* damage: a host block one byte short of its last buffer */
    on.p.host_bytes--;
    expect_refused(&on.p, name, path, "host block one byte short", "past the end of the");
    on.p.host_bytes++;
    /* a host buffer said to live in the arena */
    int hb = -1;
    for (int b = 0; b < on.p.n_buffers && hb < 0; b++)
        if (on.p.buffers[b].cat == VP_CAT_HOST && on.p.buffers[b].alias_of < 0) hb = b;
    if (hb >= 0) {
        on.p.buffers[hb].cat = VP_CAT_OPTIMIZER_STATE;
        expect_refused(&on.p, name, path, "a host buffer in the arena's category", "host block and arena disagree");
        on.p.buffers[hb].cat = VP_CAT_HOST;
    }
    /* a version-1 header on a plan with a host block (checksummed payload intact) */
    int wrote = !vp_plan_write(&on.p, name, NULL, 0, path, &err);
    FILE *f = wrote ? fopen(path, "r+b") : NULL;
    if (f) {
        fseek(f, 6, SEEK_SET);
        fputc(1, f);
        fclose(f);
        vp_status s = vp_plan_read(path, &lp, &err);
        if (!s) vp_loaded_plan_free(&lp);
        check(s && strstr(err.msg, "in a version-1 plan"), "%s plan file, version 1 with a host block: refused (%s)", name,
              s ? err.msg : "accepted!");
    } else
        check(0, "%s plan file: cannot rewrite %s", name, path);
    unlink(path);
    test_planned_free(&on);
}

int main(void) {
    vp_cpu_host_install();
    check_model("mlp");
    check_model("cnn");
    check_model("gpt");
    file_case("mlp");
    file_case("gpt");
    return check_summary();
}
