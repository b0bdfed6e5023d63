// Looking up one encoder layer's parameters under CLIP's or Whisper's names.
#pragma once

#include <string>

#include "nn/encoder_block.h"

namespace maestro {

// CLIP vision: "<p>self_attn.{q,k,v,out}_proj.{weight,bias}", "layer_norm{1,2}",
// "mlp.fc{1,2}".
inline EncoderWeights clip_layer(const ParamLookup& p, const std::string& l) {
  const std::string a = l + "self_attn.";
  return {p(l + "layer_norm1.weight"), p(l + "layer_norm1.bias"), p(a + "q_proj.weight"), p(a + "q_proj.bias"),
          p(a + "k_proj.weight"),      p(a + "k_proj.bias"),      p(a + "v_proj.weight"), p(a + "v_proj.bias"),
          p(a + "out_proj.weight"),    p(a + "out_proj.bias"),    p(l + "layer_norm2.weight"),
          p(l + "layer_norm2.bias"),   p(l + "mlp.fc1.weight"),   p(l + "mlp.fc1.bias"),  p(l + "mlp.fc2.weight"),
          p(l + "mlp.fc2.bias")};
}

// Whisper encoder: "self_attn_layer_norm", unbiased k_proj, "final_layer_norm", "fc{1,2}".
inline EncoderWeights whisper_layer(const ParamLookup& p, const std::string& l) {
  const std::string a = l + "self_attn.";
  return {p(l + "self_attn_layer_norm.weight"), p(l + "self_attn_layer_norm.bias"), p(a + "q_proj.weight"),
          p(a + "q_proj.bias"), p(a + "k_proj.weight"), Param{}, p(a + "v_proj.weight"), p(a + "v_proj.bias"),
          p(a + "out_proj.weight"), p(a + "out_proj.bias"), p(l + "final_layer_norm.weight"),
          p(l + "final_layer_norm.bias"), p(l + "fc1.weight"), p(l + "fc1.bias"), p(l + "fc2.weight"),
          p(l + "fc2.bias")};
}

}  // namespace maestro
