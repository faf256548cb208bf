#include "op_registry.h"

const vp_op_def vp_ops_train[] = {
    {0},
};
