/* The gradient check's harness: building one-op cases and checking their gradients
 * (gradcheck_harness.c says how, and with what tolerances).
 *
 * A case is written as
 *
 *     gc_case k;
 *     if (gc_begin(&k, 13, "Mul(x, x)[3,2]")) {   // 0: the filter skips it
 *         int x = gc_param(&k, UNI, DIMS(3, 2));  // a trainable parameter
 *         gc_op(&k, "Mul", 2, (int[]){x, x});     // the op; its output 0 goes into the loss
 *         gc_run(&k);                             // checks, prints PASS/FAIL, frees
 *     }
 *
 * and the same code runs once per dtype pass (and once more for the float64 twin of
 * each lower-precision case), so a case must build the same graph, in the same order,
 * every time: its number in the pass is its seed and the key of its float64 reference.
 * gc_check_all drives the passes. */
#ifndef VP_TEST_GRADCHECK_HARNESS_H
#define VP_TEST_GRADCHECK_HARNESS_H

#include <stdint.h>

#include "ir/ir.h"
#include "ir/rng.h"

/* How a parameter's values are drawn. */
typedef enum gen_kind {
    GEN_UNIFORM,  /* uniform in [lo, hi] */
    GEN_AWAY,     /* uniform in [lo, hi], at least 0.01 from 0 and from +-0.5 (kinks) */
    GEN_DISTINCT, /* a shuffled grid over [lo, hi]: all values distinct, no ties */
} gen_kind;

typedef struct gen {
    gen_kind kind;
    double lo, hi;
} gen;

/* The usual draws: [-1,1] (plain, away from kinks, distinct), [0.5,2], all ones,
 * distinct over [-4.5,4.5] (the hard activations' ramps and both flats), [-0.9,0.9]
 * (inside asin's, acos's and atanh's domains), [1.2,3] (inside acosh's). */
extern const gen UNI, AWAY, DISTINCT, POS, ONES, HARD, HALF, ABOVE1;

typedef struct gc_case {
    vp_graph *g;
    vp_rng rng;
    char label[256];
    int n_loss;
    int loss_from[16]; /* values summed into the loss */
    int n_params;
    int index;               /* the case's number in a pass: its seed and its float64 reference */
    const char *refusal;     /* expected: the build refuses, saying this */
    int raw;                 /* differentiate the graph as it is: no training-mode rewrite */
    const double *expect[4]; /* exact float64 gradients expected (at kinks, where finite
                              * differences cannot judge), with the loss sum(y) */
} gc_case;

/* A shape literal as the (rank, dims) argument pair: DIMS(2, 3) is 2, (int64_t[]){2, 3}. */
#define DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

/* The float type the running pass tests. */
vp_dtype gc_dtype(void);
/* Whether the case being built is the float64 twin of a lower-precision one (its values
 * are stored as float64, rounded to gc_dtype()). */
int gc_is_reference(void);

/* ---- building a case ---- */

/* Starts a case; returns 0 (and builds nothing) when the filter skips it. */
int gc_begin(gc_case *k, int opset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An initializer of the pass's dtype: a trainable parameter. */
int gc_param(gc_case *k, gen ge, int rank, const int64_t *dims);
/* A random constant (not trained) of the pass's dtype. */
int gc_const(gc_case *k, gen ge, int rank, const int64_t *dims);
/* Constants: a scalar of the pass's dtype, an int64 vector, booleans. */
int gc_scalar(gc_case *k, double x);
int gc_ints(gc_case *k, int n, const int64_t *v);
int gc_bools(gc_case *k, int rank, const int64_t *dims, const unsigned char *v);
int gc_bool(gc_case *k, int v);
/* The op under test; out receives its n_out output ids.  Returns the node. */
int gc_node(gc_case *k, const char *op, const char *domain, int n_in, const int *in, int n_out, int *out);
/* Adds value v to the loss. */
void gc_loss_on(gc_case *k, int v);
/* The op's output 0 goes into the loss: the common one-output case.  Returns the node. */
int gc_op(gc_case *k, const char *op, int n_in, const int *in);
/* Attributes of the node: int, float, ints, string. */
void attr_i(gc_case *k, int node, const char *name, int64_t v);
void attr_f(gc_case *k, int node, const char *name, double v);
void attr_is(gc_case *k, int node, const char *name, int n, const int64_t *v);
void attr_s(gc_case *k, int node, const char *name, const char *s);
/* Sets parameter p's values (already drawn) to v, in the pass's storage dtype. */
void gc_set_values(gc_case *k, int p, int n, const double *v);
/* The number of elements of a shape. */
int64_t gc_numel(int rank, const int64_t *dims);

/* ---- running ---- */

/* Runs the case built since gc_begin, prints its line and frees its graph. */
void gc_run(gc_case *k);

/* Runs cases() in every dtype pass (float64 against finite differences, then float32,
 * float16 and bfloat16 against float64 twins), only the cases whose label contains
 * filter (all when NULL); prints "N passed, N failed" and returns the exit code. */
int gc_check_all(const char *filter, void (*cases)(void));

#endif
