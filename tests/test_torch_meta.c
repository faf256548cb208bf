/* What torch 2.x's exporter says in node metadata (planner/onnx/torch_meta.c):
 *   fx_node    an embedding's padding_idx, positional or keyword, none (-1 or absent),
 *              scale_grad_by_freq, and text that is no aten.embedding call or is cut
 *              short giving nothing;
 *   scopes     the innermost module of a name_scopes list;
 *   loading    the kit's OPT export (its embedding's FX call kept) gives its Gather
 *              padding row 1, and an export without the metadata gives none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "onnx/onnx_load.h"
#include "onnx/torch_meta.h"

#define FX(args) \
    "%embedding : [num_users=1] = call_function[target=torch.ops.aten.embedding.default](args = " args ")"

static void embedding_case(const char *fx, int from, int64_t pad, int freq) {
    vp_embedding_hint e;
    vp_torch_embedding_of(fx, &e);
    check(e.from_embedding == from && e.padding_idx == pad && e.scale_grad_by_freq == freq,
          "fx_node %.90s: embedding %d padding_idx %lld scale_grad_by_freq %d (want %d %lld %d)", fx ? fx : "(none)",
          e.from_embedding, (long long)e.padding_idx, e.scale_grad_by_freq, from, (long long)pad, freq);
}

static void parse_cases(void) {
    embedding_case(FX("(%p_m_bert_embeddings_word_embeddings_weight, %args_0, 0), kwargs = {}"), 1, 0, 0);
    embedding_case(FX("(%p_w, %view, 1), kwargs = {}"), 1, 1, 0);
    embedding_case(FX("(%p_w, %alias), kwargs = {}"), 1, -1, 0);
    embedding_case(FX("(%p_w, %ids, -1, True), kwargs = {}"), 1, -1, 1);
    embedding_case(FX("(%p_w, %ids), kwargs = {padding_idx: 3, scale_grad_by_freq: False}"), 1, 3, 0);
    embedding_case(FX("(%p_w, %ids, 2, False, False), kwargs = {}"), 1, 2, 0);
    embedding_case(FX("(%p_w, %ids, 12x), kwargs = {}"), 1, -1, 0); /* no number */
    embedding_case("%e = call_function[target=torch.ops.aten.embedding.default](args = (%p_w, %ids, 5", 1, -1,
                   0); /* cut short */
    embedding_case("%gather : [num_users=1] = call_function[target=torch.ops.aten.index_select.default](args = "
                   "(%p_w, 0, %ids), kwargs = {})", 0, -1, 0);
    embedding_case("", 0, -1, 0);
    embedding_case(NULL, 0, -1, 0);
}

static void scope_case(const char *list, const char *want) {
    char *got = vp_torch_module_path(list);
    check((!got && !want) || (got && want && !strcmp(got, want)), "name_scopes %s: %s (want %s)", list ? list : "(none)",
          got ? got : "(none)", want ? want : "(none)");
    free(got);
}

static void scope_cases(void) {
    scope_case("['', 'm', 'm.model', 'm.model.layers.0', 'm.model.layers.0.mlp', 'mul_3']", "m.model.layers.0.mlp");
    scope_case("['', 'm', 'm.model', 'add_3']", "m.model");
    scope_case("['']", NULL);
    scope_case("not a list", NULL);
    scope_case(NULL, NULL);
}

/* The Gather reading `table` in the model at path: its hint. */
static int gather_hint(const char *path, const char *table, vp_embedding_hint *e) {
    vp_graph *g = NULL;
    vp_error err;
    if (vp_onnx_load(path, &g, &err)) {
        check(0, "%s: %s", path, err.msg);
        return 0;
    }
    int found = 0;
    for (int i = 0; i < g->n_nodes && !found; i++) {
        const vp_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "Gather") && n->n_inputs > 0 && !strcmp(g->values[n->inputs[0]].name, table))
            *e = n->embedding, found = 1;
    }
    vp_graph_free(g);
    check(found, "%s: a Gather reads %s", path, table);
    return found;
}

static void load_cases(void) {
    vp_embedding_hint e;
    if (gather_hint(VP_SOURCE_DIR "/tests/data/torch2/opt/eval_opt0.onnx", "m.lm_head.weight", &e))
        check(e.from_embedding && e.padding_idx == 1, "OPT's token embedding (tied to the LM head): padding row %lld",
              (long long)e.padding_idx);
    if (gather_hint(VP_SOURCE_DIR "/tests/data/torch2/opt/eval_opt0.onnx", "m.model.decoder.embed_positions.weight", &e))
        check(e.from_embedding && e.padding_idx == -1, "OPT's position embedding: no padding row (%lld)",
              (long long)e.padding_idx);
    if (gather_hint(VP_SOURCE_DIR "/models/gpt/model.onnx", "wte.weight", &e))
        check(!e.from_embedding, "torch 1.13's GPT export (no metadata): no embedding hint");
}

int main(void) {
    parse_cases();
    scope_cases();
    load_cases();
    return check_summary();
}
