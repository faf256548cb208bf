/* A structure-aware fuzz of the plan reader behind the checksum, run in CI (under ASan
 * and UBSan in the sanitizer build).
 *
 * In: the bundled models' training steps, planned and written as plan files (the seeds).
 * Each round decodes a seed's payload, edits its fields as a hostile user would (an
 * offset at or past the arena, near 2^63 or negative, a smaller arena, a buffer grown,
 * two live buffers made to overlap, a lifetime cut short, two steps swapped, a step
 * dropped, a step's input or output pointed elsewhere, the loss at an input, no steps,
 * a dtype or a shape changed, the format version set back to 1), packs it again and
 * frames it with a valid checksum: the checksum catches accidents, not edits.
 * Out: each mutant goes through vp_plan_read_sound, what `run`, `codegen` and `export`
 * load.  Refused is fine; accepted must mean the verifier found it sound, and then one
 * planned step runs on the CPU inside the plan's arena: no crash, no error of the
 * sanitizers, no read or write outside the arena.
 *
 * usage: test_fuzz_plan [SECONDS] [OUT_DIR]   (default 10 s; with OUT_DIR, one named
 * mutant per hostile class is written there for tests/cli_hostile_plans.sh) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "memory/plan.h"
#include "memory/verify.h"
#include "model_util.h"
#include "plan_exec.h"
#include "plan/plan_file.h"
#include "plan/plan_load.h"
#include "ir/rng.h"
#include "vplan.pb-c.h"

#define MAX_SEEDS 8

typedef struct seed {
    char name[64];
    uint8_t *payload;
    size_t len;
} seed;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Frames payload as plan_file.c does, with a valid checksum. */
static int write_framed(const char *path, unsigned version, const uint8_t *payload, size_t len) {
    uint8_t head[VP_PLAN_HEADER_BYTES];
    memcpy(head, VP_PLAN_MAGIC, 6);
    head[6] = (uint8_t)version;
    head[7] = (uint8_t)(version >> 8);
    put_u64(head + 8, len);
    put_u64(head + 16, vp_fnv1a64(payload, len));
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(payload, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int read_payload(const char *path, seed *s) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, VP_PLAN_HEADER_BYTES, SEEK_SET);
    s->len = n > VP_PLAN_HEADER_BYTES ? (size_t)(n - VP_PLAN_HEADER_BYTES) : 0;
    s->payload = malloc(s->len + 1);
    int ok = s->payload && fread(s->payload, 1, s->len, f) == s->len;
    fclose(f);
    return ok ? 0 : -1;
}

/* The hostile classes, each one edit of the decoded plan. */
enum {
    M_OFFSET_AT_ARENA, M_OFFSET_HUGE, M_OFFSET_NEGATIVE, M_ARENA_TINY, M_GROW, M_OVERLAP, M_LIFETIME,
    M_SWAP_STEPS, M_DROP_STEP, M_STEP_INPUT, M_STEP_OUTPUT, M_LOSS_AT_INPUT, M_NO_STEPS, M_DTYPE, M_DIMS,
    M_TP_SLICE, M_VERSION_1, M_COUNT
};
static const char *mutation_name[M_COUNT] = {
    "offset_at_arena", "offset_huge", "offset_negative", "arena_tiny", "buffer_grown", "overlap", "lifetime_cut",
    "steps_swapped", "step_dropped", "step_input", "step_output", "loss_at_input", "no_steps", "dtype", "dims",
    "tp_slice", "version_1"};

static int pick_buffer(vp_rng *r, const Vplan__Plan *m, int need_size) {
    for (int tries = 0; tries < 64 && m->n_buffers; tries++) {
        int b = (int)(vp_rng_next(r) % m->n_buffers);
        const Vplan__Buffer *x = m->buffers[b];
        if (x->alias_of < 0 && (!need_size || x->size > 0)) return b;
    }
    return m->n_buffers ? 0 : -1;
}

