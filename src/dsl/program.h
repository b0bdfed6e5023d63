// Program: the checked, fully resolved meaning of a .sect file (and its
// imports). The front end (dsl/, maestro_dsl) produces it; every other module
// reads it. Nothing here refers to the syntax tree: lets are evaluated, model
// names resolved to their built-in specs, defaults applied, paths made
// absolute. Header-only (the CMake target maestro_program), so the engine
// (nn/, cpu/) and graph/ read model specs without linking the front end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace maestro {

// A place in a source file (1-based line and column).
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
};

// ---------------------------------------------------------------- modalities
enum class Modality : uint8_t { Text = 0, Image = 1, Audio = 2, Video = 3 };
inline constexpr int kNumModalities = 4;

// A set of modalities as a bitmask (bit i = Modality i).
struct ModalitySet {
  uint8_t bits = 0;
  constexpr bool has(Modality m) const { return bits & (1u << static_cast<int>(m)); }
  constexpr void add(Modality m) { bits |= static_cast<uint8_t>(1u << static_cast<int>(m)); }
  constexpr bool operator==(const ModalitySet&) const = default;
};

// "text", "image", "audio", "video"
inline const char* modality_name(Modality m) {
  switch (m) {
    case Modality::Text: return "text";
    case Modality::Image: return "image";
    case Modality::Audio: return "audio";
    case Modality::Video: return "video";
  }
  return "?";
}

// ------------------------------------------------------------ built-in models
enum class Activation { Gelu, Relu, Silu };

// transformer(layers, hidden, heads, kv_heads = heads, ffn, vocab, max_seq = 4096,
//             causal = true, rope_theta = 10000, norm_eps = 1e-5): Llama.
struct TransformerSpec {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int64_t max_seq = 4096;
  bool causal = true;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  // Not written: whether anything reads the logits (a loss on the section,
  // a logits flow out of it), set by the checker. A transformer whose
  // logits nobody reads (a text encoder) neither runs nor is costed with
  // its LM head.
  bool logits_read = true;
};

// vit(layers, hidden, heads, ffn, patch, image, channels = 3, norm_eps = 1e-5,
//     pixel_shuffle = 1): CLIP vision. pixel_shuffle: 1/merge (InternVL's
// downsample_ratio): each merge×merge block of patches leaves as one token
// of merge²·hidden channels (docs/language.md, "pixel_shuffle").
struct VitSpec {
  int64_t layers = 0, hidden = 0, heads = 0, ffn = 0, patch = 0, image = 0;
  int64_t channels = 3;
  double norm_eps = 1e-5;
  int64_t merge = 1;  // pixel_shuffle = 1/merge; merge divides image/patch
  int64_t grid() const { return image / patch; }                        // patches per side
  int64_t patches_per_image() const { return grid() * grid(); }         // positions - 1 inside the encoder
  int64_t tokens_per_image() const { return patches_per_image() / (merge * merge); }  // what it emits
  int64_t output_width() const { return hidden * merge * merge; }
};

// audio_encoder(layers, hidden, heads, ffn, mel_bins = 80, frames_per_token = 2,
//               max_frames = 3000, norm_eps = 1e-5): Whisper-style encoder.
struct AudioEncoderSpec {
  int64_t layers = 0, hidden = 0, heads = 0, ffn = 0;
  int64_t mel_bins = 80, frames_per_token = 2, max_frames = 3000;
  double norm_eps = 1e-5;
};

// mlp(in, out, hidden = out, layers = 2, act = gelu): projector.
struct MlpSpec {
  int64_t in = 0, out = 0, hidden = 0, layers = 2;
  Activation act = Activation::Gelu;
};

struct ModelSpec {
  std::string name;  // the `model` declaration's name, or the built-in's name when inline
  std::variant<TransformerSpec, VitSpec, AudioEncoderSpec, MlpSpec> spec;

  // "transformer" | "vit" | "audio_encoder" | "mlp"
  const char* builtin() const {
    switch (spec.index()) {
      case 0: return "transformer";
      case 1: return "vit";
      case 2: return "audio_encoder";
      default: return "mlp";
    }
  }
  // Its layers: transformer, vit and audio encoder blocks; an mlp's linear layers.
  int64_t layers() const {
    return std::visit([](const auto& s) { return s.layers; }, spec);
  }
  // Width of the embeddings this model takes from an upstream activations flow
  // (transformer/vit/audio: hidden; mlp: in).
  int64_t input_width() const {
    if (auto* m = std::get_if<MlpSpec>(&spec)) return m->in;
    return hidden();
  }
  // Width of what it emits on an activations flow (mlp: out; vit:
  // merge²·hidden; audio encoder and transformer: hidden).
  int64_t output_width() const {
    if (auto* m = std::get_if<MlpSpec>(&spec)) return m->out;
    if (auto* v = std::get_if<VitSpec>(&spec)) return v->output_width();
    return hidden();
  }

 private:
  int64_t hidden() const {
    if (auto* t = std::get_if<TransformerSpec>(&spec)) return t->hidden;
    if (auto* v = std::get_if<VitSpec>(&spec)) return v->hidden;
    return std::get<AudioEncoderSpec>(spec).hidden;
  }
};

// ------------------------------------------------------------------ sections
enum class Mode { Train, Frozen };

