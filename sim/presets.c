/* presets: see presets.h.
 *
 * Built-in shapes are copied from each model's Hugging Face config.json (cited per entry);
 * hardware figures from the vendor datasheets (cited per entry). Parameter counts are derived,
 * never stored, so a typo in a shape shows up as a wrong count in tests/test_presets.c.
 *
 * User preset files: one `key = value` per line, `#` starts a comment (whole line or after a
 * value), blank lines ignored, keys are the struct field names. Integers are plain decimal;
 * the hardware figures are doubles and may use scientific notation (2.039e12).
 *
 *   model: name, n_layers*, d_model*, n_heads*, n_kv_heads (= n_heads), head_dim
 *          (= d_model / n_heads), d_ff*, vocab*, max_seq (= 2048), tied_embeddings (= 0),
 *          dtype_bytes (= 2), n_experts (= 0: dense), experts_per_tok (needed with
 *          experts), moe_d_ff (= d_ff)
 *   hw:    name, mem_bw*, flops*, mem_bytes*, link_bw (= 0), link_latency (= 0),
 *          mem_cuda (= mem_bytes), flops_fp8 (= 0: none), flops_fp4 (= 0), net_bw (= 0:
 *          unknown), net_latency (= 0), measured (= 0: the efficiencies are guesses)
 *
 * (* required.) The optional defaults follow Hugging Face's LlamaConfig where it has one
 * (max_position_embeddings 2048, tie_word_embeddings false); a missing name becomes the file
 * name without its directory and extension. */
#include "sim/presets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/errf.h"
#include "sim/hfconfig.h"
#include "traces/json.h"

/* ---- built-in models ---------------------------------------------------------------- */

