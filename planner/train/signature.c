/* Reading torch.export's graph signature from its text (signature.h).
 *
 * In: the metadata value as the exporter writes it: a "# inputs" section of lines
 * "NAME: KIND target='TARGET' [persistent=...] [requires_grad=False]", then "# outputs".
 * Out: the inputs' targets and kinds.  Keeps true: a line it cannot read is skipped, never guessed. */
#include "train/signature.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_load.h"

static vp_sig_kind kind_of(const char *word, size_t len) {
    if (len == 9 && !strncmp(word, "PARAMETER", len)) return VP_SIG_PARAMETER;
    if (len == 6 && !strncmp(word, "BUFFER", len)) return VP_SIG_BUFFER;
    if (len == 15 && !strncmp(word, "CONSTANT_TENSOR", len)) return VP_SIG_CONSTANT;
    return VP_SIG_OTHER;
}

vp_status vp_signature_parse(const char *text, vp_signature *sig, vp_error *err) {
    memset(sig, 0, sizeof *sig);
    int inputs = 0, cap = 0;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len >= 8 && !strncmp(line, "# inputs", 8)) inputs = 1;
        else if (line[0] == '#') inputs = 0;
        const char *colon = memchr(line, ':', len), *tq = NULL;
        for (const char *p = line; p + 8 <= line + len && !tq; p++)
            if (!strncmp(p, "target='", 8)) tq = p + 8;
        if (inputs && colon && tq) {
            const char *w = colon + 1;
            while (*w == ' ') w++;
            size_t wl = strcspn(w, " \n");
            const char *close = memchr(tq, '\'', (size_t)(line + len - tq));
            if (close) {
                if (sig->n == cap) {
                    cap = cap ? 2 * cap : 64;
                    char **t = realloc(sig->target, (size_t)cap * sizeof *t);
                    if (t) sig->target = t;
                    vp_sig_kind *k = realloc(sig->kind, (size_t)cap * sizeof *k);
                    if (k) sig->kind = k;
                    if (!t || !k) {
                        vp_signature_free(sig);
                        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
                    }
                }
                sig->target[sig->n] = strndup(tq, (size_t)(close - tq));
                if (!sig->target[sig->n]) {
                    vp_signature_free(sig);
                    return vp_fail(err, VP_ERR_NOMEM, "out of memory");
                }
                vp_sig_kind k = kind_of(w, wl);
                if (k == VP_SIG_PARAMETER && memmem(close, (size_t)(line + len - close), "requires_grad=False", 19))
                    k = VP_SIG_FROZEN;
                sig->kind[sig->n++] = k;
                sig->n_params += k == VP_SIG_PARAMETER || k == VP_SIG_FROZEN;
                sig->n_frozen += k == VP_SIG_FROZEN;
                sig->n_buffers += k == VP_SIG_BUFFER;
                sig->n_constants += k == VP_SIG_CONSTANT;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return VP_OK;
}

void vp_signature_free(vp_signature *sig) {
    for (int i = 0; i < sig->n; i++) free(sig->target[i]);
    free(sig->target);
    free(sig->kind);
    memset(sig, 0, sizeof *sig);
}

vp_status vp_signature_facts_of(const vp_graph *g, const vp_signature *given, const char *ours, vp_signature_facts *f,
                                vp_error *err) {
    memset(f, 0, sizeof *f);
    vp_signature own = {0};
    const vp_signature *sig = given;
    if (!sig) {
        char *text = vp_onnx_graph_metadata(g, VP_SIGNATURE_KEY);
        vp_status s = text ? vp_signature_parse(text, &own, err) : VP_OK;
        free(text);
        if (s) return s;
        sig = &own;
    }
    f->present = sig->n_params > 0;
    f->n_params = sig->n_params;
    f->n_buffers = sig->n_buffers;
    f->n_constants = sig->n_constants;
    for (int i = 0; f->present && i < sig->n; i++) {
        if (sig->kind[i] != VP_SIG_PARAMETER && sig->kind[i] != VP_SIG_FROZEN) continue;
        int v = vp_graph_find_value(g, sig->target[i]);
        if (v >= 0 && (g->values[v].flags & VP_VAL_INITIALIZER)) continue;
        if (!f->n_missing++) snprintf(f->first_missing, sizeof f->first_missing, "%s", sig->target[i]);
        const char *dot = strrchr(sig->target[i], '.');
        size_t module = dot ? (size_t)(dot - sig->target[i]) + 1 : 0; /* "m.bn." of "m.bn.weight" */
        for (int j = 0; module && j < sig->n; j++) {
            if (sig->kind[j] != VP_SIG_BUFFER || strncmp(sig->target[j], sig->target[i], module) ||
                strchr(sig->target[j] + module, '.'))
                continue;
            int b = vp_graph_find_value(g, sig->target[j]);
            if (b >= 0 && (g->values[b].flags & VP_VAL_INITIALIZER)) continue;
            if (!f->n_folded++) {
                snprintf(f->first_folded, sizeof f->first_folded, "%s", sig->target[i]);
                snprintf(f->folded_buffer, sizeof f->folded_buffer, "%s", sig->target[j]);
            }
            break;
        }
    }
    for (int v = 0; f->present && v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || !vp_dtype_is_float(val->dtype) || (ours && ours[v])) continue;
        if (vp_signature_kind(sig, val->name) == VP_SIG_NONE && !f->n_own++)
            snprintf(f->first_own, sizeof f->first_own, "%s", val->name);
    }
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || (val->flags & (VP_VAL_STATE | VP_VAL_CONST)) ||
            !vp_dtype_is_float(val->dtype) || (ours && ours[v]))
            continue;
        f->n_reason[vp_train_reason_of(val, sig)]++;
    }
    vp_signature_free(&own);
    return VP_OK;
}

vp_sig_kind vp_signature_kind(const vp_signature *sig, const char *name) {
    for (int i = 0; i < sig->n; i++)
        if (!strcmp(sig->target[i], name)) return sig->kind[i];
    return VP_SIG_NONE;
}

vp_train_reason vp_train_reason_of(const vp_value *v, const vp_signature *sig) {
    if (sig && sig->n_params) {
        vp_sig_kind k = vp_signature_kind(sig, v->name);
        return k == VP_SIG_PARAMETER ? VP_TRAIN_SIGNATURE : k == VP_SIG_FROZEN ? VP_TRAIN_FROZEN : VP_TRAIN_NOT_PARAMETER;
    }
    return v->rank == 0 ? VP_TRAIN_SCALAR : VP_TRAIN_RULE;
}
