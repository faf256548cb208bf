#include "cli_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vp_status parse_double(const char *opt, const char *arg, double *out, vp_error *err) {
    char *end;
    errno = 0;
    double v = arg ? strtod(arg, &end) : 0;
    if (!arg || !*arg || *end || errno || v < 0)
        return vp_fail(err, VP_ERR_USAGE, "%s expects a non-negative number, got '%s'", opt, arg ? arg : "");
    *out = v;
    return VP_OK;
}

int cli_train_parse(cli_train_opts *o, int argc, char **argv, int *i, vp_status *s, vp_error *err) {
    static const char *const opts[] = {"--loss", "--optimizer", "--lr", "--momentum", "--betas",
                                       "--eps", "--weight-decay", "--freeze"};
    const char *a = argv[*i];
    int which = -1;
    for (int k = 0; k < (int)(sizeof opts / sizeof opts[0]); k++)
        if (!strcmp(a, opts[k])) which = k;
    if (which < 0) return 0;
    if (*i + 1 >= argc) {
        *s = vp_fail(err, VP_ERR_USAGE, "%s needs a value", a);
        return 1;
    }
    const char *v = argv[++*i];
    switch (which) {
    case 0: *s = vp_loss_parse(v, &o->spec.loss, err); o->have_loss = 1; break;
    case 1: *s = vp_opt_parse(v, &o->spec.opt, err); o->have_opt = 1; break;
    case 2: *s = parse_double(a, v, &o->lr, err); o->set_lr = 1; break;
    case 3: *s = parse_double(a, v, &o->momentum, err); o->set_momentum = 1; break;
    case 4: {
        char *end;
        errno = 0;
        o->beta1 = strtod(v, &end);
        if (*end != ',') *s = vp_fail(err, VP_ERR_USAGE, "--betas expects B1,B2 (for example 0.9,0.999), got '%s'", v);
        else {
            o->beta2 = strtod(end + 1, &end);
            if (*end || errno || o->beta1 < 0 || o->beta1 >= 1 || o->beta2 < 0 || o->beta2 >= 1)
                *s = vp_fail(err, VP_ERR_USAGE, "--betas expects two numbers in [0, 1), got '%s'", v);
        }
        o->set_betas = 1;
        break;
    }
    case 5: *s = parse_double(a, v, &o->eps, err); o->set_eps = 1; break;
    case 6: *s = parse_double(a, v, &o->weight_decay, err); o->set_wd = 1; break;
    case 7: o->spec.freeze = v; break;
    }
    return 1;
}

vp_status cli_train_finish(cli_train_opts *o, vp_error *err) {
    if (!o->have_loss) return vp_fail(err, VP_ERR_USAGE, "--loss is required (for example --loss ce:logits)");
    if (!o->have_opt) vp_opt_parse("sgd", &o->spec.opt, err);
    if (o->set_lr) o->spec.opt.lr = o->lr;
    if (o->set_momentum) o->spec.opt.momentum = o->momentum;
    if (o->set_betas) {
        o->spec.opt.beta1 = o->beta1;
        o->spec.opt.beta2 = o->beta2;
    }
    if (o->set_eps) o->spec.opt.eps = o->eps;
    if (o->set_wd) o->spec.opt.weight_decay = o->weight_decay;
    if (!(o->spec.opt.lr > 0)) return vp_fail(err, VP_ERR_USAGE, "--lr must be positive");
    if (o->set_momentum && o->spec.opt.kind != VP_OPT_MOMENTUM)
        return vp_fail(err, VP_ERR_USAGE, "--momentum applies to --optimizer momentum only");
    if (o->set_betas && o->spec.opt.kind != VP_OPT_ADAM && o->spec.opt.kind != VP_OPT_ADAMW)
        return vp_fail(err, VP_ERR_USAGE, "--betas applies to --optimizer adam or adamw only");
    return VP_OK;
}

vp_status cli_build_step(const char *model, const cli_dims *dims, const vp_train_spec *spec, vp_graph **g, vp_training *t,
                         int *n_fwd, vp_error *err) {
    memset(t, 0, sizeof *t);
    vp_status s = cli_load(model, dims, g, err);
    if (!s) s = vp_infer(*g, NULL, NULL, err);
    if (n_fwd) *n_fwd = *g ? (*g)->n_nodes : 0;
    if (!s) s = vp_training_build(*g, spec, t, err);
    if (!s && t->warning[0]) fprintf(stderr, "onnx-vplan: warning: %s\n", t->warning);
    return s;
}
