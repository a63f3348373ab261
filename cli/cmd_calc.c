/* cmd_calc: the teaching calculators `kv`, `roofline` and `presets` (see cli.h).
 *
 * They print their formulas with the numbers plugged in, because they are read by people
 * learning where serving time and memory go. Every figure comes from sim/presets and the
 * roofline cost model, so what they teach is what the simulator does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/model.h"
#include "sim/cost.h"
#include "sim/parallel.h"
#include "sim/cost_file.h"
#include "sim/presets.h"
#include "sim/serving.h"

#define MEM_FRACTION 0.9  /* share of device memory a serving engine gets (vLLM's default) */

/* ---- option parsing ------------------------------------------------------------------- */

/* Matches argv[*i] against "--name VALUE" or "--name=VALUE". Returns 1 with *val set (and *i
 * advanced past a separate value), 0 when argv[*i] is another option, -1 when the value is
 * missing (message printed). */
static int opt_take(const char *cmd, int argc, char **argv, int *i, const char *name,
                    const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "twinserve %s: %s needs a value (see --help)\n", cmd, name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

static int parse_long(const char *cmd, const char *opt, const char *s, long lo, long *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > 2147483647L) {
        fprintf(stderr, "twinserve %s: %s: '%s' is not an integer >= %ld\n", cmd, opt, s, lo);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_positive(const char *cmd, const char *opt, const char *s, double *out) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v <= 0) {
        fprintf(stderr, "twinserve %s: %s: '%s' is not a positive number (e.g. 2.0e12)\n",
                cmd, opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Element size of a dtype name; 0 when unknown. */
static int dtype_bytes(const char *s) {
    if (!strcmp(s, "fp16") || !strcmp(s, "bf16")) return 2;
    if (!strcmp(s, "fp8")) return 1;
    if (!strcmp(s, "fp32")) return 4;
    return 0;
}

static const char *dtype_name(int bytes) {
    return bytes == 1 ? "fp8" : bytes == 2 ? "fp16/bf16" : bytes == 4 ? "fp32" : "?";
}

static int unknown_option(const char *cmd, const char *a) {
    fprintf(stderr, "twinserve %s: unknown option '%s' (see --help)\n", cmd, a);
    return 2;
}

/* ---- number formatting ---------------------------------------------------------------- */

/* An integral value with thousands separators ("1,342,177,280"). buf holds >= 32 chars. */
static const char *fmt_int(double v, char *buf) {
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", fabs(v));
    size_t n = strlen(digits), o = 0;
    if (v < 0) buf[o++] = '-';
    for (size_t k = 0; k < n; k++) {
        if (k && (n - k) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[k];
    }
    buf[o] = '\0';
    return buf;
}

/* Scientific notation the way people write it: "2e12", "2.039e12", "1.3795e11". buf
 * holds >= 32 chars. */
static const char *fmt_e(double v, char *buf) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%.4e", v);
    char *e = strchr(tmp, 'e');
    if (!e) return strcpy(buf, tmp);
    char *m_end = e;
    while (m_end > tmp && m_end[-1] == '0') m_end--;
    if (m_end > tmp && m_end[-1] == '.') m_end--;
    int exp = atoi(e + 1);
    snprintf(buf, 32, "%.*se%d", (int)(m_end - tmp), tmp, exp);
    return buf;
}

/* Bytes as "13.48 GB", or "1.04 MB" below a gigabyte (decimal units). */
static const char *fmt_gb(double v, char *buf) {
    if (v >= 1e9) snprintf(buf, 32, "%.2f GB", v / 1e9);
    else snprintf(buf, 32, "%.2f MB", v / 1e6);
    return buf;
}

/* A parameter count as "6.74B", "135M", "260K". */
static const char *fmt_count(double v, char *buf) {
    if (v >= 1e9) snprintf(buf, 32, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(buf, 32, "%.0fM", v / 1e6);
    else snprintf(buf, 32, "%.0fK", v / 1e3);
    return buf;
}

/* ---- kv ------------------------------------------------------------------------------- */

static void kv_counterparts(const preset_model_t *m, double per_tok);
static void kv_window_saving(const preset_model_t *m, double ctx);

static void kv_usage(FILE *f) {
    fputs("usage: twinserve kv --model NAME --seq N [--batch B] [--dtype fp16|bf16|fp8|fp32]\n"
          "                    [--tp N]\n"
          "KV-cache size of a model: per token, per sequence of N tokens, per batch of B\n"
          "sequences, and how many such sequences fit on each built-in GPU beside the weights.\n"
          "  --model NAME   built-in model (see `twinserve presets`), a .model preset file\n"
          "                 or a Hugging Face config.json (docs/models.md)\n"
          "  --seq N        tokens per sequence (prompt + output)\n"
          "  --batch B      sequences (default 1)\n"
          "  --dtype T      KV element type (default: the model's dtype_bytes); weights stay\n"
          "                 at the model's dtype\n"
          "  --tp N         GPUs per replica for the fit table (default 1)\n"
          "exit status: 0 ok, 1 the model could not be loaded, 2 usage error\n", f);
}

int cmd_kv(int argc, char **argv) {
    const char *cmd = "kv", *model = NULL, *val = NULL;
    long seq = 0, batch = 1, tp = 1;
    int kvb = 0, r;
    char err[512], a[32], b[32], c[32];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            kv_usage(stdout);
            return 0;
        }
        if ((r = opt_take(cmd, argc, argv, &i, "--model", &val)) != 0) {
            if (r < 0) return 2;
            model = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--seq", &val)) != 0) {
            if (r < 0 || parse_long(cmd, "--seq", val, 1, &seq) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--batch", &val)) != 0) {
            if (r < 0 || parse_long(cmd, "--batch", val, 1, &batch) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--tp", &val)) != 0) {
            if (r < 0 || parse_long(cmd, "--tp", val, 1, &tp) != 0) return 2;

        } else if ((r = opt_take(cmd, argc, argv, &i, "--dtype", &val)) != 0) {
            if (r < 0) return 2;
            if (!(kvb = dtype_bytes(val))) {
                fprintf(stderr, "twinserve kv: --dtype: '%s' is not fp16, bf16, fp8 or fp32\n",
                        val);
                return 2;
            }
        } else {
            return unknown_option(cmd, argv[i]);
        }
    }
    if (!model || !seq) {
        fprintf(stderr, "twinserve kv: %s is required\n", !model ? "--model" : "--seq");
        kv_usage(stderr);
        return 2;
    }
    preset_model_t m;
    char note[768];
    if (model_shape_resolve(model, &m, note, sizeof note, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve kv: %s\n", err);
        return 1;
    }
    double weights = preset_model_weight_bytes(&m);
    preset_model_t mk = m;  /* the KV-cache view: element size from --dtype */
    if (kvb) mk.dtype_bytes = mk.kv_dtype_bytes = kvb;
    double per_tok = preset_model_kv_bytes_per_token(&mk);
    double per_seq = preset_model_kv_bytes_at(&mk, (double)seq), per_batch = per_seq * (double)batch;

    printf("KV cache of %s, %s elements (%d byte%s)\n", m.name, dtype_name(mk.dtype_bytes),
           (int)mk.dtype_bytes, mk.dtype_bytes == 1 ? "" : "s");
    if (m.kv_lora_rank > 0)
        printf("  %d layers, multi-head latent attention: %d query heads, and per token and "
               "layer one\n  latent of %d plus a rope key of %d, shared by every head (keys and "
               "values are\n  expanded from the latent when attention runs)\n", (int)m.n_layers,
               (int)m.n_heads, (int)m.kv_lora_rank, (int)m.qk_rope_head_dim);
    else
        printf("  %d layers, %d KV heads, head_dim %d; %d query heads: %s\n", (int)m.n_layers,
               (int)m.n_kv_heads, (int)m.head_dim, (int)m.n_heads,
               m.n_kv_heads < m.n_heads ? "grouped-query attention caches only the KV heads"
                                        : "every head caches its own K and V");
    if (m.sliding_window > 0)
        printf("  %d of the %d layers attend to the last %d tokens only (sliding window): they "
               "hold\n  at most %d tokens of KV, the others the whole context\n",
               (int)m.n_window_layers, (int)m.n_layers, (int)m.sliding_window,
               (int)m.sliding_window);
    if (preset_model_is_moe(&m))
        printf("  mixture of %d experts, %d per token (expert FFN %d): the cache holds\n"
               "  attention's K and V only, so the experts add to the weights, not to the cache\n",
               (int)m.n_experts, (int)m.experts_per_tok, (int)m.moe_d_ff);
    if (note[0]) printf("note: %s\n", note);
    putchar('\n');
    if (m.kv_lora_rank > 0) {
        printf("KV bytes per token = n_layers x (kv_lora_rank + qk_rope_head_dim) x bytes\n");
        printf("                   = %d x (%d + %d) x %d\n", (int)m.n_layers,
               (int)m.kv_lora_rank, (int)m.qk_rope_head_dim, (int)mk.dtype_bytes);
    } else {
        printf("KV bytes per token = 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes\n");
        printf("                   = 2 x %d x %d x %d x %d\n", (int)m.n_layers,
               (int)m.n_kv_heads, (int)m.head_dim, (int)mk.dtype_bytes);
    }
    printf("                   = %s B (%.1f KiB)\n", fmt_int(per_tok, a), per_tok / 1024);
    kv_counterparts(&mk, per_tok);
    if (m.sliding_window > 0) {
        kv_window_saving(&mk, (double)seq);
        char d[32];
        double layer = per_tok / m.n_layers;
        printf("per sequence       = %s B (%d full layers) x %s tokens\n"
               "                     + %s B (%d window layers) x %s tokens\n",
               fmt_int(layer * (m.n_layers - m.n_window_layers), a),
               (int)(m.n_layers - m.n_window_layers), fmt_int((double)seq, b),
               fmt_int(layer * m.n_window_layers, c), (int)m.n_window_layers,
               fmt_int(seq < m.sliding_window ? (double)seq : (double)m.sliding_window, d));
    } else {
        printf("per sequence       = %s B x %s tokens\n", fmt_int(per_tok, a),
               fmt_int((double)seq, b));
    }
    printf("                   = %s B = %.4g GB = %.4g GiB\n", fmt_int(per_seq, a),
           per_seq / 1e9, per_seq / 1073741824.0);
    printf("per batch          = %s B x %ld sequence%s\n", fmt_int(per_seq, a), batch,
           batch == 1 ? "" : "s");
    printf("                   = %s B = %.4g GB = %.4g GiB\n", fmt_int(per_batch, a),
           per_batch / 1e9, per_batch / 1073741824.0);
    if (seq > m.max_seq)
        printf("note: %ld tokens is beyond %s's context length of %d\n", seq, m.name,
               (int)m.max_seq);

    char experts[48] = "";
    if (preset_model_is_moe(&m))
        snprintf(experts, sizeof experts, ", all %d experts,", (int)m.n_experts);
    printf("\nSequences of %s tokens that fit beside the weights (%s params%s x %d B = %s)\n",
           fmt_int((double)seq, a), fmt_int(preset_model_params(&m), b), experts,
           (int)m.dtype_bytes, fmt_gb(weights, c));
    printf("budget = %ld GPU%s x memory x %.1f - weights; sequences = floor(budget / %.4g GB)\n",
           tp, tp == 1 ? "" : "s", MEM_FRACTION, per_seq / 1e9);
    printf("  %-10s %10s %12s  %s\n", "GPU", "memory", "budget", "sequences");
    for (int i = 0; preset_hw_at(i); i++) {
        const preset_hw_t *hw = preset_hw_at(i);
        double budget = (double)tp * hw->mem_bytes * MEM_FRACTION - weights;
        printf("  %-10s %7.1f GB %9.2f GB  ", hw->name, hw->mem_bytes / 1e9, budget / 1e9);
        if (budget <= 0) {
            double need = ceil(weights / (hw->mem_bytes * MEM_FRACTION));
            printf("0 (the weights do not fit: try --tp %.0f or more)\n", need);
        } else {
            double fit = floor(budget / per_seq);
            printf("%s%s\n", fmt_int(fit, c),
                   fit >= (double)batch ? "" : "  (fewer than --batch)");
        }
    }
    return 0;
}

/* What the same model would cache with full heads (MHA) and with 8 KV heads (GQA-8), as
 * the teaching comparison: MLA's latent against the per-head K and V it replaces, or GQA
 * against MHA. Keys are head_dim wide, values v_head_dim (MLA) or head_dim. */
static void kv_counterparts(const preset_model_t *m, double per_tok) {
    char a[32], b[32];
    double v = m->kv_lora_rank > 0 ? m->v_head_dim : m->head_dim;
    double per_head = (m->head_dim + v) * m->n_layers * m->dtype_bytes;
    double mha = per_head * m->n_heads, gqa8 = per_head * (m->n_heads < 8 ? m->n_heads : 8);
    if (m->kv_lora_rank > 0 || m->n_kv_heads < m->n_heads)
        printf("  the same model with MHA (%d KV heads) would cache %s B a token: %.1fx\n",
               (int)m->n_heads, fmt_int(mha, a), mha / per_tok);
    if (m->kv_lora_rank > 0 || m->n_kv_heads < 8)
        printf("  with GQA of 8 KV heads (keys %d and values %d wide): %s B: %.1fx (%s)\n",
               (int)m->head_dim, (int)v, fmt_int(gqa8, b), gqa8 / per_tok,
               m->kv_lora_rank > 0 ? "the latent is what MLA saves" : "fewer heads save more");
}

/* A sliding window's saving: the KV of a sequence at ctx against the same layers without
 * the window, at ctx and at 4k and 128k. */
static void kv_window_saving(const preset_model_t *m, double ctx) {
    preset_model_t full = *m;
    full.sliding_window = full.n_window_layers = 0;
    const double at[3] = {ctx, 4096, 131072};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && at[i] == ctx) continue;
        char a[32], b[32], c[32];
        double w = preset_model_kv_bytes_at(m, at[i]), f = preset_model_kv_bytes_at(&full, at[i]);
        printf("  at %s tokens: %s B a sequence with the window, %s B without: %.1f%% saved\n",
               fmt_int(at[i], a), fmt_int(w, b), fmt_int(f, c), 100 * (1 - w / f));
    }
}

/* ---- roofline ------------------------------------------------------------------------- */

static void roofline_usage(FILE *f) {
    fputs("usage: twinserve roofline --model NAME [--hw NAME | --bandwidth B/s] [--flops F]\n"
          "                          [--dtype fp16|bf16|fp8|fp32] [--ctx N] [--tp N]\n"
          "                          [--weight-format F] [--kv-dtype bf16|fp8] [--parallel SPEC]\n"
          "Where a model's serving time goes on a device: the decode bound from bandwidth, the\n"
          "ridge point, arithmetic intensity and predicted step times of 1024- and 2048-token prefills\n"
          "and of decode steps at batch 1, 8, 64 and 256.\n"
          "  --model NAME     built-in model, a .model preset file or a config.json\n"
          "  --hw NAME        built-in GPU or a .hw preset file (default a100-80g)\n"
          "  --bandwidth B/s  memory bandwidth in bytes/s (overrides --hw's; e.g. 2.0e12)\n"
          "  --flops F        peak dense FLOP/s (overrides --hw's; without it and --hw, only\n"
          "                   the bandwidth bound is printed)\n"
          "  --dtype T        weight and KV element type (default: the model's)\n"
          "  --ctx N          tokens already cached for each decode sequence (default 1024)\n"
          "  --weight-format F  the layers' weights: bf16, fp8 (W8A8, at the FP8 peak), int4 or\n"
          "                   mxfp4 (W4A16), nvfp4 (W4A4 where the GPU has FP4)\n"
          "  --kv-dtype bf16|fp8  the KV cache's element\n"
          "  --tp N           tensor-parallel degree: the step on each of N devices, with its\n"
          "                   all-reduces (default 1)\n"
          "  --parallel SPEC  tp=T,dp=D,ep=E,pp=P[,mb=M][,sched=async|sync]: data-parallel\n"
          "                   attention, expert and pipeline parallelism (docs/models.md); the\n"
          "                   FLOPs and bytes are one GPU's of the fullest stage, the step time\n"
          "                   the whole pipeline's\n"
          "exit status: 0 ok, 1 a preset could not be loaded, 2 usage error\n", f);
}

/* Prints one row of the shape table: the work of one device from cm, the step time from
 * pm (cm itself, or the pipeline of its stages). */
static void roofline_row(const cost_model_t *cm, const cost_model_t *pm, const char *label,
                         const cost_seq_t *seqs, int32_t n, double tokens) {
    cost_breakdown_t b;
    cost_roofline_explain(cm, seqs, n, &b);
    double t = pm == cm ? b.time_s : cost_step_time(pm, seqs, n);
    printf("  %-16s %10.3e %10.3e %9.1f  %-7s %9.3f ms %11.0f\n", label, b.flops, b.bytes,
           b.flops / b.bytes, b.compute_bound_s > b.memory_bound_s ? "compute" : "memory",
           t * 1e3, tokens / t);
}

int cmd_roofline(int argc, char **argv) {
    const char *cmd = "roofline", *model = NULL, *hwname = NULL, *val = NULL;
    const char *wformat = NULL, *kvdtype = NULL, *parspec = NULL;
    double bw = 0, flops = 0;
    long ctx = 1024, tp = 1;
    int wb = 0, r, rc = 1;
    char err[512], a[32], b1[32], b2[32];
    cost_model_t *cm = NULL, *pm = NULL;
    cost_seq_t *seqs = NULL;
    par_t par;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            roofline_usage(stdout);
            return 0;
        }
        if ((r = opt_take(cmd, argc, argv, &i, "--model", &val)) != 0) {
            if (r < 0) return 2;
            model = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--hw", &val)) != 0) {
            if (r < 0) return 2;
            hwname = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--bandwidth", &val)) != 0) {
            if (r < 0 || parse_positive(cmd, "--bandwidth", val, &bw) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--flops", &val)) != 0) {
            if (r < 0 || parse_positive(cmd, "--flops", val, &flops) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--ctx", &val)) != 0) {
            if (r < 0 || parse_long(cmd, "--ctx", val, 0, &ctx) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--tp", &val)) != 0) {
            if (r < 0 || parse_long(cmd, "--tp", val, 1, &tp) != 0) return 2;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--parallel", &val)) != 0) {
            if (r < 0) return 2;
            parspec = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--weight-format", &val)) != 0) {
            if (r < 0) return 2;
            wformat = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--kv-dtype", &val)) != 0) {
            if (r < 0) return 2;
            kvdtype = val;
        } else if ((r = opt_take(cmd, argc, argv, &i, "--dtype", &val)) != 0) {
            if (r < 0) return 2;
            if (!(wb = dtype_bytes(val))) {
                fprintf(stderr, "twinserve roofline: --dtype: '%s' is not fp16, bf16, fp8 or "
                        "fp32\n", val);
                return 2;
            }
        } else {
            return unknown_option(cmd, argv[i]);
        }
    }
    if (!model) {
        fprintf(stderr, "twinserve roofline: --model is required\n");
        roofline_usage(stderr);
        return 2;
    }
    par_default(&par, (int32_t)tp);
    if (parspec && par_parse(parspec, &par, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve roofline: --parallel: %s\n", err);
        return 2;
    }
    if (parspec && tp > 1 && par.tp != tp) {
        fprintf(stderr, "twinserve roofline: --tp %ld and --parallel %s disagree on the "
                "tensor-parallel degree (give it once, in the spec)\n", tp, parspec);
        return 2;
    }
    tp = par.tp;
    preset_model_t m;
    preset_hw_t hw;
    if (model_shape_resolve(model, &m, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve roofline: %s\n", err);
        goto done;
    }
    if (wb) m.dtype_bytes = wb;
    if ((wformat && preset_model_set_format(&m, wformat, err, sizeof err) != 0) ||
        (kvdtype && preset_model_set_kv_dtype(&m, kvdtype, err, sizeof err) != 0)) {
        fprintf(stderr, "twinserve roofline: %s\n", err);
        rc = 2;
        goto done;
    }
    if (hwname || !bw) {
        if (preset_hw_get(hwname ? hwname : "a100-80g", &hw, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve roofline: %s\n", err);
            goto done;
        }
    } else {
        /* Only a bandwidth: a nameless device; its memory size is not used here. */
        memset(&hw, 0, sizeof hw);
        snprintf(hw.name, sizeof hw.name, "a custom device");
        hw.mem_bytes = 1;
    }
    if (bw) hw.mem_bw = bw;
    if (flops) hw.flops = flops;

    double params = preset_model_params(&m), wbytes = preset_model_weight_bytes(&m);
    printf("Roofline of %s on %s%s, %s weights (%d byte%s%s%s)\n", m.name, hw.name,
           (!hwname && !bw) ? " (the default; choose with --hw)" : "", dtype_name(m.dtype_bytes),
           (int)m.dtype_bytes, m.dtype_bytes == 1 ? "" : "s",
           m.weight_bits > 0 ? ", the layers' matrices " : "",
           m.weight_bits > 0 ? preset_model_format_name(&m) : "");
    if (m.weight_bits > 0)
        printf("  parameters %s (%.2fe9): the layers' matrices in %s (%.4g B a weight with its "
               "scales), the rest at %d B = %s of weights\n", fmt_int(params, a), params / 1e9,
               preset_model_format_name(&m), preset_model_matrix_bytes(&m), (int)m.dtype_bytes,
               fmt_gb(wbytes, b1));
    else
        printf("  parameters %s (%.2fe9) x %d B = %s of weights\n", fmt_int(params, a),
               params / 1e9, (int)m.dtype_bytes, fmt_gb(wbytes, b1));
    printf("  bandwidth %s B/s", fmt_e(hw.mem_bw, a));
    if (hw.flops > 0) printf(", peak %s FLOP/s (dense)", fmt_e(hw.flops, a));
    if (preset_model_is_moe(&m)) {
        /* a token passes through its top-k experts only: batch 1 reads the active weights */
        double active = preset_model_active_weight_bytes(&m);
        printf("\n\nDecode upper bound at batch 1: each new token reads the weights it uses "
               "once\n  (a mixture of experts: its active %s of the %s)\n", fmt_gb(active, b1),
               fmt_gb(wbytes, b2));
        wbytes = active;
    } else {
        printf("\n\nDecode upper bound at batch 1: each new token reads every weight once\n");
    }
    if (tp > 1)
        printf("  tokens/s <= %ld x bandwidth / weight bytes = %ld x %s / %s = %.2f tokens/s\n",
               tp, tp, fmt_e(hw.mem_bw, b1), fmt_e(wbytes, b2), (double)tp * hw.mem_bw / wbytes);
    else
        printf("  tokens/s <= bandwidth / weight bytes = %s / %s = %.2f tokens/s\n",
               fmt_e(hw.mem_bw, b1), fmt_e(wbytes, b2), hw.mem_bw / wbytes);
    if (fabs(params / 70e9 - 1) < 0.05)
        printf("  (a round 70e9 parameters would give %.2f tokens/s)\n",
               hw.mem_bw / (70e9 * m.dtype_bytes));
    if (!(hw.flops > 0)) {
        printf("\n(give --flops or --hw for the ridge point and the step-time table)\n");
        rc = 0;
        goto done;
    }

    double ridge = hw.flops / hw.mem_bw;
    printf("\nRidge point = peak FLOP/s / bandwidth = %s / %s = %.2f FLOP/byte\n",
           fmt_e(hw.flops, b1), fmt_e(hw.mem_bw, b2), ridge);
    printf("  A decode step at batch B does 2 FLOPs per weight per sequence and reads each\n"
           "  weight (%d bytes) once, so its weight GEMMs run at 2 x B / %d FLOP/byte.\n",
           (int)m.dtype_bytes, (int)m.dtype_bytes);
    printf("  They turn compute bound at B >= ridge x bytes / 2 = %.2f x %d / 2 -> B = %.0f\n",
           ridge, (int)m.dtype_bytes, ceil(ridge * m.dtype_bytes / 2));

    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    p.tp = (int32_t)tp;
    preset_model_t stage = m;
    double p2p_lat = 0, p2p_spt = 0;
    if (!par_is_tp_only(&par)) {
        double a2a_lat, a2a_spt;
        par_stage_model(&m, &par, &stage);
        if (par_check(&par, &m, &hw, err, sizeof err) != 0 ||
            par_a2a(&par, &stage, &hw, p.bw_eff, &a2a_lat, &a2a_spt, err, sizeof err) != 0 ||
            par_p2p(&par, &stage, &hw, p.bw_eff, &p2p_lat, &p2p_spt, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve roofline: --parallel %s: %s\n", parspec, err);
            rc = 2;
            goto done;
        }
        par_apply_roofline(&par, a2a_lat, a2a_spt, &p);
        char spec[128];
        par_format(&par, spec, sizeof spec);
        printf("\nParallel %s: %d GPUs; the fullest stage has %d of the %d layers. FLOPs and "
               "bytes below\n  are one GPU's of that stage, a step's time the whole "
               "replica's", spec, (int)par_gpus(&par), (int)stage.n_layers, (int)m.n_layers);
        if (par.dp > 1)
            printf(" (a decode step of B sequences:\n  ceil(B / %d) on the busiest "
                   "data-parallel rank, the experts over all B; all-to-all %.1f us + %.3g us a token a MoE layer)",
                   (int)par.dp, a2a_lat * 1e6, a2a_spt * 1e6);
        if (par.pp > 1)
            printf(";\n  the pipeline hands %.3g us + %.3g us a token between stages",
                   p2p_lat * 1e6, p2p_spt * 1e6);
        printf(".\n");
    }
    if (cost_roofline_check(&stage, &hw, &p, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve roofline: %s\n", err);
        goto done;
    }
    if (!(cm = cost_roofline_new(&stage, &hw, &p))) {
        fprintf(stderr, "twinserve roofline: out of memory\n");
        goto done;
    }
    pm = cm;
    if (par.pp > 1) {
        /* the pipeline owns a second copy of the stage: cm stays for the breakdowns */
        cost_model_t *copy = cost_roofline_new(&stage, &hw, &p);
        if (!copy || !(pm = par_pipeline_new(copy, &par, p2p_lat, p2p_spt))) {
            pm = cm;
            fprintf(stderr, "twinserve roofline: out of memory\n");
            goto done;
        }
    }
    enum { MAX_B = 4096 };
    if (!(seqs = malloc(sizeof *seqs * MAX_B))) {
        fprintf(stderr, "twinserve roofline: out of memory\n");
        goto done;
    }
    for (int i = 0; i < MAX_B; i++) seqs[i] = (cost_seq_t){1, (int32_t)ctx, 1};
    /* With K/V reads the step's intensity saturates (each sequence brings its own cache), so
     * the whole step may never turn compute bound: search instead of a formula. */
    int whole = 0;
    for (int bsz = 1; bsz <= MAX_B && !whole; bsz++) {
        cost_breakdown_t b;
        cost_roofline_explain(cm, seqs, bsz, &b);
        if (b.compute_bound_s > b.memory_bound_s) whole = bsz;
    }
    printf("  The cost model reaches flops_eff %.2g of the peak and bw_eff %.2g of the bandwidth,\n"
           "  so its ridge is %.2f x %.2g / %.2g = %.2f FLOP/byte. ", p.flops_eff, p.bw_eff,
           ridge, p.flops_eff, p.bw_eff, ridge * p.flops_eff / p.bw_eff);
    if (whole)
        printf("Counting K/V reads at ctx %ld\n  and every operator, its decode step is mostly "
               "compute bound from B = %d.\n", ctx, whole);
    else
        printf("Counting K/V reads at ctx %ld\n  and every operator, its decode step is still "
               "memory bound at B = %d:\n  attention reads a cache for every sequence.\n", ctx,
               MAX_B);

    printf("\nStep shapes (cost model: flops_eff %.2g, bw_eff %.2g, attn_eff %.2g, overhead %.2g "
           "ms;\nFLOPs and bytes per step%s, intensity = FLOPs / bytes, bound = the side that "
           "takes longer):\n", p.flops_eff, p.bw_eff, p.attn_eff, p.overhead_s * 1e3,
           tp > 1 ? " and per device (the all-reduces' time in the step time)" : "");
    printf("  %-16s %10s %10s %9s  %-7s %12s %11s\n", "shape", "FLOPs", "bytes", "FLOP/B",
           "bound", "step time", "tokens/s");
    cost_seq_t prefill = {1024, 0, 1}, prefill2 = {2048, 0, 1};
    roofline_row(cm, pm, "prefill 1024", &prefill, 1, 1024);
    roofline_row(cm, pm, "prefill 2048", &prefill2, 1, 2048);
    static const int batches[] = {1, 8, 64, 256};
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
        char label[48];
        snprintf(label, sizeof label, "decode B=%d", batches[k]);
        roofline_row(cm, pm, label, seqs, batches[k], batches[k]);
    }
    printf("  (decode: 1 new token per sequence after %ld cached)\n", ctx);
    rc = 0;
done:
    free(seqs);
    if (pm != cm) cost_free(pm);
    cost_free(cm);
    return rc;
}

/* ---- presets -------------------------------------------------------------------------- */

int cmd_presets(int argc, char **argv) {
    char a[32];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            puts("usage: twinserve presets\n"
                 "Lists the built-in model shapes and GPUs. Any --model or --hw option also\n"
                 "takes a preset file: see sim/presets/*.model and *.hw for the format; --model\n"
                 "also takes a Hugging Face config.json (docs/models.md).");
            return 0;
        }
        return unknown_option("presets", argv[i]);
    }
    printf("Models (weights at their dtype; KV per token at a context inside every window:\n"
           "2 x layers x kv heads x head_dim x bytes, MLA's layers x (latent + rope key) x bytes;\n"
           "attn: MHA, GQA, MQA or MLA (latent attention); experts = routed experts per layer /\n"
           "per token (+S shared), \"-\" for dense; for a mixture of experts d_ff is each\n"
           "expert's, and params and weights count every expert; window = its tokens and the\n"
           "layers that use it):\n");
    printf("  %-16s %6s %7s %9s %8s %4s %6s %9s %10s %7s %8s %8s %10s %11s\n", "name",
           "layers", "d_model", "heads/kv", "head_dim", "attn", "d_ff", "experts", "window",
           "vocab", "context", "params", "weights", "KV/token");
    for (int i = 0; preset_model_at(i); i++) {
        const preset_model_t *m = preset_model_at(i);
        int moe = preset_model_is_moe(m);
        char heads[24], experts[32], kv[32], win[32];
        snprintf(heads, sizeof heads, "%d/%d", (int)m->n_heads, (int)m->n_kv_heads);
        if (moe) snprintf(experts, sizeof experts, "%d/%d%s", (int)m->n_experts,
                          (int)m->experts_per_tok, m->shared_d_ff > 0 ? "+S" : "");
        else snprintf(experts, sizeof experts, "-");
        if (m->sliding_window > 0)
            snprintf(win, sizeof win, "%d x%d", (int)m->sliding_window, (int)m->n_window_layers);
        else snprintf(win, sizeof win, "-");
        printf("  %-16s %6d %7d %9s %8d %4s %6d %9s %10s %7d %8d %8s %7.2f GB %9s B\n", m->name,
               (int)m->n_layers, (int)m->d_model, heads, (int)m->head_dim,
               preset_model_attention(m), (int)(moe ? m->moe_d_ff : m->d_ff), experts, win,
               (int)m->vocab, (int)m->max_seq, fmt_count(preset_model_params(m), a),
               preset_model_weight_bytes(m) / 1e9,
               fmt_int(preset_model_kv_bytes_per_token(m), kv));
    }
    /* what a token multiplies through, beside what must sit in memory */
    for (int i = 0; preset_model_at(i); i++) {
        const preset_model_t *m = preset_model_at(i);
        char b[32];
        if (!preset_model_is_moe(m)) continue;
        double all = preset_model_params(m);
        double active = preset_model_active_params(m);
        printf("  %s: %s of its %s parameters are active per token (%d of %d experts%s%s)\n",
               m->name, fmt_count(active, a), fmt_count(all, b), (int)m->experts_per_tok,
               (int)m->n_experts, m->shared_d_ff > 0 ? ", a shared one" : "",
               m->n_dense_layers > 0 ? ", dense first layers" : "");
    }
    printf("\nGPUs (datasheet figures: dense tensor peaks, memory in decimal GB, link (GPU to "
           "GPU)\nand network (scale-out, per GPU) per direction, node = GPUs one link domain "
           "joins (a\n--tp beyond it all-reduces over the network); - is none, unknown or not "
           "modelled):\n");
    printf("  %-10s %12s %12s %11s %11s %8s %10s %5s %9s %10s\n", "name", "bandwidth",
           "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "memory", "link", "node", "network",
           "all-reduce");
    int unmeasured = 0;
    for (int i = 0; preset_hw_at(i); i++) {
        const preset_hw_t *h = preset_hw_at(i);
        /* 0 is "none" or "unknown" in these columns, never a figure */
        char name[64], fp8[24] = "-", fp4[24] = "-", net[24] = "-", ar[24] = "-";
        snprintf(name, sizeof name, "%s%s", h->name, h->measured ? "" : "*");
        unmeasured |= !h->measured;
        if (h->flops_fp8 > 0) snprintf(fp8, sizeof fp8, "%.0f", h->flops_fp8 / 1e12);
        if (h->flops_fp4 > 0) snprintf(fp4, sizeof fp4, "%.0f", h->flops_fp4 / 1e12);
        if (h->net_bw > 0) snprintf(net, sizeof net, "%.0f GB/s", h->net_bw / 1e9);
        if (h->link_latency > 0) snprintf(ar, sizeof ar, "%.0f us", h->link_latency * 1e6);
        char node[16] = "-";
        if (h->node_gpus > 0) snprintf(node, sizeof node, "%d", (int)h->node_gpus);
        printf("  %-10s %7.3f TB/s %12.0f %11s %11s %5.0f GB %5.0f GB/s %5s %9s %10s\n", name,
               h->mem_bw / 1e12, h->flops / 1e12, fp8, fp4, h->mem_bytes / 1e9,
               h->link_bw / 1e9, node, net, ar);
    }
    if (unmeasured)
        printf("  * datasheet figures only, no measurement of this GPU in the data: the "
               "roofline's\n"
               "    efficiencies (flops_eff, bw_eff, attn_eff) are guesses for it, its all-reduce\n"
               "    latency is borrowed from a GPU with the same link or not modelled (-), and a\n"
               "    run on it says so\n");
    printf("\nShipped GPU calibrations (sim/costs/, from Vidur's measured operator profiles;\n"
           "`sim` uses one when its model, --hw and --tp match and no --cost is given):\n");
    for (int i = 0; i < cost_file_builtin_count(); i++)
        printf("  builtin:%s\n", cost_file_builtin_name(i));
    char names[256];
    serving_list_builtins(names, sizeof names);
    printf("\nOther models on h100 and a100-80g: the GPU's operator rates by shape (builtin:h100,\n"
           "builtin:a100-80g; sim/costs/GPU.ops), fitted over all of Vidur's profiles of it.\n"
           "\nServing profiles (--serving; docs/serving.md): %s. vllm is the default on the\n"
           "GPU presets, none (the bare GPU) elsewhere.\n", names);
    return 0;
}
