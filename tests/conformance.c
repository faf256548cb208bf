#include "conformance.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names in dir starting with prefix; caller frees each and the array. */
static int list_dir(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return 0;
    int n = 0, cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, (size_t)cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static int same_shape(const vp_tensor *a, const vp_tensor *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

/* Compares got against want; fills why on mismatch. */
static int compare_values(const vp_tensor *got, const vp_tensor *want, double tol, char *why, size_t len) {
    int64_t n = vp_tensor_numel(want);
    double t = tol;
    if (want->dtype == VP_F16) t = 1e-3 > tol ? 1e-3 : tol;
    if (want->dtype == VP_BF16) t = 1e-2 > tol ? 1e-2 : tol;
    int is_float = vp_dtype_is_float(want->dtype);
    for (int64_t i = 0; i < n; i++) {
        double g = vp_load(got->data, got->dtype, i), w = vp_load(want->data, want->dtype, i);
        if (is_float) {
            if (isnan(w) && isnan(g)) continue;
            if (isinf(w) && g == w) continue;
            double d = fabs(g - w);
            if (d <= t || d <= t * fabs(w)) continue;
        } else if (want->dtype == VP_I64 || want->dtype == VP_U64) {
            if (memcmp((const char *)got->data + i * 8, (const char *)want->data + i * 8, 8) == 0) continue;
        } else if (g == w) {
            continue;
        }
        snprintf(why, len, "element %lld: got %.9g, expected %.9g", (long long)i, g, w);
        return 0;
    }
    return 1;
}

static case_result run_data_set(vp_graph *g, const char *set_dir, const conf_opts *o, int first_set, char *why,
                                size_t why_len) {
    char path[4200];
    vp_error err;
    vp_tensor inputs[64];
    int n_in = 0;
    case_result r = CASE_PASS;
    vp_exec *x = NULL;
    vp_backend *b = NULL;
    /* input_K.pb maps to the K-th graph input that is not an initializer */
    for (int k = 0; k < g->n_inputs && k < 64; k++) {
        snprintf(path, sizeof path, "%s/input_%d.pb", set_dir, k);
        if (!exists(path)) break;
        vp_status s = vp_tensor_read_pb(path, &inputs[n_in], NULL, &err);
        if (s) {
            snprintf(why, why_len, "%s", err.msg);
            r = s == VP_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
            goto done;
        }
        n_in++;
    }
    if (first_set) {
        for (int k = 0; k < n_in; k++) {
            vp_status s = vp_bind_input_data(g, g->values[g->inputs[k]].name, &inputs[k], &err);
            if (s) {
                snprintf(why, why_len, "%s", err.msg);
                r = s == VP_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
                goto done;
            }
        }
        vp_status s = vp_infer(g, NULL, NULL, &err);
        if (s) {
            snprintf(why, why_len, "%s", err.msg);
            r = s == VP_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
            goto done;
        }
    }
    if (!o->shapes_only) {
        b = vp_backend_cpu_new();
        vp_status s = vp_exec_new(g, b, &x, &err);
        for (int k = 0; !s && k < n_in; k++) s = vp_exec_set_input(x, g->values[g->inputs[k]].name, &inputs[k], &err);
        if (!s) s = vp_exec_run(x, &err);
        if (s) {
            snprintf(why, why_len, "%s", err.msg);
            r = s == VP_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
            goto done;
        }
    }
    for (int k = 0; k < g->n_outputs; k++) {
        snprintf(path, sizeof path, "%s/output_%d.pb", set_dir, k);
        if (!exists(path)) break;
        vp_tensor want;
        vp_status s = vp_tensor_read_pb(path, &want, NULL, &err);
        if (s) {
            snprintf(why, why_len, "%s", err.msg);
            r = CASE_FAIL;
            goto done;
        }
        const vp_value *v = &g->values[g->outputs[k]];
        vp_tensor shape = vp_value_tensor(v);
        char s1[128], s2[128];
        if (v->dtype != want.dtype || !same_shape(&shape, &want)) {
            snprintf(why, why_len, "output %d '%s': inferred %s %s, expected %s %s", k, v->name, vp_dtype_name(v->dtype),
                     vp_shape_str(v->rank, v->dims, s1, sizeof s1), vp_dtype_name(want.dtype),
                     vp_shape_str(want.rank, want.dims, s2, sizeof s2));
            r = CASE_FAIL;
        } else if (!o->shapes_only) {
            vp_tensor got;
            s = vp_exec_get(x, g->outputs[k], &got, &err);
            char detail[512];
            if (s) {
                snprintf(why, why_len, "output %d '%s': %s", k, v->name, err.msg);
                r = CASE_FAIL;
            } else if (!compare_values(&got, &want, o->tol, detail, sizeof detail)) {
                snprintf(why, why_len, "output %d '%s': %s", k, v->name, detail);
                r = CASE_FAIL;
            }
            if (!s) free(got.data);
        }
        free(want.data);
        if (r != CASE_PASS) break;
    }
done:
    vp_exec_free(x);
    vp_backend_free(b);
    for (int k = 0; k < n_in; k++) {
        if (first_set && r == CASE_PASS) {
            /* hand ownership to the graph so bound data outlives this call */
            int id = g->inputs[k];
            if (g->values[id].data == inputs[k].data) {
                g->values[id].data_owner = VP_DATA_HEAP;
                continue;
            }
        }
        free(inputs[k].data);
    }
    return r;
}

/* Tests whose expected outputs ONNX wrote rounded by hand (ONNX's own runner compares
 * with rtol 1e-3, so it never noticed): checked at the precision they were written in. */
static double tolerance_for(const char *dir, double dflt) {
    static const struct { const char *name; double tol; } rounded[] = {
        {"test_averagepool_2d_ceil_last_window_starts_on_pad", 1e-4}, /* 0.1511 for 1.3595/9 */
    };
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    for (size_t i = 0; i < sizeof rounded / sizeof rounded[0]; i++)
        if (!strcmp(base, rounded[i].name)) return rounded[i].tol;
    return dflt;
}

case_result conf_run_case(const char *dir, const conf_opts *o_in, char *why, size_t why_len) {
    conf_opts o_case = *o_in;
    o_case.tol = tolerance_for(dir, o_in->tol);
    const conf_opts *o = &o_case;
    char path[4096];
    vp_error err;
    vp_graph *g;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    vp_status s = vp_onnx_load(path, &g, &err);
    if (s) {
        snprintf(why, why_len, "%s", err.msg);
        return s == VP_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
    }
    char **sets;
    int n_sets = list_dir(dir, "test_data_set_", &sets);
    case_result r = n_sets ? CASE_PASS : CASE_FAIL;
    if (!n_sets) snprintf(why, why_len, "no test_data_set_* directory");
    for (int i = 0; i < n_sets; i++) {
        if (r == CASE_PASS) {
            snprintf(path, sizeof path, "%s/%s", dir, sets[i]);
            r = run_data_set(g, path, o, i == 0, why, why_len);
            if (r == CASE_FAIL && i > 0) {
                char tmp[900];
                snprintf(tmp, sizeof tmp, "%s", why);
                snprintf(why, why_len, "%s: %s", sets[i], tmp);
            }
        }
        free(sets[i]);
    }
    free(sets);
    vp_graph_free(g);
    return r;
}

int conf_run_suite(const char *suite, const char *filter, const conf_opts *o, int *passed, int *failed,
                   int *unsupported) {
    char **names;
    int n = list_dir(suite, "test_", &names);
    *passed = *failed = *unsupported = 0;
    for (int i = 0; i < n; i++) {
        char dir[4096], why[1024] = "";
        snprintf(dir, sizeof dir, "%s/%s", suite, names[i]);
        if (filter && !strstr(names[i], filter)) {
            free(names[i]);
            continue;
        }
        case_result r = conf_run_case(dir, o, why, sizeof why);
        if (r == CASE_PASS) {
            (*passed)++;
            if (o->verbose) printf("PASS %s\n", names[i]);
        } else if (r == CASE_FAIL) {
            (*failed)++;
            printf("FAIL %s: %s\n", names[i], why);
        } else {
            (*unsupported)++;
            if (o->verbose) printf("UNSUPPORTED %s: %s\n", names[i], why);
        }
        free(names[i]);
    }
    free(names);
    return *failed;
}
