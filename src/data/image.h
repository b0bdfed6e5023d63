// Images for files(manifest): PNG/JPEG decoding (stb_image, Debian libstb)
// to 8-bit RGB, and CLIP's preprocessing to the vit's input — exactly
// torchvision's Resize(image, BICUBIC) (shorter side to `image`, PIL's
// bicubic: a = -0.5, antialiased by widening the kernel by the downscale
// factor, 22-bit fixed-point weights, horizontal pass then vertical, each
// rounded to uint8, as Pillow's Resample.c), CenterCrop(image) (Python's
// round-half-even offsets), ToTensor (/255) and Normalize with CLIP's mean
// and std. Bit-exact with PIL on PNG input; JPEG decoders differ a little
// (stb vs libjpeg), see tests/data/image_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
};

// Throws DataError ("<path>: ...") for a missing, corrupt or unsupported file.
RgbImage decode_image(const std::string& path);

// Width and height from the header alone (no pixel decoding); throws DataError.
void probe_image(const std::string& path, int* width, int* height);

// PIL's Image.resize((width, height), Image.BICUBIC) on an RGB image.
RgbImage resize_bicubic(const RgbImage& in, int width, int height);

// CLIP's preprocessing: shorter side resized to `size` (bicubic), centre
// crop size x size, scaled to [0, 1], normalised per channel with CLIP's
// mean and std.                                          [3, size, size]
std::vector<float> clip_preprocess(const RgbImage& in, int size);

inline constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
inline constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

}  // namespace maestro
