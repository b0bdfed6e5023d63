// The documented upper bounds of what a program and a run may ask for
// (docs/sect-language.md, "Limits"; docs/cli.md). Each is checked where the
// value is read and reported as a located error (exit status 2), so that a
// mistyped size is an error, never a hang, an overflow or std::bad_alloc.
// With these bounds every parameter, FLOP and byte count of graph/ fits in
// 64 bits (graph/model_tensors.cpp checks its arithmetic all the same).
#pragma once

#include <cstdint>

namespace maestro::limits {

inline constexpr int64_t kSourceBytes = 1 << 20;         // a program's .sect files together: 1 MiB (~180 MB to parse)
inline constexpr int64_t kLayers = 16384;                // layers of a built-in model
inline constexpr int64_t kWidth = 1 << 20;               // hidden, heads, kv_heads (1,048,576)
inline constexpr int64_t kFfn = 1 << 22;                 // ffn (4,194,304)
inline constexpr int64_t kVocab = 1 << 24;               // vocab, mlp in/out, max_seq, max_frames (16,777,216)
inline constexpr int64_t kImage = 1 << 16;               // vit image side and patch, in pixels
inline constexpr int64_t kChannels = 64;                 // vit channels
inline constexpr int64_t kMelBins = 4096;                // audio_encoder mel_bins
inline constexpr int64_t kFramesPerToken = 64;           // audio_encoder frames_per_token
inline constexpr int64_t kGlobalBatch = 1 << 20;         // train.global_batch (samples per step)
inline constexpr int64_t kSteps = 1'000'000'000;         // train.steps and --steps
inline constexpr int64_t kSampleTokens = 1 << 20;        // text_tokens and audio_frames of one sample
inline constexpr int64_t kSampleImages = 1024;           // images of one sample

}  // namespace maestro::limits
