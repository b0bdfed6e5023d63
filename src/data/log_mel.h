// Whisper's log-mel spectrogram (openai/whisper audio.py) of 16 kHz audio:
// the clip zero-padded or cut to frames * 160 samples, a 400-point STFT
// (25 ms periodic Hann window, 10 ms hop, centred with reflect padding, the
// last frame dropped) in single precision with FFTW, the power spectrum
// through `mel_bins` Slaney-scale, Slaney-normalised triangular filters
// (librosa.filters.mel(sr=16000, n_fft=400)), log10 of max(x, 1e-10),
// clamped below at (max - 8), then (x + 4) / 4. Checked against numpy in
// tests/data/log_mel_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace maestro {

// librosa's Slaney mel filterbank.                           [mel_bins, 201]
std::vector<float> mel_filters(int mel_bins);

// The spectrogram, time-major as the audio encoder reads it.  [frames, mel_bins]
std::vector<float> log_mel_spectrogram(const std::vector<float>& audio, int mel_bins, int frames);

}  // namespace maestro
