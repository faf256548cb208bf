/* Reading torch.export's graph signature from its text (signature.h).
 *
 * In: the metadata value as the exporter writes it: a "# inputs" section of lines
 * "NAME: KIND target='TARGET' [persistent=...]", then "# outputs".  Out: the inputs'
 * targets and kinds.  Keeps true: a line it cannot read is skipped, never guessed. */
#include "train/signature.h"

#include <stdlib.h>
#include <string.h>

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
                sig->kind[sig->n++] = k;
                sig->n_params += k == VP_SIG_PARAMETER;
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

vp_sig_kind vp_signature_kind(const vp_signature *sig, const char *name) {
    for (int i = 0; i < sig->n; i++)
        if (!strcmp(sig->target[i], name)) return sig->kind[i];
    return VP_SIG_NONE;
}
