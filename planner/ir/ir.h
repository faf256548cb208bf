/* The one intermediate representation every pass reads and writes.
 *
 * A vp_graph holds values (tensors: dtype, concrete shape, producer, consumers, and
 * the constant data when it is known ahead of time) and nodes (an ONNX op with its
 * attributes, inputs and outputs by value id).  Ids are indices into the graph's
 * arrays and stay valid while passes append; pointers into the arrays do not, so
 * passes hold ids across any call that may add a value or a node.
 *
 * Only the loader and the ONNX writers touch protobuf; everything else sees this. */
#ifndef VP_IR_H
#define VP_IR_H

#include <stddef.h>
#include <stdint.h>

#include "ir/vp_status.h"

#define VP_MAX_RANK 8

/* Numbered as ONNX's TensorProto.DataType so conversion is a cast. */
typedef enum vp_dtype {
    VP_UNDEFINED = 0,
    VP_F32 = 1,
    VP_U8 = 2,
    VP_I8 = 3,
    VP_U16 = 4,
    VP_I16 = 5,
    VP_I32 = 6,
    VP_I64 = 7,
    VP_STRING = 8,
    VP_BOOL = 9,
    VP_F16 = 10,
    VP_F64 = 11,
    VP_U32 = 12,
    VP_U64 = 13,
    VP_C64 = 14,
    VP_C128 = 15,
    VP_BF16 = 16,
    VP_DTYPE_COUNT_ = 24,
} vp_dtype;

size_t vp_dtype_size(vp_dtype t);        /* bytes per element; 0 for types we cannot store */
const char *vp_dtype_name(vp_dtype t);   /* "float32", "int64", ... */
int vp_dtype_is_float(vp_dtype t);       /* f16 bf16 f32 f64 */
int vp_dtype_is_int(vp_dtype t);         /* signed and unsigned integers, not bool */

/* A dense row-major tensor view.  Who owns data is said where a tensor is made. */
typedef struct vp_tensor {
    vp_dtype dtype;
    int rank;
    int64_t dims[VP_MAX_RANK];
    void *data;
} vp_tensor;

int64_t vp_tensor_numel(const vp_tensor *t);
size_t vp_tensor_nbytes(const vp_tensor *t);

/* Value flags. */
enum {
    VP_VAL_INPUT = 1u << 0,       /* a graph input the caller feeds */
    VP_VAL_OUTPUT = 1u << 1,      /* a graph output */
    VP_VAL_INITIALIZER = 1u << 2, /* an initializer (a parameter when float) */
    VP_VAL_CONST = 1u << 3,       /* data known ahead of time and not trainable: Constant, folded */
    VP_VAL_FED = 1u << 4,         /* data bound by the caller for shape inference (eval, tests) */
    VP_VAL_PARAM = 1u << 5,       /* a trainable parameter of a training step */
    VP_VAL_STATE = 1u << 6,       /* state carried across steps: optimizer moments, running statistics */
    VP_VAL_OUTER = 1u << 7,       /* in a subgraph (a Loop body, an If branch): a value of the enclosing scope */
    VP_VAL_HOST = 1u << 8,        /* kept in host memory, outside the device arena (planner/train/offload.h) */
    VP_VAL_WORKSPACE = 1u << 9,   /* a step's scratch bytes (cuBLAS, cuDNN), read and written by that step
                                     only, through the plan (memory/workspace.h), not as a node input */
};

typedef enum vp_data_owner {
    VP_DATA_NONE = 0,
    VP_DATA_HEAP,     /* malloc'd, freed with the graph */
    VP_DATA_BORROWED, /* points into the loaded protobuf or an external-data mapping */
} vp_data_owner;

typedef struct vp_value {
    char *name;
    vp_dtype dtype;                   /* VP_UNDEFINED until inferred */
    int rank;                         /* -1 until inferred */
    int64_t dims[VP_MAX_RANK];
    char *dim_param[VP_MAX_RANK];     /* symbolic dim names of graph inputs, NULL once bound */
    unsigned flags;
    void *data;                       /* constant data when known ahead of time */
    vp_data_owner data_owner;
    int producer;                     /* node id, -1 for inputs, initializers */
    int n_consumers;
    int *consumers;                   /* node ids, one entry per use */
} vp_value;