/* Two distinct buffers live at one step, neither a view of the other. */
static int pick_overlapping(vp_rng *r, const Vplan__Plan *m, int *a, int *b) {
    for (int tries = 0; tries < 256 && m->n_buffers > 1; tries++) {
        int i = (int)(vp_rng_next(r) % m->n_buffers), j = (int)(vp_rng_next(r) % m->n_buffers);
        const Vplan__Buffer *x = m->buffers[i], *y = m->buffers[j];
        if (i == j || x->alias_of >= 0 || y->alias_of >= 0 || !x->size || !y->size || x->offset == y->offset) continue;
        if (x->category == 10 || y->category == 10) continue; /* the host block */
        if (x->first_step <= y->last_step && y->first_step <= x->last_step) {
            *a = i;
            *b = j;
            return 1;
        }
    }
    return 0;
}

/* Applies mutation k to m in place (pointers into m stay owned by the unpacked message,
 * so counts are only ever lowered); *version may be set back.  0 when the seed offers
 * nothing for it. */
static int mutate(vp_rng *r, Vplan__Plan *m, int k, unsigned *version) {
    int64_t arena = m->summary ? m->summary->arena_bytes : 0;
    int b = pick_buffer(r, m, 1), c;
    switch (k) {
    case M_OFFSET_AT_ARENA:
        if (b < 0) return 0;
        m->buffers[b]->offset = arena + (int64_t)(vp_rng_next(r) % 2) * 256;
        return 1;
    case M_OFFSET_HUGE:
        if (b < 0) return 0;
        m->buffers[b]->offset = INT64_MAX - (int64_t)(vp_rng_next(r) % 4096);
        return 1;
    case M_OFFSET_NEGATIVE:
        if (b < 0) return 0;
        m->buffers[b]->offset = -256 * (int64_t)(1 + vp_rng_next(r) % 4);
        return 1;
    case M_ARENA_TINY:
        if (!m->summary) return 0;
        m->summary->arena_bytes = vp_rng_next(r) % 2 ? 64 : arena / 2;
        return 1;
    case M_GROW:
        if (b < 0) return 0;
        m->buffers[b]->size *= 64;
        m->buffers[b]->bytes *= 64;
        return 1;
    case M_OVERLAP:
        if (!pick_overlapping(r, m, &b, &c)) return 0;
        m->buffers[b]->offset = m->buffers[c]->offset;
        return 1;
    case M_LIFETIME:
        if (b < 0 || m->buffers[b]->last_step <= m->buffers[b]->first_step) return 0;
        m->buffers[b]->last_step = m->buffers[b]->first_step;
        return 1;
    case M_SWAP_STEPS: {
        if (m->n_steps < 2) return 0;
        size_t i = vp_rng_next(r) % (m->n_steps - 1), j = i + 1 + vp_rng_next(r) % (m->n_steps - 1 - i);
        Vplan__Step *t = m->steps[i];
        m->steps[i] = m->steps[j];
        m->steps[j] = t;
        return 1;
    }
    case M_DROP_STEP: {
        if (!m->n_steps) return 0;
        /* the last step moves into the dropped one's place, so every pointer stays owned */
        size_t i = vp_rng_next(r) % m->n_steps;
        Vplan__Step *t = m->steps[i];
        memmove(m->steps + i, m->steps + i + 1, (m->n_steps - 1 - i) * sizeof *m->steps);
        m->steps[m->n_steps - 1] = t;
        m->n_steps--;
        return 1;
    }
    case M_STEP_INPUT:
    case M_STEP_OUTPUT: {
        if (!m->n_steps || !m->n_buffers) return 0;
        Vplan__Step *st = m->steps[vp_rng_next(r) % m->n_steps];
        size_t n = k == M_STEP_INPUT ? st->n_inputs : st->n_outputs;
        int32_t *ids = k == M_STEP_INPUT ? st->inputs : st->outputs;
        if (!n) return 0;
        int32_t to = vp_rng_next(r) % 8 ? (int32_t)(vp_rng_next(r) % m->n_buffers) : (int32_t)m->n_buffers + 3;
        ids[vp_rng_next(r) % n] = to;
        return 1;
    }
    case M_LOSS_AT_INPUT:
        for (size_t i = 0; i < m->n_buffers; i++)
            if (m->buffers[i]->flags & 1u) { /* an input (VP_VAL_INPUT) */
                m->loss_buffer = (int32_t)i;
                return 1;
            }
        return 0;
    case M_NO_STEPS:
        /* the steps stay owned by the message: free_unpacked frees n_steps of them, so the
         * caller packs with the count at zero and puts it back before freeing */
        return 1;
    case M_DTYPE:
        if (b < 0) return 0;
        m->buffers[b]->dtype = m->buffers[b]->dtype == 1 ? 7 : 1; /* float <-> int64 */
        return 1;
    case M_DIMS:
        if (b < 0 || !m->buffers[b]->n_dims) return 0;
        m->buffers[b]->dims[vp_rng_next(r) % m->buffers[b]->n_dims] *= 3;
        return 1;
    case M_TP_SLICE: /* a tensor-parallel slice along an axis the buffer lacks, or of blocks its axis cannot hold */
        if (b < 0 || !m->buffers[b]->n_dims) return 0;
        m->buffers[b]->has_tp_axis = m->buffers[b]->has_tp_blocks = 1;
        m->buffers[b]->tp_axis = vp_rng_next(r) % 2 || m->buffers[b]->dims[0] < 1 ? (int32_t)m->buffers[b]->n_dims : 0;
        m->buffers[b]->tp_blocks = m->buffers[b]->tp_axis ? 1 : (int32_t)m->buffers[b]->dims[0] + 1;
        return 1;
    case M_VERSION_1:
        *version = 1;
        return 1;
    }
    return 0;
}

