/* backend_cuda_step: how backend_cuda.cu runs a step's ops: each op becomes a record
 * (op_t) of everything its launch reads; launch_op launches one; issue launches it at once
 * or, in a decode step, holds it; flush hands the held ops to ck_graph_run (cuda_graph.cu),
 * which replays a graph of an equal step, captures one, or launches them one by one.
 *
 * Included by backend_cuda.cu alone, inside its anonymous namespace, after cuda_t, C(),
 * the CU and BLAS macros and blas_type (it is that file's ops section, kept apart for
 * length). */
#ifndef TWIN_BACKEND_CUDA_STEP_CUH
#define TWIN_BACKEND_CUDA_STEP_CUH

/* An op of the step, as recorded: everything its launch reads besides the step's batch
 * (c->batch) and pool (c->kv), which stay as they are until the next prepare or kv_init.
 * No padding, and zeroed before it is filled, so that equal ops are equal bytes. */
enum op_kind { OP_EMBED, OP_GEMV, OP_GEMM, OP_RMSNORM, OP_ROPE, OP_ATTN, OP_SILU, OP_ADD,
               OP_GATHER };
static const char *const OP_NAME[] = {"embed", "matmul (gemv)", "cublasGemmEx", "rmsnorm",
                                      "rope_kv", "attention", "silu_mul", "add", "gather_rows"};
struct op_t {
    int32_t kind, i[5];
    const void *p[5];
    float f;
    int32_t unused;
    size_t z;
};
static_assert(sizeof(op_t) == 6 * 4 + 5 * sizeof(void *) + 8 + sizeof(size_t),
              "op_t has padding: equal ops would not be equal bytes");

/* Launches one op on the stream; 0, or -1 with the message. */
int launch_op(backend_t *b, const op_t *o) {
    cuda_t *c = C(b);
    void *out = (void *)o->p[0];
    cudaError_t e = cudaSuccess;
    switch (o->kind) {
    case OP_EMBED: e = ck_embed(c->st, c->dt, (float *)out, o->p[1], o->i[0], &c->batch); break;
    case OP_GEMV:
        e = ck_gemv(c->st, c->dt, out, o->i[3], o->p[1], o->p[2], o->i[0], o->i[1], o->i[2]);
        break;
    case OP_GEMM: {
        /* row-major y[m][n] = x[m][k] w[n][k]^T is column-major y^T = w x^T */
        const float one = 1.0f, zero = 0.0f;
        const int32_t m = o->i[0], n = o->i[1], k = o->i[2];
        cudaDataType_t t = blas_type(c->dt), yt = o->i[3] ? CUDA_R_32F : t;
        BLAS(b, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, o->p[2], t, k,
                             o->p[1], t, k, &zero, out, yt, n, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
        return 0;
    }
    case OP_RMSNORM:
        e = ck_rmsnorm(c->st, c->dt, out, (float *)o->p[1], o->p[2], o->p[3], o->i[0], o->i[1],
                       o->f);
        break;
    case OP_ROPE:
        e = ck_rope_kv(c->st, &c->kv, o->i[0], out, (void *)o->p[1], o->p[2], o->i[1],
                       (const float *)o->p[3], &c->batch);
        break;
    case OP_ATTN:
        e = ck_attention(c->st, &c->kv, o->i[0], out, o->p[1], o->i[1], &c->batch,
                         (float *)o->p[2]);
        break;
    case OP_SILU: e = ck_silu_mul(c->st, c->dt, out, o->p[1], o->p[2], o->z); break;
    case OP_ADD: e = ck_add(c->st, c->dt, out, 0, o->p[1], 0, o->z); break;
    default: e = ck_gather_rows(c->st, out, o->p[1], o->i[0], o->z, &c->batch); break;
    }
    CU(b, e, OP_NAME[o->kind]);
    return 0;
}

/* A decode step's ops are held until the step's end (flush) and run as one graph; any
 * other op runs at once. */
int issue(backend_t *b, const op_t *o) {
    cuda_t *c = C(b);
    if (!c->deferring) return launch_op(b, o);
    if (c->n_ops == c->cap_ops) {
        size_t cap = c->cap_ops ? 2 * c->cap_ops : 512;
        op_t *ops = (op_t *)realloc(c->ops, cap * sizeof *ops);
        if (!ops) return bk_fail(b, "cuda: out of host memory (a step's ops)");
        c->ops = ops;
        c->cap_ops = cap;
    }
    c->ops[c->n_ops++] = *o;
    return 0;
}

cudaError_t launch_held(void *ctx) {
    backend_t *b = (backend_t *)ctx;
    cuda_t *c = C(b);
    for (size_t i = 0; i < c->n_ops; i++)
        if (launch_op(b, &c->ops[i])) return cudaErrorLaunchFailure;
    return cudaSuccess;
}

/* Runs the held ops of the step (ck_graph_run: a graph when the same step came before);
 * every entry point that is not an op of the step calls it first, so that nothing is
 * reordered around the held ops. The key is the batch's device pointers and host scalars,
 * the pool's (a kv_init may move it), then the ops. */
int flush(backend_t *b) {
    cuda_t *c = C(b);
    c->deferring = 0;
    if (!c->n_ops) return 0;
    size_t ops_bytes = c->n_ops * sizeof(op_t), head = sizeof(ck_batch_t) + sizeof(ck_kv_t);
    size_t need = head + ops_bytes;
    if (need > c->key_cap) {
        char *k = (char *)realloc(c->key, need);
        if (!k) {
            c->n_ops = 0;
            return bk_fail(b, "cuda: out of host memory (a step's graph key)");
        }
        c->key = k;
        c->key_cap = need;
    }
    memcpy(c->key, &c->batch, sizeof(ck_batch_t));
    memcpy(c->key + sizeof(ck_batch_t), &c->kv, sizeof(ck_kv_t));
    memcpy(c->key + head, c->ops, ops_bytes);
    const char *what = "";
    b->errmsg[0] = 0;
    cudaError_t e = ck_graph_run(c->graphs, c->st, c->key, need, launch_held, b, &what);
    c->n_ops = 0;
    if (e != cudaSuccess) return what[0] ? cu_fail(b, what, e) : -1;
    return 0;
}

op_t op_new(int kind) {
    op_t o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    return o;
}

#endif
