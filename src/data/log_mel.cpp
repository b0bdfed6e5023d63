// Whisper's log-mel spectrogram (see log_mel.h).
#include "data/log_mel.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace maestro {

namespace {

constexpr int kFft = 400, kHop = 160, kBins = kFft / 2 + 1, kRate = 16000;

// Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa, htk=False).
constexpr double kFsp = 200.0 / 3, kMinLogHz = 1000.0, kMinLogMel = kMinLogHz / kFsp;
const double kLogStep = std::log(6.4) / 27.0;

double hz_to_mel(double f) { return f >= kMinLogHz ? kMinLogMel + std::log(f / kMinLogHz) / kLogStep : f / kFsp; }
double mel_to_hz(double m) { return m >= kMinLogMel ? kMinLogHz * std::exp(kLogStep * (m - kMinLogMel)) : kFsp * m; }

// FFTW's planner is not thread-safe (execution is): plans are made under a lock.
std::mutex& fftw_planner_lock() {
  static std::mutex m;
  return m;
}

}  // namespace

std::vector<float> mel_filters(int mel_bins) {
  std::vector<double> mel_f(size_t(mel_bins) + 2);
  const double top = hz_to_mel(kRate / 2.0);
  for (int i = 0; i < mel_bins + 2; ++i) mel_f[i] = mel_to_hz(top * i / (mel_bins + 1));
  std::vector<float> w(size_t(mel_bins) * kBins);
  for (int m = 0; m < mel_bins; ++m) {
    const double enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
    for (int k = 0; k < kBins; ++k) {
      const double f = double(kRate / 2) * k / (kBins - 1);
      const double lower = (f - mel_f[m]) / (mel_f[m + 1] - mel_f[m]);
      const double upper = (mel_f[m + 2] - f) / (mel_f[m + 2] - mel_f[m + 1]);
      w[size_t(m) * kBins + k] = float(std::max(0.0, std::min(lower, upper)) * enorm);
    }
  }
  return w;
}

std::vector<float> log_mel_spectrogram(const std::vector<float>& audio, int mel_bins, int frames) {
  if (frames < 2) throw std::invalid_argument("log_mel_spectrogram: at least 2 frames");
  const int64_t n = int64_t(frames) * kHop;  // the clip, cut or zero-padded
  auto sample = [&](int64_t i) { return i < int64_t(audio.size()) ? audio[size_t(i)] : 0.0f; };
  auto padded = [&](int64_t i) {  // reflect padding by kFft/2 on both sides
    i -= kFft / 2;
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return sample(i);
  };
  float window[kFft];
  for (int i = 0; i < kFft; ++i) window[i] = float(0.5 - 0.5 * std::cos(2.0 * M_PI * i / kFft));  // periodic Hann

  std::unique_ptr<float, void (*)(void*)> in(fftwf_alloc_real(kFft), fftwf_free);
  std::unique_ptr<fftwf_complex, void (*)(void*)> out(fftwf_alloc_complex(kBins), fftwf_free);
  fftwf_plan plan;
  {
    std::lock_guard<std::mutex> lock(fftw_planner_lock());
    plan = fftwf_plan_dft_r2c_1d(kFft, in.get(), out.get(), FFTW_ESTIMATE);
  }
  const std::vector<float> filters = mel_filters(mel_bins);
  std::vector<float> power(kBins), mel(size_t(frames) * mel_bins);  // mel: [frames, mel_bins]
  for (int t = 0; t < frames; ++t) {
    for (int i = 0; i < kFft; ++i) in.get()[i] = padded(int64_t(t) * kHop + i) * window[i];
    fftwf_execute(plan);
    for (int k = 0; k < kBins; ++k) power[k] = out.get()[k][0] * out.get()[k][0] + out.get()[k][1] * out.get()[k][1];
    for (int m = 0; m < mel_bins; ++m) {
      float acc = 0;
      for (int k = 0; k < kBins; ++k) acc += filters[size_t(m) * kBins + k] * power[k];
      mel[size_t(t) * mel_bins + m] = std::log10(std::max(acc, 1e-10f));
    }
  }
  {
    std::lock_guard<std::mutex> lock(fftw_planner_lock());
    fftwf_destroy_plan(plan);
  }
  const float floor = *std::max_element(mel.begin(), mel.end()) - 8.0f;
  for (float& v : mel) v = (std::max(v, floor) + 4.0f) / 4.0f;
  return mel;
}

}  // namespace maestro