static const preset_model_t builtin_models[] = {
    /* https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json */
    {.name = "llama-2-7b", .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 32,
     .head_dim = 128, .d_ff = 11008, .vocab = 32000, .max_seq = 4096, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json */
    {.name = "llama-2-13b", .n_layers = 40, .d_model = 5120, .n_heads = 40, .n_kv_heads = 40,
     .head_dim = 128, .d_ff = 13824, .vocab = 32000, .max_seq = 4096, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json (GQA, 8 KV heads) */
    {.name = "llama-2-70b", .n_layers = 80, .d_model = 8192, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 28672, .vocab = 32000, .max_seq = 4096, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json */
    {.name = "llama-3-8b", .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 14336, .vocab = 128256, .max_seq = 8192, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json */
    {.name = "llama-3-70b", .n_layers = 80, .d_model = 8192, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 28672, .vocab = 128256, .max_seq = 8192, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
     * (head_dim 64, tie_word_embeddings true, max_position_embeddings 131072) */
    {.name = "llama-3.2-1b", .n_layers = 16, .d_model = 2048, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 64, .d_ff = 8192, .vocab = 128256, .max_seq = 131072, .tied_embeddings = 1,
     .dtype_bytes = 2},
    /* https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
     * (its 4096-token sliding window is not modelled: attention cost uses the full context) */
    {.name = "mistral-7b", .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 14336, .vocab = 32000, .max_seq = 32768, .dtype_bytes = 2},
    /* https://huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json
     * (head_dim 64, tied; max_position_embeddings 8192 in the current config, 2048 in the
     * first upload) */
    {.name = "smollm2-135m", .n_layers = 30, .d_model = 576, .n_heads = 9, .n_kv_heads = 3,
     .head_dim = 64, .d_ff = 1536, .vocab = 49152, .max_seq = 8192, .tied_embeddings = 1,
     .dtype_bytes = 2},
    /* Karpathy's stories260K (huggingface.co/karpathy/tinyllamas, stories260K/), the header of
     * /work/shared/data/models/stories260K.bin: dim 64, hidden 172, 5 layers, 8 heads, 4 KV
     * heads, vocab 512 (tied), seq_len 512. dtype 4: the checkpoint is fp32 and the engine's
     * CPU backend runs it in fp32, so sim-vs-engine comparisons on it need fp32 bytes. */
    {.name = "stories260k", .n_layers = 5, .d_model = 64, .n_heads = 8, .n_kv_heads = 4,
     .head_dim = 8, .d_ff = 172, .vocab = 512, .max_seq = 512, .tied_embeddings = 1,
     .dtype_bytes = 4},
    /* https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
     * (num_local_experts 8, num_experts_per_tok 2, intermediate_size 14336 per expert;
     * max_position_embeddings 32768; its sliding_window is null). 46.70B parameters. */
    {.name = "mixtral-8x7b", .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 14336, .vocab = 32000, .max_seq = 32768, .dtype_bytes = 2,
     .n_experts = 8, .experts_per_tok = 2, .moe_d_ff = 14336},
    /* The other models Vidur profiled (its vidur/config/model_config.py, and the shapes in
     * the profiles' own columns), so that their shipped calibrations have a model:
     * https://huggingface.co/codellama/CodeLlama-34b-Instruct-hf/blob/main/config.json
     * (GQA, 8 KV heads; max_position_embeddings 16384) */
    {.name = "codellama-34b", .n_layers = 48, .d_model = 8192, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 22016, .vocab = 32000, .max_seq = 16384, .dtype_bytes = 2},
    /* https://huggingface.co/internlm/internlm-20b/blob/main/config.json (60 layers, MHA;
     * 4096 positions, longer with its dynamic RoPE scaling, which is not modelled) */
    {.name = "internlm-20b", .n_layers = 60, .d_model = 5120, .n_heads = 40, .n_kv_heads = 40,
     .head_dim = 128, .d_ff = 13824, .vocab = 103168, .max_seq = 4096, .dtype_bytes = 2},
    /* https://huggingface.co/Qwen/Qwen-72B/blob/main/config.json (MHA; its intermediate_size
     * 49152 counts both halves of the gated MLP: 24576 each; 32768 positions; the QKV bias
     * is not modelled) */
    {.name = "qwen-72b", .n_layers = 80, .d_model = 8192, .n_heads = 64, .n_kv_heads = 64,
     .head_dim = 128, .d_ff = 24576, .vocab = 152064, .max_seq = 32768, .dtype_bytes = 2},
    /* ---- the models people serve in 2026 (issue #29); each line cites its config.json.
     * Llama 3.1: https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
     * (128k context through its llama3 RoPE scaling, which changes no cost) */
    {.name = "llama-3.1-8b", .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 14336, .vocab = 128256, .max_seq = 131072, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json */
    {.name = "llama-3.1-70b", .n_layers = 80, .d_model = 8192, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 28672, .vocab = 128256, .max_seq = 131072, .dtype_bytes = 2},
    /* https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json */
    {.name = "llama-3.1-405b", .n_layers = 126, .d_model = 16384, .n_heads = 128,
     .n_kv_heads = 8, .head_dim = 128, .d_ff = 53248, .vocab = 128256, .max_seq = 131072,
     .dtype_bytes = 2},
    /* https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json (its q/k norms are not
     * modelled; 40960 positions) */
    {.name = "qwen3-8b", .n_layers = 36, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 12288, .vocab = 151936, .max_seq = 40960, .dtype_bytes = 2},
    /* https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json (head_dim 128 explicit:
     * 64 heads x 128 > hidden 5120) */
    {.name = "qwen3-32b", .n_layers = 64, .d_model = 5120, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 25600, .vocab = 151936, .max_seq = 40960, .dtype_bytes = 2},
    /* https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (128 experts of 768,
     * 8 a token, every layer sparse; head_dim 128 explicit) */
    {.name = "qwen3-30b-a3b", .n_layers = 48, .d_model = 2048, .n_heads = 32, .n_kv_heads = 4,
     .head_dim = 128, .d_ff = 6144, .vocab = 151936, .max_seq = 40960, .dtype_bytes = 2,
     .n_experts = 128, .experts_per_tok = 8, .moe_d_ff = 768},
    /* https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json */
    {.name = "qwen3-235b-a22b", .n_layers = 94, .d_model = 4096, .n_heads = 64,
     .n_kv_heads = 4, .head_dim = 128, .d_ff = 12288, .vocab = 151936, .max_seq = 40960,
     .dtype_bytes = 2, .n_experts = 128, .experts_per_tok = 8, .moe_d_ff = 1536},
    /* https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json: MLA (latent 512,
     * rope key 64, query rank 1536, 128 heads of 128 + 64, values of 128), the first 3 layers
     * dense (18432), then 256 routed experts of 2048 (8 a token) and 1 shared. Its weights
     * ship in fp8 (dtype 1 there); this preset is the bf16 shape. The multi-token-prediction
     * layer (num_nextn_predict_layers 1) and the grouped routing are not modelled. */
    {.name = "deepseek-v3", .n_layers = 61, .d_model = 7168, .n_heads = 128, .n_kv_heads = 128,
     .head_dim = 192, .d_ff = 18432, .vocab = 129280, .max_seq = 163840, .dtype_bytes = 2,
     .n_experts = 256, .experts_per_tok = 8, .moe_d_ff = 2048, .n_dense_layers = 3,
     .shared_d_ff = 2048, .kv_lora_rank = 512, .q_lora_rank = 1536, .qk_nope_head_dim = 128,
     .qk_rope_head_dim = 64, .v_head_dim = 128},
    /* https://huggingface.co/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json */
    {.name = "mixtral-8x22b", .n_layers = 56, .d_model = 6144, .n_heads = 48, .n_kv_heads = 8,
     .head_dim = 128, .d_ff = 16384, .vocab = 32000, .max_seq = 65536, .dtype_bytes = 2,
     .n_experts = 8, .experts_per_tok = 2, .moe_d_ff = 16384},
    /* https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json: 24 layers alternating
     * a 128-token window and full attention, 32 experts of 2880 (4 a token), head_dim 64.
     * Its experts ship in MXFP4; this is the bf16 shape. Attention sinks and biases are not
     * modelled (a scalar per head, and vectors: no cost that matters). */
    {.name = "gpt-oss-20b", .n_layers = 24, .d_model = 2880, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 64, .d_ff = 2880, .vocab = 201088, .max_seq = 131072, .dtype_bytes = 2,
     .n_experts = 32, .experts_per_tok = 4, .moe_d_ff = 2880, .sliding_window = 128,
     .n_window_layers = 12},
    /* https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (36 layers, 128
     * experts) */
    {.name = "gpt-oss-120b", .n_layers = 36, .d_model = 2880, .n_heads = 64, .n_kv_heads = 8,
     .head_dim = 64, .d_ff = 2880, .vocab = 201088, .max_seq = 131072, .dtype_bytes = 2,
     .n_experts = 128, .experts_per_tok = 4, .moe_d_ff = 2880, .sliding_window = 128,
     .n_window_layers = 18},
    /* https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json, its text_config:
     * 62 layers, 5 of every 6 with a 1024-token window (the 10 others global), head_dim 128,
     * tied embeddings. The vision tower is not modelled. */
    {.name = "gemma-3-27b", .n_layers = 62, .d_model = 5376, .n_heads = 32, .n_kv_heads = 16,
     .head_dim = 128, .d_ff = 21504, .vocab = 262208, .max_seq = 131072, .tied_embeddings = 1,
     .dtype_bytes = 2, .sliding_window = 1024, .n_window_layers = 52},
    /* https://huggingface.co/mistralai/Mistral-Nemo-Base-2407/blob/main/config.json (head_dim
     * 128 explicit; 1,024,000 positions in the config, 128k trained) */
    {.name = "mistral-nemo-12b", .n_layers = 40, .d_model = 5120, .n_heads = 32,
     .n_kv_heads = 8, .head_dim = 128, .d_ff = 14336, .vocab = 131072, .max_seq = 1024000,
     .dtype_bytes = 2},
};
#define N_MODELS ((int)(sizeof builtin_models / sizeof builtin_models[0]))

/* ---- built-in hardware ---------------------------------------------------------------
 * Memory in decimal bytes (80 GB = 80e9), as the datasheets print it; nvidia-smi reports a
 * little more (81920 MiB on an A100 80GB), so budgets computed from these are conservative.
 * FLOP/s are dense (no 2:4 sparsity) tensor-core peaks: flops bf16, flops_fp8 and flops_fp4
 * where the part has them (0 where not); datasheets that print with-sparsity figures are
 * halved. link_bw is the GPU-to-GPU figure per direction: the datasheets quote the
 * bidirectional total (NVLink 600 GB/s on A100, 900 GB/s on H100/H200, 1.8 TB/s on
 * Blackwell; AMD's Infinity Fabric per link), and a ring all-reduce sends and receives at
 * once, so half of it bounds it; cards without NVLink get their PCIe x16 slot's figure.
 * net_bw is the scale-out network per GPU (the vendor's reference system: one NIC per GPU
 * on DGX), 0 where there is no reference system; net_latency is 0 (unknown) everywhere: no
 * measurement of it is in the data.
 * link_latency is the fixed cost of one all-reduce, fitted (latency + bytes / bandwidth) to
 * Vidur's NCCL all-reduce profiles on DGX nodes (profiles/vidur/network/GPU_dgx, by
 * `twinserve calibrate --vidur`): 36, 29 and 39 us at 2, 4 and 8 A100s, 17, 31 and 29 us at
 * 2, 4 and 8 H100s; the median of each. H200 shares H100's NVLink 4 and NVSwitch.
 * mem_cuda is the total CUDA reports (less than the datasheet's decimal figure and than
 * nvidia-smi's: the driver keeps some): 79.22 GiB on an H100 80GB (vLLM's own memory
 * profile log, vllm-project/vllm PR #10511: "total_gpu_memory 79.22GiB"), 79.15 GiB on
 * an A100 80GB (PyTorch's out-of-memory messages there: "79.15 GiB total capacity"); the
 * H200's 143,771 MiB in nvidia-smi less the 438 MiB the H100 loses the same way (81,559
 * MiB in nvidia-smi) gives 139.97 GiB, an estimate; the other presets have no cited figure
 * (mem_cuda 0 = mem_bytes).
 * measured is 1 on a100-80g, h100 and h200 only: Vidur's profiles of A100s and H100s (and
 * its H100 figures for the H200) measured their all-reduces and the efficiencies the
 * roofline and the operator rates use. Every other preset is datasheet figures alone, and a
 * run on one says so (sim/replica.c). */
static const preset_hw_t builtin_hws[] = {
    /* NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: 2,039 GB/s HBM2e, BF16 tensor
     * 312 TFLOPS (624 with sparsity), 80 GB, NVLink 600 GB/s; no FP8. Network: NVIDIA DGX
     * A100 datasheet, 8x single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand (one per GPU). */
    {.name = "a100-80g", .node_gpus = 8, .mem_bw = 2.039e12, .flops = 312e12, .mem_bytes = 80e9,
     .link_bw = 300e9, .link_latency = 36e-6, .mem_cuda = 79.15 * 1073741824.0,
     .net_bw = 25e9, .measured = 1},
    /* The same datasheet, A100 40GB SXM: 1,555 GB/s HBM2, BF16 312 TFLOPS (624 with
     * sparsity), 40 GB, NVLink 600 GB/s; the same DGX A100 network. link_latency is the
     * a100-80g's, borrowed (the same NVLink 3 and NVSwitch), not measured on this part. */
    {.name = "a100-40g", .node_gpus = 8, .mem_bw = 1.555e12, .flops = 312e12, .mem_bytes = 40e9,
     .link_bw = 300e9, .link_latency = 36e-6, .net_bw = 25e9},
    /* NVIDIA H100 Tensor Core GPU datasheet, H100 SXM5: 3.35 TB/s HBM3, BF16 tensor
     * 1,979 TFLOPS with sparsity = 989 dense, FP8 3,958 with sparsity = 1,979 dense, 80 GB,
     * NVLink 900 GB/s. Network: NVIDIA DGX H100 datasheet, 8x single-port ConnectX-7 VPI,
     * 400 Gb/s InfiniBand/Ethernet (one per GPU). */
    {.name = "h100", .node_gpus = 8,
     .mem_bw = 3.35e12, .flops = 989e12, .mem_bytes = 80e9, .link_bw = 450e9,
     .link_latency = 29e-6, .mem_cuda = 79.22 * 1073741824.0, .flops_fp8 = 1979e12,
     .net_bw = 50e9, .measured = 1},
    /* The same datasheet, H100 PCIe: 2 TB/s HBM2e, BF16 1,513 TFLOPS with sparsity = 756.5
     * dense, FP8 3,026 with sparsity = 1,513 dense, 80 GB; "NVLink: 600GB/s, PCIe Gen5:
     * 128GB/s". The NVLink bridge joins pairs of cards only, so link_bw is the PCIe Gen5 x16
     * figure, 128 GB/s both ways = 64 per direction: what any tp beyond 2 goes over. No
     * reference system, so no network figure. */
    {.name = "h100-pcie", .node_gpus = 8, .mem_bw = 2.0e12, .flops = 756.5e12, .mem_bytes = 80e9,
     .link_bw = 64e9, .flops_fp8 = 1513e12},
    /* NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 4.8 TB/s HBM3e, BF16 tensor
     * 1,979 TFLOPS with sparsity = 989 dense, FP8 3,958 with sparsity = 1,979 dense,
     * 141 GB, NVLink 900 GB/s. Network: DGX H200 (NVIDIA DGX BasePOD reference
     * architecture, core components), eight single-port ConnectX-7 VPI, up to 400 Gb/s. */
    {.name = "h200", .node_gpus = 8,
     .mem_bw = 4.8e12, .flops = 989e12, .mem_bytes = 141e9, .link_bw = 450e9,
     .link_latency = 29e-6, .mem_cuda = 139.97 * 1073741824.0, .flops_fp8 = 1979e12,
     .net_bw = 50e9, .measured = 1},
    /* NVIDIA H20 (HGX H20): NVIDIA publishes no datasheet page for it; its specification
     * sheet as reported (willitrunai.com/gpus/h20-96gb, and Chinese press quoting it as
     * dense): 96 GB HBM3, 4.0 TB/s, BF16 148 TFLOPS, FP8 296 TFLOPS, NVLink 900 GB/s. The
     * sheet marks no sparsity; taken as dense. link_latency is the h100's, borrowed (the
     * same NVLink 4 and NVSwitch), not measured. Network unknown. */
    {.name = "h20", .node_gpus = 8,
     .mem_bw = 4.0e12, .flops = 148e12, .mem_bytes = 96e9, .link_bw = 450e9,
     .link_latency = 29e-6, .flops_fp8 = 296e12},
    /* NVIDIA GB200 NVL72 / HGX B200 specifications (nvidia.com/en-us/data-center/gb200-nvl72,
     * "Individual Blackwell GPU Specifications", HGX B200 column, figures with sparsity):
     * FP4 18 PFLOPS, FP8/FP6 9, FP16/BF16 4.5, halved to dense 9, 4.5 and 2.25; 180 GB
     * HBM3E, 7.7 TB/s; 5th-generation NVLink 1.8 TB/s (900 GB/s per direction). Network:
     * DGX B200, 8x single-port ConnectX-7 VPI, up to 400 Gb/s (NVIDIA DGX BasePOD reference
     * architecture). No NVLink 5 all-reduce profile in the data: link_latency 0 (the
     * all-reduce costs its bytes only). */
    {.name = "b200", .node_gpus = 8,
     .mem_bw = 7.7e12, .flops = 2.25e15, .mem_bytes = 180e9, .link_bw = 900e9,
     .flops_fp8 = 4.5e15, .flops_fp4 = 9e15, .net_bw = 50e9},
    /* One GPU of a GB200 NVL72 (its 72-GPU NVLink domain), the same page's GB200 column
     * (with sparsity): FP4 20 PFLOPS, FP8/FP6 10, FP16/BF16 5, halved to 10, 5 and 2.5
     * dense; 186 GB HBM3E, 8 TB/s; NVLink 1.8 TB/s (rack: 130 TB/s over 72 GPUs). Network:
     * one 400 Gb/s ConnectX-7 per GPU (DGX GB200: 72 OSFP single-port ConnectX-7 VPI; four
     * per compute tray of four GPUs). link_latency 0, as for b200. */
    {.name = "gb200", .node_gpus = 72,
     .mem_bw = 8e12, .flops = 2.5e15, .mem_bytes = 186e9, .link_bw = 900e9,
     .flops_fp8 = 5e15, .flops_fp4 = 10e15, .net_bw = 50e9},
    /* NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): 48 GB GDDR6 with ECC,
     * 864 GB/s, "BFLOAT16 Tensor Core 362.05 | 733*", "FP8 Tensor Core 733 | 1,466*" (* with
     * sparsity; the first figures are dense), PCIe Gen4 x16 64 GB/s both ways. No NVLink:
     * link_bw is PCIe Gen4 x16, 32 GB/s per direction. */
    {.name = "l40s", .node_gpus = 8,
     .mem_bw = 864e9, .flops = 362.05e12, .mem_bytes = 48e9, .link_bw = 32e9,
     .flops_fp8 = 733e12},
    /* NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4): 24 GB GDDR6, 300 GB/s, BF16
     * Tensor Core 242 teraFLOPS* and FP8 485 teraFLOPS* (* with sparsity) = 121 and 242.5
     * dense, PCIe Gen4 x16 64 GB/s both ways: link_bw 32 GB/s per direction (no NVLink). */
    {.name = "l4", .node_gpus = 8,
     .mem_bw = 300e9, .flops = 121e12, .mem_bytes = 24e9, .link_bw = 32e9,
     .flops_fp8 = 242.5e12},
    /* NVIDIA Ada GPU Architecture whitepaper (v2.01), appendix table, GeForce RTX 4090:
     * 24 GB GDDR6X, 1,008 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 165.2/330.4"
     * and "Peak FP8 Tensor TFLOPS with FP32 Accumulate 330.3/660.6" (dense/sparse; GeForce
     * runs FP32 accumulation, what cuBLAS uses, at half the FP16-accumulate rate). PCIe
     * Gen4 x16, no NVLink: link_bw 32 GB/s per direction. */
    {.name = "rtx-4090", .node_gpus = 8, .mem_bw = 1008e9, .flops = 165.2e12, .mem_bytes = 24e9,
     .link_bw = 32e9, .flops_fp8 = 330.3e12},
    /* AMD Instinct MI300X (amd.com/en/products/accelerators/instinct/mi300/mi300x.html and
     * its footnote MI300-17): 192 GB HBM3, 5.3 TB/s, BF16 1,307.4 TFLOPS and FP8 2,614.9
     * dense (2,614.9 and 5,229.8 with sparsity); "Infinity Fabric Links 8", "Peak Infinity
     * Fabric Link Bandwidth 128 GB/s" (both ways). On the 8-GPU platform 7 links reach the
     * peers, 896 GB/s aggregate: link_bw 448 GB/s per direction, what an all-reduce over all
     * 8 GPUs has (a pair of GPUs shares one link, 64 GB/s per direction). Network unknown
     * (no AMD reference system). */
    {.name = "mi300x", .node_gpus = 8, .mem_bw = 5.3e12, .flops = 1307.4e12, .mem_bytes = 192e9,
     .link_bw = 448e9, .flops_fp8 = 2614.9e12},
    /* AMD Instinct MI325X (amd.com/en/products/accelerators/instinct/mi300/mi325x.html):
     * 256 GB HBM3E, 6 TB/s, BF16 1,307.4 TFLOPS and FP8 2,614.9 dense (5,229.8 FP8 with
     * sparsity), the MI300X's Infinity Fabric (8 links of 128 GB/s; 7 to the peers on the
     * 8-GPU platform): link_bw 448 GB/s per direction, as mi300x. Network unknown. */
    {.name = "mi325x", .node_gpus = 8, .mem_bw = 6e12, .flops = 1307.4e12, .mem_bytes = 256e9,
     .link_bw = 448e9, .flops_fp8 = 2614.9e12},
};
#define N_HWS ((int)(sizeof builtin_hws / sizeof builtin_hws[0]))

const preset_model_t *preset_model_at(int i) {
    return (i >= 0 && i < N_MODELS) ? &builtin_models[i] : NULL;
}

const preset_hw_t *preset_hw_at(int i) {
    return (i >= 0 && i < N_HWS) ? &builtin_hws[i] : NULL;
}

const preset_model_t *preset_model_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_MODELS; i++)
        if (strcasecmp(builtin_models[i].name, name) == 0) return &builtin_models[i];
    return NULL;
}

const preset_hw_t *preset_hw_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_HWS; i++)
        if (strcasecmp(builtin_hws[i].name, name) == 0) return &builtin_hws[i];
    return NULL;
}

/* ---- derived figures ------------------------------------------------------------------ */

int preset_model_is_moe(const preset_model_t *m) { return m->n_experts > 0; }

int32_t preset_model_moe_layers(const preset_model_t *m) {
    return preset_model_is_moe(m) ? m->n_layers - m->n_dense_layers : 0;
}

const char *preset_model_attention(const preset_model_t *m) {
    if (m->kv_lora_rank > 0) return "MLA";
    if (m->n_kv_heads == m->n_heads) return "MHA";
    return m->n_kv_heads == 1 ? "MQA" : "GQA";
}

/* One layer's attention projections: Q, K, V, O; with MLA, the query's low-rank pair (or
 * its direct projection), the joint latent and rope key (kv_a), the latent's expansion into
 * per-head keys and values (kv_b) and the output. */
static double attn_params(const preset_model_t *m) {
    double d = m->d_model, h = m->n_heads;
    if (m->kv_lora_rank > 0) {
        double qk = m->qk_nope_head_dim + (double)m->qk_rope_head_dim;
        double q = m->q_lora_rank > 0 ? d * m->q_lora_rank + (double)m->q_lora_rank * h * qk
                                      : d * h * qk;
        double kv_a = d * (m->kv_lora_rank + (double)m->qk_rope_head_dim);
        double kv_b = (double)m->kv_lora_rank * h * (m->qk_nope_head_dim + (double)m->v_head_dim);
        return q + kv_a + kv_b + h * m->v_head_dim * d;
    }
    double q = h * m->head_dim, kv = (double)m->n_kv_heads * m->head_dim;
    return d * q + 2.0 * d * kv + q * d;
}

double preset_model_expert_params(const preset_model_t *m) {
    return preset_model_is_moe(m) ? 3.0 * m->d_model * (double)m->moe_d_ff : 0.0;
}

double preset_model_all_expert_params(const preset_model_t *m) {
    return (double)preset_model_moe_layers(m) * m->n_experts * preset_model_expert_params(m);
}

double preset_model_layer_matrix_params(const preset_model_t *m) {
    double d = m->d_model;
    int32_t moe = preset_model_moe_layers(m);
    /* SwiGLU gate, up, down in the dense layers; an MoE layer's tokens all pass its router
     * and its shared expert, the routed experts being counted apart */
    double dense = (double)(m->n_layers - moe) * 3.0 * d * m->d_ff;
    double sparse = (double)moe * (d * m->n_experts + 3.0 * d * m->shared_d_ff);
    return m->n_layers * attn_params(m) + dense + sparse;
}

double preset_model_lm_params(const preset_model_t *m) { return (double)m->vocab * m->d_model; }

double preset_model_params(const preset_model_t *m) {
    double d = m->d_model;
    /* RMSNorm before attention and MLP (and MLA's on the query and latent ranks) */
    double norms = 2.0 * d + (m->kv_lora_rank > 0 ? (double)m->q_lora_rank + m->kv_lora_rank : 0);
    double embed = preset_model_lm_params(m);
    double head = m->tied_embeddings ? 0.0 : embed;
    return embed + preset_model_layer_matrix_params(m) + preset_model_all_expert_params(m) +
           m->n_layers * norms + d /* final norm */ + head;
}

double preset_model_active_params(const preset_model_t *m) {
    return preset_model_params(m) - preset_model_all_expert_params(m) +
           (double)preset_model_moe_layers(m) * m->experts_per_tok * preset_model_expert_params(m);
}

double preset_model_matrix_bytes(const preset_model_t *m) {
    if (m->weight_bits <= 0) return m->dtype_bytes;
    double b = m->weight_bits / 8.0;
    return m->weight_group > 0 ? b + m->scale_bits / 8.0 / m->weight_group : b;
}

int32_t preset_model_kv_elem_bytes(const preset_model_t *m) {
    return m->kv_dtype_bytes > 0 ? m->kv_dtype_bytes : m->dtype_bytes;
}

double preset_model_weight_bytes(const preset_model_t *m) {
    /* the layers' matrices at their format; the embedding, LM head and norms at dtype */
    double matrices = preset_model_layer_matrix_params(m) + preset_model_all_expert_params(m);
    return matrices * preset_model_matrix_bytes(m) +
           (preset_model_params(m) - matrices) * m->dtype_bytes;
}

typedef struct {
    const char *name;
    int32_t bits, group, scale_bits, act_bits;
} format_t;

static const format_t formats[] = {
    {"fp8", 8, 0, 0, 8},        /* W8A8 (DeepSeek-V3's block-scaled fp8, vLLM's fp8) */
    {"int4", 4, 128, 16, 16},   /* AWQ/GPTQ: fp16 scales per 128 weights, bf16 products */
    {"mxfp4", 4, 32, 8, 16},    /* OCP MX: e8m0 scales per 32 (gpt-oss's experts) */
    {"nvfp4", 4, 16, 8, 4},     /* NVIDIA: fp8 scales per 16, FP4 products on Blackwell */
};

int preset_model_set_format(preset_model_t *m, const char *format, char *err, size_t errlen) {
    if (!strcasecmp(format, "bf16") || !strcasecmp(format, "fp16")) {
        m->weight_bits = m->weight_group = m->scale_bits = m->act_bits = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcasecmp(format, formats[i].name)) {
            m->weight_bits = formats[i].bits;
            m->weight_group = formats[i].group;
            m->scale_bits = formats[i].scale_bits;
            m->act_bits = formats[i].act_bits;
            return 0;
        }
    return errf(err, errlen, "unknown weight format '%s' (bf16, fp8, int4, mxfp4 or nvfp4)",
                format);
}

int preset_model_set_kv_dtype(preset_model_t *m, const char *dtype, char *err, size_t errlen) {
    if (!strcasecmp(dtype, "bf16") || !strcasecmp(dtype, "fp16")) m->kv_dtype_bytes = 2;
    else if (!strcasecmp(dtype, "fp8")) m->kv_dtype_bytes = 1;
    else return errf(err, errlen, "unknown KV dtype '%s' (bf16 or fp8)", dtype);
    return 0;
}

const char *preset_model_format_name(const preset_model_t *m) {
    if (m->weight_bits <= 0) return "bf16";
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (m->weight_bits == formats[i].bits && m->weight_group == formats[i].group &&
            m->scale_bits == formats[i].scale_bits && m->act_bits == formats[i].act_bits)
            return formats[i].name;
    return "custom";
}

int preset_hw_multinode_allreduce(const preset_hw_t *hw, int32_t tp, double *latency_s,
                                  double *s_per_byte, char *err, size_t errlen) {
    if (hw->node_gpus <= 0 || tp <= hw->node_gpus) return 0;
    if (!(hw->net_bw > 0))
        return errf(err, errlen, "tp %d spans %d link domains of %d %s GPUs, and the network "
                    "between them is unknown (net_bw)", (int)tp,
                    (int)((tp + hw->node_gpus - 1) / hw->node_gpus), (int)hw->node_gpus, hw->name);
    *latency_s = hw->link_latency + hw->net_latency;
    *s_per_byte = 2.0 * (tp - 1.0) / tp / hw->net_bw;
    return 1;
}

double preset_hw_matrix_flops(const preset_hw_t *hw, const preset_model_t *m) {
    if (m->act_bits == 8 && hw->flops_fp8 > 0) return hw->flops_fp8;
    if (m->act_bits == 4 && hw->flops_fp4 > 0) return hw->flops_fp4;
    return hw->flops;
}

double preset_model_kv_elems_per_layer(const preset_model_t *m) {
    if (m->kv_lora_rank > 0) return m->kv_lora_rank + (double)m->qk_rope_head_dim;
    return 2.0 * m->n_kv_heads * (double)m->head_dim;
}

double preset_model_kv_bytes_per_token(const preset_model_t *m) {
    return m->n_layers * preset_model_kv_elems_per_layer(m) * preset_model_kv_elem_bytes(m);
}

double preset_model_kv_bytes_device(const preset_model_t *m, int32_t tp) {
    const double t = tp > 1 ? tp : 1;
    if (m->kv_lora_rank > 0) return preset_model_kv_bytes_per_token(m);
    double kv = m->n_kv_heads >= t ? m->n_kv_heads / t : 1.0;
    return 2.0 * m->n_layers * kv * m->head_dim * preset_model_kv_elem_bytes(m);
}

double preset_model_attn_pair_flops(const preset_model_t *m, int32_t tp) {
    const double heads = m->n_heads / (tp > 1 ? (double)tp : 1.0);
    if (m->kv_lora_rank > 0)
        return 2.0 * heads * (2.0 * m->kv_lora_rank + m->qk_rope_head_dim);
    return 4.0 * heads * m->head_dim;
}

void preset_model_attn_device(const preset_model_t *m, int32_t tp, double *w_in, double *w_out,
                              double *act_in, double *act_out) {
    const double t = tp > 1 ? tp : 1, d = m->d_model, heads = m->n_heads / t;
    if (m->kv_lora_rank > 0) {
        const double qk = m->qk_nope_head_dim + (double)m->qk_rope_head_dim;
        const double lat = m->kv_lora_rank + (double)m->qk_rope_head_dim;
        const double q_a = m->q_lora_rank > 0 ? d * m->q_lora_rank : 0;
        const double q_b = (m->q_lora_rank > 0 ? (double)m->q_lora_rank : d) * heads * qk;
        const double kv_b =
            (double)m->kv_lora_rank * heads * (m->qk_nope_head_dim + (double)m->v_head_dim);
        *w_in = q_a + d * lat + q_b + kv_b;
        *w_out = heads * m->v_head_dim * d;
        *act_in = m->q_lora_rank + lat + heads * (qk + qk + m->v_head_dim);
        *act_out = heads * m->v_head_dim;
        return;
    }
    const double kv = m->n_kv_heads >= t ? m->n_kv_heads / t : 1.0, hd = m->head_dim;
    *w_in = d * (heads + 2.0 * kv) * hd;
    *w_out = heads * hd * d;
    *act_in = (heads + 2.0 * kv) * hd;
    *act_out = heads * hd;
}

double preset_model_kv_bytes_at(const preset_model_t *m, double ctx) {
    double per = preset_model_kv_elems_per_layer(m) * preset_model_kv_elem_bytes(m);
    int32_t win = m->sliding_window > 0 ? m->n_window_layers : 0;
    double held = ctx < m->sliding_window ? ctx : m->sliding_window;
    return (m->n_layers - win) * per * ctx + win * per * (win ? held : 0);
}

/* ---- validation ----------------------------------------------------------------------- */

int preset_model_validate(const preset_model_t *m, char *err, size_t errlen) {
    const char *n = m->name[0] ? m->name : "(unnamed)";
    struct { const char *key; int32_t v; } pos[] = {
        {"n_layers", m->n_layers}, {"d_model", m->d_model}, {"n_heads", m->n_heads},
        {"n_kv_heads", m->n_kv_heads}, {"head_dim", m->head_dim}, {"d_ff", m->d_ff},
        {"vocab", m->vocab}, {"max_seq", m->max_seq},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return errf(err, errlen, "%s: %s must be positive (got %d)", n, pos[i].key,
                        (int)pos[i].v);
    if (m->n_kv_heads > m->n_heads || m->n_heads % m->n_kv_heads != 0)
        return errf(err, errlen, "%s: n_heads (%d) is not a multiple of n_kv_heads (%d)", n,
                    (int)m->n_heads, (int)m->n_kv_heads);
    if (m->tied_embeddings != 0 && m->tied_embeddings != 1)
        return errf(err, errlen, "%s: tied_embeddings must be 0 or 1 (got %d)", n,
                    (int)m->tied_embeddings);
    if (m->dtype_bytes != 1 && m->dtype_bytes != 2 && m->dtype_bytes != 4)
        return errf(err, errlen, "%s: dtype_bytes must be 1, 2 or 4 (got %d)", n,
                    (int)m->dtype_bytes);
    if (m->n_experts < 0 || m->experts_per_tok < 0 || m->moe_d_ff < 0)
        return errf(err, errlen, "%s: n_experts, experts_per_tok and moe_d_ff must be >= 0 "
                    "(got %d, %d, %d)", n, (int)m->n_experts, (int)m->experts_per_tok,
                    (int)m->moe_d_ff);
    if (m->n_experts > 0 && (m->experts_per_tok < 1 || m->experts_per_tok > m->n_experts ||
                             m->moe_d_ff < 1))
        return errf(err, errlen, "%s: a mixture of %d experts needs experts_per_tok in 1..%d "
                    "(got %d) and a positive moe_d_ff (got %d)", n, (int)m->n_experts,
                    (int)m->n_experts, (int)m->experts_per_tok, (int)m->moe_d_ff);
    if (m->n_experts == 0 && (m->experts_per_tok > 0 || m->moe_d_ff > 0))
        return errf(err, errlen, "%s: experts_per_tok and moe_d_ff need n_experts > 0", n);
    struct { const char *key; int32_t v; } nonneg[] = {
        {"n_dense_layers", m->n_dense_layers}, {"shared_d_ff", m->shared_d_ff},
        {"kv_lora_rank", m->kv_lora_rank}, {"q_lora_rank", m->q_lora_rank},
        {"qk_nope_head_dim", m->qk_nope_head_dim}, {"qk_rope_head_dim", m->qk_rope_head_dim},
        {"v_head_dim", m->v_head_dim}, {"sliding_window", m->sliding_window},
        {"n_window_layers", m->n_window_layers},
    };
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (nonneg[i].v < 0)
            return errf(err, errlen, "%s: %s must be >= 0 (got %d)", n, nonneg[i].key,
                        (int)nonneg[i].v);
    if (m->n_experts == 0 && (m->n_dense_layers > 0 || m->shared_d_ff > 0))
        return errf(err, errlen, "%s: n_dense_layers and shared_d_ff need n_experts > 0", n);
    if (m->n_dense_layers >= m->n_layers && m->n_experts > 0)
        return errf(err, errlen, "%s: n_dense_layers (%d) leaves no layer of experts of %d",
                    n, (int)m->n_dense_layers, (int)m->n_layers);
    if (m->kv_lora_rank > 0) {
        if (m->qk_rope_head_dim < 1 || m->qk_nope_head_dim < 1 || m->v_head_dim < 1)
            return errf(err, errlen, "%s: multi-head latent attention (kv_lora_rank %d) needs "
                        "positive qk_rope_head_dim, qk_nope_head_dim and v_head_dim (got %d, %d, "
                        "%d)", n, (int)m->kv_lora_rank, (int)m->qk_rope_head_dim,
                        (int)m->qk_nope_head_dim, (int)m->v_head_dim);
        if (m->head_dim != m->qk_nope_head_dim + m->qk_rope_head_dim || m->n_kv_heads != m->n_heads)
            return errf(err, errlen, "%s: with latent attention head_dim is qk_nope_head_dim + "
                        "qk_rope_head_dim (%d) and n_kv_heads is n_heads (%d); got %d and %d", n,
                        (int)(m->qk_nope_head_dim + m->qk_rope_head_dim), (int)m->n_heads,
                        (int)m->head_dim, (int)m->n_kv_heads);
    } else if (m->q_lora_rank || m->qk_nope_head_dim || m->qk_rope_head_dim || m->v_head_dim) {
        return errf(err, errlen, "%s: q_lora_rank, qk_nope_head_dim, qk_rope_head_dim and "
                    "v_head_dim describe latent attention: they need kv_lora_rank > 0", n);
    }
    if (!(m->weight_bits == 0 || m->weight_bits == 4 || m->weight_bits == 8 ||
          m->weight_bits == 16 || m->weight_bits == 32) ||
        !(m->act_bits == 0 || m->act_bits == 4 || m->act_bits == 8 || m->act_bits == 16) ||
        m->weight_group < 0 || m->scale_bits < 0 || (m->weight_group > 0) != (m->scale_bits > 0) ||
        !(m->kv_dtype_bytes == 0 || m->kv_dtype_bytes == 1 || m->kv_dtype_bytes == 2 ||
          m->kv_dtype_bytes == 4))
        return errf(err, errlen, "%s: a precision must be weight_bits 4, 8, 16 or 32, act_bits 4, "
                    "8 or 16, weight_group and scale_bits both > 0 or both 0, kv_dtype_bytes 1, "
                    "2 or 4 (got %d, %d, %d, %d, %d)", n, (int)m->weight_bits, (int)m->act_bits,
                    (int)m->weight_group, (int)m->scale_bits, (int)m->kv_dtype_bytes);
    if ((m->sliding_window > 0) != (m->n_window_layers > 0) || m->n_window_layers > m->n_layers)
        return errf(err, errlen, "%s: a sliding window needs both sliding_window > 0 and "
                    "n_window_layers in 1..n_layers (%d); got %d and %d", n, (int)m->n_layers,
                    (int)m->sliding_window, (int)m->n_window_layers);
    return 0;
}

int preset_hw_validate(const preset_hw_t *hw, char *err, size_t errlen) {
    const char *n = hw->name[0] ? hw->name : "(unnamed)";
    struct { const char *key; double v; } pos[] = {
        {"mem_bw", hw->mem_bw}, {"flops", hw->flops}, {"mem_bytes", hw->mem_bytes},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (!isfinite(pos[i].v) || pos[i].v <= 0)
            return errf(err, errlen, "%s: %s must be a positive number (got %g)", n,
                        pos[i].key, pos[i].v);
    if (!isfinite(hw->link_bw) || hw->link_bw < 0)
        return errf(err, errlen, "%s: link_bw must be >= 0 (got %g)", n, hw->link_bw);
    if (!isfinite(hw->link_latency) || hw->link_latency < 0)
        return errf(err, errlen, "%s: link_latency must be >= 0 seconds (got %g)", n,
                    hw->link_latency);
    if (hw->node_gpus < 0)
        return errf(err, errlen, "%s: node_gpus must be >= 0 (got %d)", n, (int)hw->node_gpus);
    if (!isfinite(hw->mem_cuda) || hw->mem_cuda < 0 || hw->mem_cuda > hw->mem_bytes * 1.1)
        return errf(err, errlen, "%s: mem_cuda must be >= 0 bytes and no more than about "
                    "mem_bytes (got %g)", n, hw->mem_cuda);
    /* the optional figures: 0 means none or unknown */
    struct { const char *key; double v; } opt[] = {
        {"flops_fp8", hw->flops_fp8}, {"flops_fp4", hw->flops_fp4}, {"net_bw", hw->net_bw},
        {"net_latency", hw->net_latency},
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (!isfinite(opt[i].v) || opt[i].v < 0)
            return errf(err, errlen, "%s: %s must be >= 0 (0: none or unknown; got %g)", n,
                        opt[i].key, opt[i].v);
    if (hw->measured != 0 && hw->measured != 1)
        return errf(err, errlen, "%s: measured must be 0 or 1 (got %d)", n, (int)hw->measured);
    return 0;
}

/* ---- preset files --------------------------------------------------------------------- */

const kv_spec_t preset_model_keys[] = {
    {"name", KV_NAME, offsetof(preset_model_t, name), 0},
    {"n_layers", KV_INT, offsetof(preset_model_t, n_layers), 1},
    {"d_model", KV_INT, offsetof(preset_model_t, d_model), 1},
    {"n_heads", KV_INT, offsetof(preset_model_t, n_heads), 1},
    {"n_kv_heads", KV_INT, offsetof(preset_model_t, n_kv_heads), 0},
    {"head_dim", KV_INT, offsetof(preset_model_t, head_dim), 0},
    {"d_ff", KV_INT, offsetof(preset_model_t, d_ff), 1},
    {"vocab", KV_INT, offsetof(preset_model_t, vocab), 1},
    {"max_seq", KV_INT, offsetof(preset_model_t, max_seq), 0},
    {"tied_embeddings", KV_INT, offsetof(preset_model_t, tied_embeddings), 0},
    {"dtype_bytes", KV_INT, offsetof(preset_model_t, dtype_bytes), 0},
    {"n_experts", KV_INT, offsetof(preset_model_t, n_experts), 0},
    {"experts_per_tok", KV_INT, offsetof(preset_model_t, experts_per_tok), 0},
    {"moe_d_ff", KV_INT, offsetof(preset_model_t, moe_d_ff), 0},
    /* from here on, a key whose value is 0 is left out of a run's record (preset_model_json):
     * a dense model's record stays as it was before the key existed */
    {"n_dense_layers", KV_INT, offsetof(preset_model_t, n_dense_layers), 0},
    {"shared_d_ff", KV_INT, offsetof(preset_model_t, shared_d_ff), 0},
    {"kv_lora_rank", KV_INT, offsetof(preset_model_t, kv_lora_rank), 0},
    {"q_lora_rank", KV_INT, offsetof(preset_model_t, q_lora_rank), 0},
    {"qk_nope_head_dim", KV_INT, offsetof(preset_model_t, qk_nope_head_dim), 0},
    {"qk_rope_head_dim", KV_INT, offsetof(preset_model_t, qk_rope_head_dim), 0},
    {"v_head_dim", KV_INT, offsetof(preset_model_t, v_head_dim), 0},
    {"sliding_window", KV_INT, offsetof(preset_model_t, sliding_window), 0},
    {"n_window_layers", KV_INT, offsetof(preset_model_t, n_window_layers), 0},
    {"weight_bits", KV_INT, offsetof(preset_model_t, weight_bits), 0},
    {"weight_group", KV_INT, offsetof(preset_model_t, weight_group), 0},
    {"scale_bits", KV_INT, offsetof(preset_model_t, scale_bits), 0},
    {"act_bits", KV_INT, offsetof(preset_model_t, act_bits), 0},
    {"kv_dtype_bytes", KV_INT, offsetof(preset_model_t, kv_dtype_bytes), 0},
};
const int preset_model_n_keys = (int)(sizeof preset_model_keys / sizeof preset_model_keys[0]);

const kv_spec_t preset_hw_keys[] = {
    {"name", KV_NAME, offsetof(preset_hw_t, name), 0},
    {"mem_bw", KV_DOUBLE, offsetof(preset_hw_t, mem_bw), 1},
    {"flops", KV_DOUBLE, offsetof(preset_hw_t, flops), 1},
    {"mem_bytes", KV_DOUBLE, offsetof(preset_hw_t, mem_bytes), 1},
    {"link_bw", KV_DOUBLE, offsetof(preset_hw_t, link_bw), 0},
    {"link_latency", KV_DOUBLE, offsetof(preset_hw_t, link_latency), 0},
    {"mem_cuda", KV_DOUBLE, offsetof(preset_hw_t, mem_cuda), 0},
    {"flops_fp8", KV_DOUBLE, offsetof(preset_hw_t, flops_fp8), 0},
    {"flops_fp4", KV_DOUBLE, offsetof(preset_hw_t, flops_fp4), 0},
    {"net_bw", KV_DOUBLE, offsetof(preset_hw_t, net_bw), 0},
    {"net_latency", KV_DOUBLE, offsetof(preset_hw_t, net_latency), 0},
    {"measured", KV_INT, offsetof(preset_hw_t, measured), 0},
    {"node_gpus", KV_INT, offsetof(preset_hw_t, node_gpus), 0},
};
const int preset_hw_n_keys = (int)(sizeof preset_hw_keys / sizeof preset_hw_keys[0]);

#define MAX_KEYS 32

/* The file name without directory and extension, as the default preset name. */
static void name_from_path(const char *path, char *name) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = (dot && dot != base) ? (size_t)(dot - base) : strlen(base);
    if (n >= KV_NAME_CAP) n = KV_NAME_CAP - 1;
    memcpy(name, base, n);
    name[n] = '\0';
}

/* A word that names no built-in and no existing file gets the list of built-in names (a
 * typo such as "llama-3.2-3b" is likelier than a missing file); a name with a '/' is read as
 * a file so that its own error ("cannot open") comes back. */
static int looks_like_path(const char *name) {
    FILE *f;
    if (strchr(name, '/')) return 1;
    if ((f = fopen(name, "r")) != NULL) {
        fclose(f);
        return 1;
    }
    return 0;
}

static void list_names(char *out, size_t cap, int is_model) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0;; i++) {
        const char *n = is_model ? (preset_model_at(i) ? preset_model_at(i)->name : NULL)
                                 : (preset_hw_at(i) ? preset_hw_at(i)->name : NULL);
        if (!n) break;
        int w = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", n);
        if (w < 0 || (size_t)w >= cap - used) break;
        used += (size_t)w;
    }
}

int preset_model_get(const char *name, preset_model_t *out, char *err, size_t errlen) {
    return preset_model_get_noted(name, out, NULL, 0, err, errlen);
}

int preset_model_get_noted(const char *name, preset_model_t *out, char *note, size_t notelen,
                           char *err, size_t errlen) {
    int rc = -1;
    int seen[MAX_KEYS] = {0};
    char names[512];
    preset_model_t m;
    memset(&m, 0, sizeof m);
    if (note && notelen) note[0] = '\0';
    if (!name || !*name) {
        errf(err, errlen, "no model name given");
        goto done;
    }
    const preset_model_t *b = preset_model_find(name);
    if (b) {
        *out = *b;
        rc = 0;
        goto done;
    }
    /* before the preset-file test: a missing "x.json" is a missing config, not a typo */
    if (hfcfg_is_config(name)) {
        rc = hfcfg_load(name, out, note, notelen, err, errlen);
        goto done;
    }
    if (!looks_like_path(name)) {
        list_names(names, sizeof names, 1);
        errf(err, errlen, "unknown model '%s'; built-in models: %s (or give a preset file path)",
             name, names);
        goto done;
    }
    kv_table_t t = {preset_model_keys, preset_model_n_keys, &m, seen};
    if (kvfile_read(name, &t, 1, NULL, NULL, err, errlen) != 0) goto done;
    if (!kvfile_seen(&t, "name")) name_from_path(name, m.name);
    if (preset_model_complete(&m, &t, name, err, errlen) != 0) goto done;
    *out = m;
    rc = 0;
done:
    return rc;
}

int preset_model_complete(preset_model_t *m, const kv_table_t *t, const char *what, char *err,
                          size_t errlen) {
    if (!kvfile_seen(t, "n_kv_heads")) m->n_kv_heads = m->n_heads;
    if (!kvfile_seen(t, "max_seq")) m->max_seq = 2048;
    if (!kvfile_seen(t, "dtype_bytes")) m->dtype_bytes = 2;
    if (m->n_experts > 0 && !kvfile_seen(t, "moe_d_ff")) m->moe_d_ff = m->d_ff;
    if (!kvfile_seen(t, "head_dim")) {
        if (m->n_heads <= 0 || m->d_model % m->n_heads != 0)
            return errf(err, errlen, "%s: head_dim not given and d_model (%d) is not a "
                        "multiple of n_heads (%d)", what, (int)m->d_model, (int)m->n_heads);
        m->head_dim = m->d_model / m->n_heads;
    }
    char verr[256];
    if (preset_model_validate(m, verr, sizeof verr) != 0)
        return errf(err, errlen, "%s: %s", what, verr);
    return 0;
}

int preset_hw_get(const char *name, preset_hw_t *out, char *err, size_t errlen) {
    int rc = -1;
    int seen[MAX_KEYS] = {0};
    char names[512];
    preset_hw_t hw;
    memset(&hw, 0, sizeof hw);
    if (!name || !*name) {
        errf(err, errlen, "no hardware name given");
        goto done;
    }
    const preset_hw_t *b = preset_hw_find(name);
    if (b) {
        *out = *b;
        rc = 0;
        goto done;
    }
    if (!looks_like_path(name)) {
        list_names(names, sizeof names, 0);
        errf(err, errlen, "unknown hardware '%s'; built-in hardware: %s (or give a preset file "
             "path)", name, names);
        goto done;
    }
    kv_table_t t = {preset_hw_keys, preset_hw_n_keys, &hw, seen};
    if (kvfile_read(name, &t, 1, NULL, NULL, err, errlen) != 0) goto done;
    if (!kvfile_seen(&t, "name")) name_from_path(name, hw.name);
    char verr[256];
    if (preset_hw_validate(&hw, verr, sizeof verr) != 0) {
        errf(err, errlen, "%s: %s", name, verr);
        goto done;
    }
    *out = hw;
    rc = 0;
done:
    return rc;
}

int preset_model_key_may_be_absent(int i) {
    for (int k = 0; k < preset_model_n_keys && k <= i; k++)
        if (!strcmp(preset_model_keys[k].key, "n_experts")) return 1;
    return 0;
}

void preset_model_json(FILE *f, const preset_model_t *m) {
    fputs("{\"name\":", f);
    json_write_str(f, m->name);
    for (int i = 0; i < preset_model_n_keys; i++) {
        const kv_spec_t *k = &preset_model_keys[i];
        if (k->type != KV_INT) continue;
        int32_t v;
        memcpy(&v, (const char *)m + k->offset, sizeof v);
        /* a dense model's record stays as it was before experts (and the keys after them)
         * existed */
        if (v == 0 && preset_model_key_may_be_absent(i)) continue;
        fprintf(f, ",\"%s\":%d", k->key, (int)v);
    }
    fputc('}', f);
}
