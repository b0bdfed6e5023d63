// WAV parsing (see wav.h). Little-endian reads with bounds checked at
// every step: the parser is fuzzed.
#include "data/wav.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "data/data_error.h"

namespace maestro {

namespace {

uint32_t u32(std::string_view b, size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8 | uint32_t(uint8_t(b[at + 2])) << 16 |
         uint32_t(uint8_t(b[at + 3])) << 24;
}
uint16_t u16(std::string_view b, size_t at) { return uint16_t(uint8_t(b[at]) | uint8_t(b[at + 1]) << 8); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: cannot open the audio file", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

WavInfo parse_wav_header(std::string_view b, const std::string& name) {
  auto fail = [&](const std::string& why) { return DataError(fmt::format("{}: {}", name, why)); };
  if (b.size() < 12 || b.substr(0, 4) != "RIFF" || b.substr(8, 4) != "WAVE") throw fail("not a RIFF/WAVE file");
  WavInfo info;
  bool have_fmt = false;
  size_t at = 12;
  while (true) {
    if (b.size() - at < 8) throw fail(have_fmt ? "no \"data\" chunk" : "no \"fmt \" chunk");
    const std::string_view id = b.substr(at, 4);
    const uint64_t size = u32(b, at + 4);
    at += 8;
    if (id == "data") {
      if (!have_fmt) throw fail("the \"data\" chunk comes before \"fmt \"");
      if (size > b.size() - at) throw fail(fmt::format("the \"data\" chunk claims {} bytes, the file holds {}", size,
                                                       b.size() - at));
      info.data_offset = at;
      info.frames = int64_t(size / (info.bits / 8));
      return info;
    }
    if (size > b.size() - at) throw fail(fmt::format("the \"{}\" chunk runs past the end of the file", id));
    if (id == "fmt ") {
      if (size < 16) throw fail("the \"fmt \" chunk is shorter than 16 bytes");
      int format = u16(b, at);
      const int channels = u16(b, at + 2);
      const uint32_t rate = u32(b, at + 4);
      const int bits = u16(b, at + 14);
      if (format == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the subformat GUID starts with the format code
        if (size < 40) throw fail("a WAVE_FORMAT_EXTENSIBLE \"fmt \" chunk shorter than 40 bytes");
        format = u16(b, at + 24);
      }
      if (channels != 1 || rate != kWavRate)
        throw fail(fmt::format("{} Hz with {} channel(s); only 16000 Hz mono is supported", rate, channels));
      if (!((format == 1 && (bits == 8 || bits == 16 || bits == 32)) || (format == 3 && bits == 32)))
        throw fail(fmt::format("sample format {} with {} bits is not supported (8/16/32-bit PCM or 32-bit float)",
                               format, bits));
      info.format = format;
      info.bits = bits;
      have_fmt = true;
    }
    at += size + (size & 1);  // chunks are padded to an even size
    if (at > b.size()) throw fail(have_fmt ? "no \"data\" chunk" : "no \"fmt \" chunk");
  }
}

std::vector<float> decode_wav(std::string_view b, const std::string& name) {
  const WavInfo info = parse_wav_header(b, name);
  std::vector<float> out(size_t(info.frames));
  const char* p = b.data() + info.data_offset;
  for (size_t i = 0; i < out.size(); ++i) {
    switch (info.bits) {
      case 8:
        out[i] = (float(uint8_t(p[i])) - 128.0f) / 128.0f;
        break;
      case 16:
        out[i] = float(int16_t(u16(b, info.data_offset + 2 * i))) / 32768.0f;
        break;
      default: {
        const uint32_t v = u32(b, info.data_offset + 4 * i);
        if (info.format == 3) {
          std::memcpy(&out[i], &v, 4);
          if (!std::isfinite(out[i])) throw DataError(fmt::format("{}: sample {} is not a finite number", name, i));
        } else {
          out[i] = float(double(int32_t(v)) / 2147483648.0);
        }
      }
    }
  }
  return out;
}

std::vector<float> read_wav(const std::string& path) { return decode_wav(read_file(path), path); }

WavInfo probe_wav(const std::string& path) { return parse_wav_header(read_file(path), path); }

}  // namespace maestro
