// Image decoding and CLIP preprocessing (see image.h). The resampler follows
// Pillow 9's libImaging/Resample.c step by step so the result is bit-exact.
#include "data/image.h"

#include <fmt/format.h>
#include <stb_image.h>

#include <cmath>
#include <memory>

#include "data/data_error.h"

namespace maestro {

RgbImage decode_image(const std::string& path) {
  int w = 0, h = 0, comp = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load(path.c_str(), &w, &h, &comp, 3), stbi_image_free);
  if (!px) throw DataError(fmt::format("{}: cannot decode the image ({})", path, stbi_failure_reason()));
  RgbImage out{w, h, std::vector<uint8_t>(px.get(), px.get() + size_t(w) * h * 3)};
  return out;
}

void probe_image(const std::string& path, int* width, int* height) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(fmt::format("{}: cannot open the image", path));
  int comp = 0;
  const bool ok = stbi_info_from_file(f, width, height, &comp) != 0;
  // stb_image also reads BMP, GIF, TGA...: the manifest promises PNG and JPEG only.
  unsigned char magic[4] = {0, 0, 0, 0};
  std::fseek(f, 0, SEEK_SET);
  const size_t got = std::fread(magic, 1, 4, f);
  std::fclose(f);
  const bool png = got == 4 && magic[0] == 0x89 && magic[1] == 'P' && magic[2] == 'N' && magic[3] == 'G';
  const bool jpeg = got >= 3 && magic[0] == 0xFF && magic[1] == 0xD8 && magic[2] == 0xFF;
  if (!png && !jpeg) throw DataError(fmt::format("{}: not a PNG or JPEG file", path));
  if (!ok) throw DataError(fmt::format("{}: cannot read the image header ({})", path, stbi_failure_reason()));
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit channels

double bicubic(double x) {  // Keys' cubic with a = -0.5, support 2
  constexpr double a = -0.5;
  if (x < 0) x = -x;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// One axis' taps: output o reads in[first[o] .. first[o] + count[o]) with
// fixed-point weights coeff[o * ksize + k] (Pillow's precompute_coeffs and
// normalize_coeffs_8bpc).
struct Taps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> coeff;
};

Taps taps(int in_size, int out_size) {
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  Taps t;
  t.ksize = int(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.coeff.assign(size_t(out_size) * t.ksize, 0);
  std::vector<double> k(t.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale, ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0;
    for (int x = 0; x < xmax; ++x) ww += k[x] = bicubic((x + xmin - center + 0.5) * ss);
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0 ? k[x] / ww : k[x];
      t.coeff[size_t(o) * t.ksize + x] =
          int32_t(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    t.first[o] = xmin;
    t.count[o] = xmax;
  }
  return t;
}

uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return uint8_t(v >> kPrecisionBits);
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& in, int width, int height) {
  RgbImage cur = in;
  if (width != in.width) {  // horizontal pass: [h, w, 3] -> [h, width, 3]
    const Taps t = taps(in.width, width);
    RgbImage out{width, in.height, std::vector<uint8_t>(size_t(width) * in.height * 3)};
    for (int y = 0; y < in.height; ++y)
      for (int o = 0; o < width; ++o)
        for (int c = 0; c < 3; ++c) {
          int32_t acc = 1 << (kPrecisionBits - 1);
          for (int k = 0; k < t.count[o]; ++k)
            acc += int32_t(cur.rgb[(size_t(y) * in.width + t.first[o] + k) * 3 + c]) * t.coeff[size_t(o) * t.ksize + k];
          out.rgb[(size_t(y) * width + o) * 3 + c] = clip8(acc);
        }
    cur = std::move(out);
  }
  if (height != in.height) {  // vertical pass: [h, width, 3] -> [height, width, 3]
    const Taps t = taps(in.height, height);
    RgbImage out{width, height, std::vector<uint8_t>(size_t(width) * height * 3)};
    for (int o = 0; o < height; ++o)
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c) {
          int32_t acc = 1 << (kPrecisionBits - 1);
          for (int k = 0; k < t.count[o]; ++k)
            acc += int32_t(cur.rgb[(size_t(t.first[o] + k) * width + x) * 3 + c]) * t.coeff[size_t(o) * t.ksize + k];
          out.rgb[(size_t(o) * width + x) * 3 + c] = clip8(acc);
        }
    cur = std::move(out);
  }
  return cur;
}

std::vector<float> clip_preprocess(const RgbImage& in, int size) {
  // torchvision Resize(size): the shorter side becomes size, the longer int(size * long / short).
  const bool wide = in.width >= in.height;
  const int shorter = wide ? in.height : in.width, longer = wide ? in.width : in.height;
  const int long_out = int(int64_t(size) * longer / shorter);
  const int w = wide ? long_out : size, h = wide ? size : long_out;
  const RgbImage r = (w == in.width && h == in.height) ? in : resize_bicubic(in, w, h);
  // CenterCrop(size): offsets int(round((dim - size) / 2)), Python's half-to-even round.
  const int top = int(std::nearbyint((h - size) / 2.0)), left = int(std::nearbyint((w - size) / 2.0));
  std::vector<float> out(size_t(3) * size * size);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) {
        const float v = float(r.rgb[(size_t(top + y) * w + left + x) * 3 + c]) / 255.0f;
        out[(size_t(c) * size + y) * size + x] = (v - kClipMean[c]) / kClipStd[c];
      }
  return out;
}

}  // namespace maestro
