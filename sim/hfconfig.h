/* hfconfig: a Hugging Face `config.json` read as a model shape (preset_model_t), so that
 * every --model option takes the file a model repository ships (docs/models.md).
 *
 * What it accepts: a JSON object whose `architectures` list starts with a class whose
 * layers preset_model_t describes exactly:
 *  - dense decoders: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
 *    Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, and
 *    Gemma3ForConditionalGeneration (its language model, read from "text_config");
 *  - mixtures of experts in every layer: MixtralForCausalLM, Qwen3MoeForCausalLM,
 *    GptOssForCausalLM (no dense MLP: d_ff = moe_d_ff), Qwen2MoeForCausalLM (plus a shared
 *    expert, shared_d_ff);
 *  - DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: multi-head latent attention,
 *    first_k_dense_replace dense layers, then routed experts and n_shared_experts x
 *    moe_intermediate_size always-active ones.
 * Sliding windows are modelled by each class's own rule: Mistral, Mixtral and Phi-3 window
 * every layer when sliding_window is a number; Qwen2/Qwen3/Qwen2-MoE only with
 * use_sliding_window, and then the layers from max_window_layers on; gpt-oss and Gemma 2
 * the even layers, Gemma 3 all but every sliding_window_pattern-th (6), or in each case
 * what a layer_types list says. A window no shorter than max_position_embeddings never
 * binds and is left out. Anything else, and any config whose shape the struct would
 * describe wrongly (quantized weights, dense layers between the sparse ones, layer kinds
 * other than sliding and full attention), is refused: a wrong shape would give plausible
 * but wrong step times, which is worse than no answer.
 *
 * Invariants:
 *  - a returned shape has passed preset_model_validate; with MLA, head_dim is
 *    qk_nope_head_dim + qk_rope_head_dim and n_kv_heads is n_heads, whatever the file's
 *    num_key_value_heads; 0 < n_window_layers <= n_layers exactly when sliding_window > 0,
 *    and then sliding_window < max_seq;
 *  - every message starts with the file's path and names the config.json key at fault
 *    ("PATH: key 'hidden_size' is missing"; inside a wrapper "key 'text_config.hidden_size'
 *    is missing");
 *  - what is read but not modelled (RoPE scaling, attention biases and sinks, q/k norms,
 *    soft-capping, DeepSeek's grouped routing and multi-token-prediction layer, a vision
 *    tower) never changes the shape; it is handed back as one line of text.
 *
 * Ownership: nothing is kept after a call; the caller owns out, note and err. The JSON is
 * parsed by SQLite's JSON functions in a private in-memory database that lives for the
 * call only. */
#ifndef TWIN_HFCONFIG_H
#define TWIN_HFCONFIG_H

#include <stddef.h>

#include "sim/presets.h"

/* The file at path as a shape. note (may be NULL) gets one line saying what the file has
 * that the simulator does not model ("" when nothing). The preset's name is the
 * directory's name for a file called config.json (.../Llama-2-7b-hf/config.json ->
 * "Llama-2-7b-hf"; in a Hugging Face cache snapshot, the repository's), else the file name
 * without ".json" and a ".config" before it, cut to the name field's capacity. Returns 0,
 * or -1 with "PATH: ..." in err. */
int hfcfg_load(const char *path, preset_model_t *out, char *note, size_t notelen, char *err,
               size_t errlen);

/* The same for len bytes of text already in memory; path names it in messages and gives
 * the preset's name (the file need not exist). */
int hfcfg_parse(const char *path, const char *text, size_t len, preset_model_t *out,
                char *note, size_t notelen, char *err, size_t errlen);

/* 1 when name is to be read as a config.json: it ends in ".json" (whether or not the file
 * exists, so that a missing file is reported by this loader), or it names a readable file
 * whose first byte after white space (and a UTF-8 byte-order mark) is '{'. A `key = value`
 * preset file can never start so. Else 0. */
int hfcfg_is_config(const char *name);

/* The supported `architectures` entries, comma-separated, for messages and docs. */
const char *hfcfg_supported(void);

#endif