typedef enum vp_attr_type {
    VP_ATTR_UNDEFINED = 0,
    VP_ATTR_FLOAT = 1,
    VP_ATTR_INT = 2,
    VP_ATTR_STRING = 3,
    VP_ATTR_TENSOR = 4,
    VP_ATTR_GRAPH = 5,
    VP_ATTR_FLOATS = 6,
    VP_ATTR_INTS = 7,
    VP_ATTR_STRINGS = 8,
    VP_ATTR_TENSORS = 9,
    VP_ATTR_GRAPHS = 10,
    VP_ATTR_SPARSE_TENSOR = 11,
    VP_ATTR_SPARSE_TENSORS = 12,
    VP_ATTR_TYPE_PROTO = 13,
    VP_ATTR_TYPE_PROTOS = 14,
} vp_attr_type;

typedef struct vp_attr {
    char *name;
    vp_attr_type type;
    float f;
    int64_t i;
    char *s;            /* NUL-terminated copy of a string attribute */
    int n;              /* element count of floats / ints / strings */
    float *floats;
    int64_t *ints;
    char **strings;
    vp_tensor *t;       /* tensor attribute, data owned by the graph */
    struct vp_graph *graph; /* graph attribute (Loop body, If branch), owned; NULL when not loaded */
} vp_attr;

/* Phases a node can belong to in a training step. */
typedef enum vp_phase {
    VP_PHASE_FORWARD = 0,
    VP_PHASE_LOSS,
    VP_PHASE_BACKWARD,
    VP_PHASE_RECOMPUTE,
    VP_PHASE_OPTIMIZER,
    VP_PHASE_COMM,
} vp_phase;

struct vp_op_def;

/* A Gather that torch 2.x's exporter wrote for nn.Embedding (its fx_node metadata,
 * onnx/torch_meta.h): what torch's training does that the graph cannot say. */
typedef struct vp_embedding_hint {
    int from_embedding;     /* 1: aten.embedding; the rest is meaningful */
    int64_t padding_idx;    /* the row whose gradient torch keeps at 0; -1: none */
    int scale_grad_by_freq; /* torch scales each row's gradient by 1 / its count */
} vp_embedding_hint;

typedef struct vp_node {
    char *name;
    char *op_type;
    char *domain;                 /* "" for ai.onnx, "com.microsoft", ... */
    int opset;                    /* version of the node's domain the model imports */
    const struct vp_op_def *op;   /* NULL until resolved, or when unsupported */
    int n_inputs;
    int *inputs;                  /* value ids; -1 for an omitted optional input */
    int n_outputs;
    int *outputs;                 /* value ids; -1 for an omitted optional output */
    int n_attrs;
    vp_attr *attrs;
    int folded;                   /* every output was computed ahead of time */
    vp_phase phase;
    int precision;                /* later: the dtype the node computes in */
    int rank_id;                  /* later: tensor-parallel rank */
    char *module;                 /* the module the exporter says the node came from
                                     ("m.model.layers.3.mlp": torch 2.x's name_scopes),
                                     NULL when it says none; nodes passes add have none */
    vp_embedding_hint embedding;  /* a Gather from torch's nn.Embedding; zeros otherwise */
} vp_node;

typedef struct vp_mapping {
    char *path;                   /* the file mapped, so each is mapped once */
    void *addr;
    size_t len;
} vp_mapping;

typedef struct vp_graph {
    char *path;                   /* the model file, for messages */
    char *graph_name;
    char *producer;               /* "pytorch 2.1" ... */
    int64_t ir_version;
    int opset_onnx;               /* imported ai.onnx version, 0 if none */
    int opset_ms;                 /* imported com.microsoft version, 0 if none */

    int n_values, cap_values;
    vp_value *values;
    int n_nodes, cap_nodes;
    vp_node *nodes;
    int n_inputs;
    int *inputs;                  /* fed graph inputs (initializers excluded) */
    int n_outputs;
    int *outputs;

    /* name -> value id, open addressing */
    int *name_slots;
    int n_name_slots;
    int unique_counter;           /* suffix where vp_graph_add_unique_value resumes */

    int n_mappings;
    vp_mapping *mappings;         /* mmaps of the model and its external data */
    void *proto;                  /* the unpacked ModelProto that borrowed data points into */
    void (*proto_free)(void *);
    int proto_borrowed;           /* proto is the graph's this one was cloned from (which
                                     outlives it, as its data does): read, never freed */
} vp_graph;

vp_graph *vp_graph_new(void);
void vp_graph_free(vp_graph *g);

int vp_graph_find_value(const vp_graph *g, const char *name);     /* id or -1 */
/* Adds a value of that name; -1 when out of memory or the name exists. */
int vp_graph_add_value(vp_graph *g, const char *name);
/* Adds a node; inputs and outputs are value ids (-1 for omitted).  Returns node id or -1. */
int vp_graph_add_node(vp_graph *g, const char *op_type, const char *domain, const char *name,
                      int n_inputs, const int *inputs, int n_outputs, const int *outputs);
