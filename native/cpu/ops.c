/* ops.c: one path's function table, compiled once per path. */
#include "common.h"

int KVS_FN(kvs_quantize_acts)(uint32_t, const float *, int64_t, int64_t, void *);
int KVS_FN(kvs_matmul)(uint32_t, const void *, int64_t, int64_t, int64_t, int64_t, const float *, const void *,
                       int64_t, float *);
int KVS_FN(kvs_matmul_packed)(uint32_t, const void *, int64_t, int64_t, int64_t, int64_t, const void *, int64_t,
                              float *);
int KVS_FN(kvs_rmsnorm)(float *, const float *, const float *, int64_t, int64_t, float);
int KVS_FN(kvs_rope)(float *, int64_t, int64_t, int64_t, int64_t, const int32_t *, float, float, const float *, int);
int KVS_FN(kvs_swiglu)(float *, const float *, const float *, int64_t);
int KVS_FN(kvs_add)(float *, const float *, int64_t);
int KVS_FN(kvs_attention)(const struct kvs_kv_plane *, const struct kvs_kv_plane *, int32_t, int64_t, int32_t, int32_t, int32_t, int32_t, float,
                          const float *, const int32_t *, const int32_t *, const int64_t *, const uint8_t *const *,
                          float *, float *);

const struct kvs_ops KVS_CAT(kvs_ops, KVS_SUFFIX) = {
    KVS_FN(kvs_quantize_acts), KVS_FN(kvs_matmul), KVS_FN(kvs_matmul_packed), KVS_FN(kvs_rmsnorm),
    KVS_FN(kvs_rope),          KVS_FN(kvs_swiglu), KVS_FN(kvs_add),           KVS_FN(kvs_attention),
};
