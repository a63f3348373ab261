/* presets_table: the built-in model shapes and GPUs (presets.h), and their lookups.
 *
 * Shapes are copied from each model's Hugging Face config.json and hardware figures from the
 * vendor datasheets, each entry citing its source; nothing here is derived (presets.c
 * derives parameter counts, bytes and KV sizes from the shapes). */
#include "sim/presets.h"

#include <stddef.h>
#include <strings.h>

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