/* Recomputes every value's producer and consumers from the nodes. */
vp_status vp_graph_link(vp_graph *g, vp_error *err);
/* Makes a unique value name from a stem ("x" -> "x", "x_1", ...) and adds it. */
int vp_graph_add_unique_value(vp_graph *g, const char *stem);

/* A deep copy of the graph's structure; constant data, and the loaded model's metadata,
 * are borrowed from g, which must outlive the copy.  NULL when out of memory. */
vp_graph *vp_graph_clone(const vp_graph *g);
/* Reorders the nodes: order[i] is the id of the node that becomes node i (a
 * permutation of all node ids); producers and consumers are relinked. */
vp_status vp_graph_reorder(vp_graph *g, const int *order, vp_error *err);
/* Keeps the n nodes listed in keep (distinct ids), in that order, and frees the rest
 * (passes that replace nodes: fusion); producers and consumers are relinked.  Values
 * stay: those only removed nodes touched are left without producer or consumer. */
vp_status vp_graph_keep_nodes(vp_graph *g, const int *keep, int n, vp_error *err);

/* Attaches constant data to a value, replacing any it had. */
void vp_value_set_data(vp_graph *g, int id, void *data, vp_data_owner owner);
/* A view of a value as a tensor (data may be NULL). */
vp_tensor vp_value_tensor(const vp_value *v);
int64_t vp_value_numel(const vp_value *v);
int vp_value_known(const vp_value *v); /* dtype and shape inferred */

const vp_attr *vp_node_attr(const vp_node *n, const char *name);
int64_t vp_attr_int(const vp_node *n, const char *name, int64_t dflt);
float vp_attr_float(const vp_node *n, const char *name, float dflt);
const char *vp_attr_string(const vp_node *n, const char *name, const char *dflt);
/* Number of ints in the attribute, -1 when absent; *out points at them. */
int vp_attr_ints(const vp_node *n, const char *name, const int64_t **out);
int vp_attr_floats(const vp_node *n, const char *name, const float **out);
/* An ints attribute that must hold exactly `want` values, each at least `min`, into out
 * (dflt each where it is absent; *given, when not NULL, says whether it is there); fails
 * naming the node and the attribute otherwise. */
vp_status vp_attr_ints_checked(const vp_node *n, const char *name, int want, int64_t dflt, int64_t min, int64_t *out,
                               int *given, vp_error *err);
/* Adds (copying) an attribute to a node. */
vp_status vp_node_add_attr_int(vp_graph *g, int node, const char *name, int64_t v);
/* Sets an int attribute, replacing one of that name (of any type) the node has. */
vp_status vp_node_set_attr_int(vp_graph *g, int node, const char *name, int64_t v);
vp_status vp_node_add_attr_float(vp_graph *g, int node, const char *name, float v);
vp_status vp_node_add_attr_ints(vp_graph *g, int node, const char *name, const int64_t *v, int n);
vp_status vp_node_add_attr_string(vp_graph *g, int node, const char *name, const char *s);

/* Cast fusion (planner/precision/cast_fuse.h): a node whose attribute "vplan_cast"
 * (ints, triples: output index, dtype computed, dtype stored) lists output k computes
 * that output in `from` exactly as it would without the attribute, then converts it on
 * store to `to` as a Cast does.  Whether output k is such an output, and its dtypes. */
#define VP_CAST_ATTR "vplan_cast"
int vp_node_cast_output(const vp_node *n, int k, vp_dtype *from, vp_dtype *to);

/* A deep copy of src into dst: 1, or 0 when out of memory (dst then holds what was
 * copied so far, for vp_attr_clear). */
int vp_attr_copy(vp_attr *dst, const vp_attr *src);
/* Frees what the attribute owns (not the attribute itself). */
void vp_attr_clear(vp_attr *a);
/* Copies the attributes of node src onto node dst (both in g). */
vp_status vp_node_copy_attrs(vp_graph *g, int dst, int src);
/* The same from a node of another graph (a Loop body's, copied into g). */
vp_status vp_node_copy_attrs_from(vp_graph *g, int dst, const vp_node *src);

/* Fails with "node 'NAME' (OpType): ..." so every node error names the node. */
vp_status vp_node_fail(vp_error *err, vp_status code, const vp_node *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Formats a shape as "[2, 3, 4]" into buf. */
const char *vp_shape_str(int rank, const int64_t *dims, char *buf, size_t len);

#endif