// Activation condition over a sample's modalities: has(m), and, or, not, true.
struct Condition {
  enum class Kind { True, Has, And, Or, Not } kind = Kind::True;
  Modality modality = Modality::Text;  // for Has
  std::vector<Condition> args;         // And/Or: two; Not: one
  bool eval(ModalitySet s) const {
    switch (kind) {
      case Kind::True: return true;
      case Kind::Has: return s.has(modality);
      case Kind::And: return args[0].eval(s) && args[1].eval(s);
      case Kind::Or: return args[0].eval(s) || args[1].eval(s);
      case Kind::Not: return !args[0].eval(s);
    }
    return false;
  }
  // "has(image) and not has(audio)"; "always" for True
  std::string str() const {
    switch (kind) {
      case Kind::True: return "always";
      case Kind::Has: return std::string("has(") + modality_name(modality) + ")";
      case Kind::And: return "(" + args[0].str() + " and " + args[1].str() + ")";
      case Kind::Or: return "(" + args[0].str() + " or " + args[1].str() + ")";
      case Kind::Not: return "not " + args[0].str();
    }
    return "?";
  }
  static Condition has(Modality m) {
    Condition c;
    c.kind = Kind::Has;
    c.modality = m;
    return c;
  }
};

// Parallel degrees; std::nullopt means `auto` (the planner decides).
struct ParallelSpec {
  std::optional<int64_t> tp = 1, pp = 1, dp = std::nullopt;
};

enum class LossKind { CrossEntropy, KL };
struct LossTerm {
  LossKind kind = LossKind::CrossEntropy;
  double weight = 1.0;
  double temperature = 1.0;  // KL only
};

struct Section {
  std::string name;
  SourceLoc loc;
  ModelSpec model;
  Mode mode = Mode::Train;
  std::vector<Modality> consumes;  // in declaration order
  Condition when;                   // resolved default applied
  ParallelSpec parallel;
  std::optional<int64_t> micro_batch;  // nullopt = auto
  std::vector<LossTerm> loss;          // empty = none
  std::string weights;                 // absolute path, "" = random init
  // Layers whose activations backward recomputes (`recomputes_layer`):
  // `recompute = true` all of the model's, `= N` N of them, `false` none.
  // The engine reads this.
  int64_t recompute = 0;
  bool recompute_auto = false;  // `recompute = auto`: the planner's choice, SectionPlan::recompute_level
};

// Whether layer `l` (0-based, of `layers`) is one of the `recomputed` ones,
// spread evenly over the stack so that every pipeline stage recomputes its
// share: l is when ⌊(l+1)·k/L⌋ > ⌊l·k/L⌋ (k = L: every layer; k = L/2:
// every other one).
inline bool recomputes_layer(int64_t l, int64_t layers, int64_t recomputed) {
  return (l + 1) * recomputed / layers > l * recomputed / layers;
}

enum class FlowKind { Activations, Logits };
struct Flow {
  std::string from, to;  // section names
  FlowKind kind = FlowKind::Activations;
  SourceLoc loc;
};

// ---------------------------------------------------------------------- data
struct Distribution {
  enum class Kind { Constant, Uniform, LogNormal, Choice } kind = Kind::Constant;
  double value = 0;                  // Constant
  double min = 0, max = 0;           // Uniform (inclusive integers); LogNormal uses max as cap
  double median = 0, sigma = 0;      // LogNormal
  std::vector<double> values, weights;  // Choice
};

struct MixEntry {
  std::string name;  // "image_text"
  ModalitySet modalities;
  double weight = 0;
};

struct DataSpec {
  enum class Source { Synthetic, Files } source = Source::Synthetic;
  uint64_t seed = 0;      // synthetic
  std::string manifest;   // files: absolute path
  std::vector<MixEntry> mix;
  std::optional<Distribution> text_tokens, images, audio_frames;
  // Frames of a sample with video (synthetic). Frames are images to the
  // vision section, as with a manifest's "video" list: such a sample also
  // has the image modality and its images count the frames too.
  std::optional<Distribution> video_frames;
  bool skip_bad_samples = false;  // files: on_bad_sample = "skip" (default "error")
  SourceLoc loc;
};

// ---------------------------------------------------------------------- train
struct OptimizerSpec {  // adamw(lr, betas, eps, weight_decay, shard); PyTorch's defaults
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  // ZeRO-1 (Megatron's --use-distributed-optimizer): each of a section's dp
  // replicas keeps 1/dp of the optimizer state and updates that shard of the
  // parameters, then all-gathers them (docs/runtime.md, "Sharded optimizer").
  // [runtime] shard_optimizer in the TOML overrides it.
  bool shard = false;
};

struct LrSchedule {
  enum class Kind { Constant, Cosine } kind = Kind::Constant;
  int64_t warmup = 0;
};

enum class Precision { BF16, FP32 };

struct TrainSpec {
  int64_t global_batch = 0;
  int64_t steps = 0;
  uint64_t seed = 1;
  OptimizerSpec optimizer;
  LrSchedule schedule;
  double grad_clip = 1.0;  // global-norm clip; 0 = no clipping
  Precision precision = Precision::BF16;
  int64_t checkpoint_every = 0;  // 0 = never
  std::string checkpoint_dir;    // absolute path, "" = none
  SourceLoc loc;
};

// ------------------------------------------------------------------- program
struct Program {
  std::string file;                 // the main .sect file, absolute
  std::vector<std::string> sources;  // every file read (main first, then imports)
  std::vector<Section> sections;    // declaration order
  std::vector<Flow> flows;          // declaration order, chains split into edges
  DataSpec data;
  TrainSpec train;

  const Section* find_section(const std::string& name) const {
    for (const auto& s : sections)
      if (s.name == name) return &s;
    return nullptr;
  }
};

}  // namespace maestro
