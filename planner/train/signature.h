/* The trainable set as torch 2.x's exporter recorded it (train/signature.c).
 *
 * torch.onnx.export (dynamo) writes torch.export's graph signature into the graph's
 * metadata_props (`pkg.torch.export.ExportedProgram.graph_signature`): one line per
 * input, "p_m_fc_weight: PARAMETER target='m.fc.weight'", with the kinds PARAMETER,
 * BUFFER (persistent or not), CONSTANT_TENSOR and USER_INPUT.  Initializers are named by
 * target.  Where the signature is there it decides what trains: a PARAMETER is trained,
 * a BUFFER or constant never is (BatchNorm's running statistics are carried state
 * anyway), and an initializer the signature does not list is the exporter's constant
 * (an attention scale, a folded mask), never trained.  A PARAMETER line that also says
 * requires_grad=False (the onnx_vplan front door writes it: torch's own exporter keeps
 * no such flag) is a parameter torch does not train, as Marian's and Whisper's
 * sinusoidal position tables, and is not trained either. */
#ifndef VP_SIGNATURE_H
#define VP_SIGNATURE_H

#include "ir/ir.h"

#define VP_SIGNATURE_KEY "pkg.torch.export.ExportedProgram.graph_signature"

typedef enum vp_sig_kind {
    VP_SIG_NONE = 0,
    VP_SIG_PARAMETER,
    VP_SIG_BUFFER,
    VP_SIG_CONSTANT,
    VP_SIG_OTHER,
    VP_SIG_FROZEN, /* a PARAMETER with requires_grad=False */
} vp_sig_kind;

typedef struct vp_signature {
    int n;
    char **target;     /* module paths: "m.model.layers.0.mlp.up_proj.weight" */
    vp_sig_kind *kind;
    int n_params, n_buffers, n_constants; /* n_params counts the frozen ones too */
    int n_frozen;
} vp_signature;

/* Parses the signature's text; 0 entries when it lists none.  Fails only out of memory. */
vp_status vp_signature_parse(const char *text, vp_signature *sig, vp_error *err);
void vp_signature_free(vp_signature *sig);

/* The kind the signature gives the initializer named name (its target), or VP_SIG_NONE. */
vp_sig_kind vp_signature_kind(const vp_signature *sig, const char *name);

/* Why a float initializer is trained, or not, unless --trainable says otherwise.  With a
 * signature it decides; without one (other exporters, torch 1.x) every float initializer
 * is trained but a scalar (rank 0): exporters write constants there (an attention scale,
 * a mask's fill value), and a model's own scalar parameter is rare enough to name with
 * --trainable. */
typedef enum vp_train_reason {
    VP_TRAIN_SIGNATURE = 0, /* a PARAMETER of the signature: trained */
    VP_TRAIN_RULE,          /* no signature, not a scalar: trained */
    VP_TRAIN_NOT_PARAMETER, /* the signature lists it as a buffer or constant, or does not list it */
    VP_TRAIN_SCALAR,        /* no signature: a float scalar, taken for a constant */
    VP_TRAIN_FROZEN,        /* a PARAMETER of the signature with requires_grad=False */
} vp_train_reason;

/* v: a float initializer; sig NULL or listing no parameter: none. */
vp_train_reason vp_train_reason_of(const vp_value *v, const vp_signature *sig);
static inline int vp_train_reason_trains(vp_train_reason r) { return r == VP_TRAIN_SIGNATURE || r == VP_TRAIN_RULE; }

/* What a graph's signature says against what the graph holds: the parameters it lists
 * that the graph no longer holds under their names (tied, or folded and merged by the
 * exporter's optimizer), and the float initializers it does not list (the exporter's
 * own).  Both together, or a missing parameter whose module's buffers are missing too,
 * mean the export lost its training structure. */
typedef struct vp_signature_facts {
    int present;              /* the graph carries a signature listing parameters */
    int n_params, n_buffers, n_constants;
    int n_missing, n_own;
    char first_missing[256], first_own[256];
    /* missing parameters whose module's buffers are missing too (a BatchNorm's weight and
     * running statistics): folded into the ops around them, as the optimizer folds a
     * BatchNorm into the Conv before it; a tied or unread parameter has no such buffers */
    int n_folded;
    char first_folded[256], folded_buffer[256];
    int n_reason[5];          /* float initializers (not state) by vp_train_reason: what trains
                                 unless --trainable says otherwise */
} vp_signature_facts;

/* sig: a parsed signature (or NULL to read the graph's own: ONNX graphs only); ours:
 * per value, 1 for an initializer our own passes made (LoRA's adapters), which is
 * neither the exporter's nor counted (NULL: none). */
vp_status vp_signature_facts_of(const vp_graph *g, const vp_signature *sig, const char *ours, vp_signature_facts *out,
                                vp_error *err);

#endif