/* Zeros for every input (labels 0: a valid class), then one step: anything but a crash,
 * a sanitizer's report or a write outside the arena is fine. */
static void run_one_step(const vp_loaded_plan *lp, vp_backend *cpu) {
    vp_plan_exec *x = NULL;
    vp_error err;
    vp_status s = vp_plan_exec_new(&lp->plan, cpu, &x, &err);
    for (int i = 0; i < lp->g->n_inputs && !s; i++) {
        const vp_value *v = &lp->g->values[lp->g->inputs[i]];
        vp_tensor t = vp_value_tensor(v);
        size_t bytes = vp_tensor_nbytes(&t);
        t.data = calloc(bytes ? bytes : 1, 1);
        s = vp_plan_exec_set_input(x, v->name, &t, &err);
        free(t.data);
    }
    if (!s) s = vp_plan_exec_run(x, &err);
    vp_plan_exec_free(x);
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    const char *out_dir = argc > 2 ? argv[2] : NULL;
    char names[32][64];
    int n_models = test_model_list(names, 32), n_seeds = 0;
    seed seeds[MAX_SEEDS];
    char path[4400];
    for (int i = 0; i < n_models && n_seeds < MAX_SEEDS; i++) {
        test_model m;
        vp_plan p;
        vp_error err;
        memset(&p, 0, sizeof p);
        snprintf(path, sizeof path, "%s/tests/fuzz_plan_seed_%d.vplan", VP_BINARY_DIR, (int)getpid());
        vp_status s = test_model_load_step(&m, names[i], "adamw", &err);
        if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &p, &err);
        int loaded = !s;
        if (!s) s = vp_plan_write(&p, names[i], NULL, 0, path, &err);
        if (!s && !read_payload(path, &seeds[n_seeds])) snprintf(seeds[n_seeds++].name, 64, "%.63s", names[i]);
        else check(0, "seed %s: %s", names[i], s ? err.msg : "cannot read back");
        unlink(path);
        vp_plan_free(&p);
        if (loaded) test_model_free(&m);
    }
    check(n_seeds > 0, "%d seed plans from the bundled models", n_seeds);
    vp_backend *cpu = vp_backend_cpu_new();
    vp_rng rng = {0x9e3779b97f4a7c15ull};
    int tried[M_COUNT] = {0}, refused[M_COUNT] = {0}, executed = 0, rounds = 0, unsound_accepted = 0;
    int named[M_COUNT] = {0};
    double t0 = now();
    snprintf(path, sizeof path, "%s/tests/fuzz_plan_%d.vplan", VP_BINARY_DIR, (int)getpid());
    /* every class at least once on the first seed, then at random until the time is up */
    for (; n_seeds && (rounds < M_COUNT * 2 || now() - t0 < seconds); rounds++) {
        const seed *sd = &seeds[rounds < M_COUNT * 2 ? 0 : vp_rng_next(&rng) % n_seeds];
        int k = rounds < M_COUNT * 2 ? rounds % M_COUNT : (int)(vp_rng_next(&rng) % M_COUNT);
        Vplan__Plan *m = vplan__plan__unpack(NULL, sd->len, sd->payload);
        if (!m) {
            check(0, "seed %s does not unpack", sd->name);
            break;
        }
        unsigned version = VP_PLAN_VERSION;
        size_t kept_steps = m->n_steps;
        if (!mutate(&rng, m, k, &version)) {
            vplan__plan__free_unpacked(m, NULL);
            continue;
        }
        if (k == M_NO_STEPS) m->n_steps = 0;
        size_t len = vplan__plan__get_packed_size(m);
        uint8_t *buf = malloc(len + 1);
        vplan__plan__pack(m, buf);
        if (k == M_NO_STEPS) m->n_steps = kept_steps;
        if (k == M_DROP_STEP) m->n_steps++;
        vplan__plan__free_unpacked(m, NULL);
        int wrote = write_framed(path, version, buf, len);
        if (out_dir && !named[k] && !wrote) {
            char named_path[4400];
            snprintf(named_path, sizeof named_path, "%s/%s.vplan", out_dir, mutation_name[k]);
            named[k] = !write_framed(named_path, version, buf, len);
        }
        free(buf);
        if (wrote) {
            check(0, "cannot write %s: %s", path, strerror(errno));
            break;
        }
        tried[k]++;
        vp_loaded_plan lp;
        vp_error err;
        vp_status s = vp_plan_read_sound(path, &lp, &err);
        if (s) {
            refused[k]++;
            continue;
        }
        /* accepted: the verifier must agree, and the step must run inside the arena */
        vp_verify_report rep;
        if (vp_plan_verify(&lp.plan, &rep, &err)) unsound_accepted++;
        if (getenv("VP_FUZZ_TRACE")) fprintf(stderr, "round %d: %s on %s accepted, running\n", rounds, mutation_name[k], sd->name);
        run_one_step(&lp, cpu);
        executed++;
        vp_loaded_plan_free(&lp);
    }
    unlink(path);
    for (int k = 0; k < M_COUNT; k++)
        printf("  %-16s %5d mutants, %5d refused\n", mutation_name[k], tried[k], refused[k]);
    check(unsound_accepted == 0, "%d rounds in %.1f s: no plan the verifier rejects was accepted (%d accepted and run)",
          rounds, now() - t0, executed);
    /* these can never be sound: each must be refused every time */
    static const int always[] = {M_OFFSET_AT_ARENA, M_OFFSET_HUGE, M_OFFSET_NEGATIVE, M_OVERLAP, M_LOSS_AT_INPUT,
                                 M_NO_STEPS, M_TP_SLICE};
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++) {
        int k = always[i];
        check(tried[k] > 0 && refused[k] == tried[k], "%s: %d of %d mutants refused", mutation_name[k], refused[k],
              tried[k]);
    }
    if (out_dir)
        for (int k = 0; k < M_COUNT; k++)
            if (!named[k]) check(0, "no %s mutant written to %s", mutation_name[k], out_dir);
    vp_backend_free(cpu);
    for (int i = 0; i < n_seeds; i++) free(seeds[i].payload);
    return check_summary();
}
