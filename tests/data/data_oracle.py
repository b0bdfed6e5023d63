#!/usr/bin/python3
"""The data oracle (Debian python3-pil + python3-numpy), independent of the
C++ code it checks:

  data_oracle.py image <file> <size> <out.f32>
      CLIP's preprocessing as torchvision composes it, with PIL doing the
      work: convert("RGB"), Resize(size, BICUBIC) (shorter side to size, the
      longer int(size * long / short)), CenterCrop(size) (offsets
      int(round(...))), /255, (x - mean) / std.            -> [3, size, size]
  data_oracle.py mel <file.wav> <mel_bins> <frames> <out.f32>
      openai/whisper's log_mel_spectrogram in numpy (float64): pad/cut to
      frames*160 samples, centred reflect-padded 400-point STFT with a
      periodic Hann window, hop 160, last frame dropped, |X|^2, librosa's
      Slaney mel filterbank, log10(max(x, 1e-10)), max(x, max - 8),
      (x + 4) / 4.                                     -> [frames, mel_bins]
Outputs are raw little-endian float32."""
import struct
import sys

import numpy as np
from PIL import Image

MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
STD = np.array([0.26862954, 0.26130258, 0.27577711])


def image(path, size):
    img = Image.open(path).convert("RGB")
    w, h = img.size
    short, long = min(w, h), max(w, h)
    new_long = int(size * long / short)
    nw, nh = (new_long, size) if w >= h else (size, new_long)
    img = img.resize((nw, nh), Image.BICUBIC)
    top, left = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    x = np.asarray(img, dtype=np.float64) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def read_wav(path):
    b = open(path, "rb").read()
    assert b[:4] == b"RIFF" and b[8:12] == b"WAVE"
    at, fmt = 12, None
    while True:
        cid, size = b[at:at + 4], struct.unpack("<I", b[at + 4:at + 8])[0]
        at += 8
        if cid == b"fmt ":
            code, ch, rate, _, _, bits = struct.unpack("<HHIIHH", b[at:at + 16])
            fmt = (code, bits)
        elif cid == b"data":
            data = b[at:at + size]
            break
        at += size + (size & 1)
    code, bits = fmt
    if code == 3:
        return np.frombuffer(data, "<f4").astype(np.float64)
    if bits == 8:
        return (np.frombuffer(data, np.uint8).astype(np.float64) - 128) / 128
    if bits == 16:
        return np.frombuffer(data, "<i2").astype(np.float64) / 32768
    return np.frombuffer(data, "<i4").astype(np.float64) / 2147483648


def hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-9) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz(m):
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(n_mels, sr=16000, n_fft=400):  # librosa.filters.mel, htk=False, norm="slaney"
    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    w = np.zeros((n_mels, len(fftfreqs)))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        w[i] = np.maximum(0, np.minimum(lower, upper))
    return w * (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]


def log_mel(audio, n_mels, frames):
    n = frames * 160
    audio = np.pad(audio[:n], (0, max(0, n - len(audio))))
    x = np.pad(audio, 200, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)  # torch.hann_window(400), periodic
    idx = np.arange(400)[None, :] + 160 * np.arange(frames + 1)[:, None]
    stft = np.fft.rfft(x[idx] * window, axis=1)[:-1]  # [frames, 201], last frame dropped
    mel = (np.abs(stft) ** 2) @ mel_filters(n_mels).T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


if __name__ == "__main__":
    if sys.argv[1] == "image":
        out = image(sys.argv[2], int(sys.argv[3]))
    else:
        out = log_mel(read_wav(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    out.astype("<f4").tofile(sys.argv[-1])
