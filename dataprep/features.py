"""The audio features, computed in torch on any device: two log-mel spectrograms, named for who takes them.

`train_log_mel` (constants TRAIN_*) is this project's own: what the loaders deliver when audio is trained on
directly (1024-point STFT, hop 256, 64 HTK mel bands of the power, dB from -80 to 0 mapped to [-1, 1]), so a 1.024 s
clip at 16 kHz is a 64 x 64 image; every backend calls it on its device.

`audioldm_mel` (constants AUDIOLDM_*) is the one AudioLDM (Liu et al. 2023) gives its autoencoder. An autoencoder
trained on AudioLDM's features only reconstructs those features: a different window, hop, mel scale, filter
normalisation, log floor or frame alignment is an input it has never seen. So every constant is the one AudioLDM's
configuration names (`preprocessing` in audioldm_train/config/*/…yaml: 16 kHz, filter_length 1024, hop_length 160,
win_length 1024, 64 mel channels from 0 to 8 kHz), and the arithmetic follows its training data pipeline
(`mel_spectrogram_train` and `pad_spec` in audioldm_train/utilities/data/dataset.py):

1. reflect-pad the wave by (N_FFT - HOP) / 2 = 432 samples each side, then a periodic Hann-windowed STFT without
   centring: T // HOP frames, frame i centred on sample 160 i + 80;
2. the magnitude (not the power) of each bin, mapped to 64 bands by librosa's default filterbank (Slaney's mel scale,
   each triangle scaled to unit area), written out here because librosa is no dependency;
3. the natural log of the band magnitudes clamped at 1e-5 (Tacotron's `dynamic_range_compression`);
4. the frame count padded with zeros (`ZeroPad2d`: 0 in the log domain, not the floor) or cropped to the target.

The result is laid out (time, freq): `(..., frames, N_MELS)`, as AudioLDM's VAE takes it, (batch, 1, time, freq);
10.24 s at 16 kHz is 1,024 frames x 64 bands. `dataprep convert --vae` feeds this to an AudioLDM-shaped
autoencoder and stores the latents; `train --vae` computes the same features in the loop. The wave is taken as it
comes: AudioLDM's loader first removes its mean, scales its peak to 0.5 and zero-pads it to 10.24 s, which is the
data's business, not the features'."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# train_log_mel: 64 mel bands x one frame per hop of 256 samples: 64 frames from a 1.024 s clip at 16 kHz
TRAIN_N_FFT, TRAIN_HOP, TRAIN_N_MELS = 1024, 256, 64
TRAIN_DB_FLOOR, TRAIN_DB_RANGE = -80.0, 80.0  # log-power in dB mapped linearly from [-80, 0] to [-1, 1]
_HTK_FILTERS: dict[tuple, torch.Tensor] = {}


def htk_mel_filters(sample_rate: int, device: torch.device) -> torch.Tensor:
    """(n_fft//2+1, n_mels) triangular HTK mel filterbank of train_log_mel (torchaudio is not a dependency, so it is
    written out)."""
    key = (sample_rate, str(device))
    if key not in _HTK_FILTERS:
        hz_to_mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
        mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), TRAIN_N_MELS + 2, dtype=torch.float64)
        hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
        freqs = torch.linspace(0, sample_rate / 2, TRAIN_N_FFT // 2 + 1, dtype=torch.float64)
        lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
        up, down = (freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)
        _HTK_FILTERS[key] = torch.clamp(torch.minimum(up, down), min=0).T.to(torch.float32).to(device)
    return _HTK_FILTERS[key]


def train_log_mel(wave: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """(..., T) float32 on any device -> (..., TRAIN_N_MELS, T // TRAIN_HOP) log-mel scaled to about [-1, 1]: what the
    loaders deliver for audio."""
    shape = wave.shape[:-1]
    window = torch.hann_window(TRAIN_N_FFT, device=wave.device)
    spec = torch.stft(
        wave.reshape(-1, wave.shape[-1]).float(), TRAIN_N_FFT, TRAIN_HOP, window=window, return_complex=True
    )
    power = spec.abs().pow(2)  # (B, freq, frames)
    mel = torch.matmul(power.transpose(1, 2), htk_mel_filters(sample_rate, wave.device)).transpose(1, 2)
    db = 10.0 * torch.log10(mel.clamp_min(1e-10))
    frames = wave.shape[-1] // TRAIN_HOP  # stft's centred padding adds one frame past the clip's end
    scaled = ((db - TRAIN_DB_FLOOR) / TRAIN_DB_RANGE * 2.0 - 1.0).clamp(-1.0, 1.0)[..., :frames]
    return scaled.reshape(*shape, TRAIN_N_MELS, scaled.shape[-1])


AUDIOLDM_SAMPLE_RATE = 16000  # preprocessing.audio.sampling_rate: AudioLDM's VAE and HiFi-GAN vocoder work at 16 kHz
AUDIOLDM_N_FFT = 1024  # preprocessing.stft.filter_length, and win_length: 64 ms frames, 513 frequency bins
AUDIOLDM_HOP = 160  # preprocessing.stft.hop_length: 10 ms per frame, so 10.24 s (duration) is 1,024 frames
AUDIOLDM_N_MELS = 64  # preprocessing.mel.n_mel_channels: the VAE's input is 64 bins wide (ddconfig.mel_bins)
AUDIOLDM_FMIN = 0.0  # preprocessing.mel.mel_fmin
AUDIOLDM_FMAX = 8000.0  # preprocessing.mel.mel_fmax: up to Nyquist at 16 kHz

# mel_spectrogram_train's reflect padding: exactly T // AUDIOLDM_HOP frames come out
_AUDIOLDM_PAD = (AUDIOLDM_N_FFT - AUDIOLDM_HOP) // 2
_AUDIOLDM_FLOOR = 1e-5  # dynamic_range_compression's clip_val: silence maps to log(1e-5), about -11.51

# Slaney's mel scale (librosa's default, htk=False): linear below 1 kHz at 200/3 Hz per mel, logarithmic above with
# 27 mels per factor 6.4 in frequency, so the two pieces meet at 1 kHz = 15 mels
_HZ_PER_MEL = 200.0 / 3.0
_BREAK_HZ = 1000.0
_BREAK_MEL = _BREAK_HZ / _HZ_PER_MEL
_LOG_STEP = math.log(6.4) / 27.0

_SLANEY_FILTERS: dict[tuple[str, torch.dtype], torch.Tensor] = {}


def _hz_to_mel(hz: float) -> float:
    if hz < _BREAK_HZ:
        return hz / _HZ_PER_MEL
    return _BREAK_MEL + math.log(hz / _BREAK_HZ) / _LOG_STEP


def _mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    log_part = _BREAK_HZ * torch.exp(_LOG_STEP * (mel - _BREAK_MEL))
    return torch.where(mel >= _BREAK_MEL, log_part, _HZ_PER_MEL * mel)


def slaney_mel_filters(
    sample_rate: int = AUDIOLDM_SAMPLE_RATE,
    n_fft: int = AUDIOLDM_N_FFT,
    n_mels: int = AUDIOLDM_N_MELS,
    fmin: float = AUDIOLDM_FMIN,
    fmax: float = AUDIOLDM_FMAX,
) -> torch.Tensor:
    """(n_mels, n_fft // 2 + 1) float32: librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=fmin,
    fmax=fmax), the basis AudioLDM multiplies its magnitudes by. Band m is a triangle rising from edge m, peaking at
    edge m + 1 and falling to edge m + 2 of n_mels + 2 edges equally spaced on Slaney's mel scale, scaled by
    2 / (edge[m+2] - edge[m]) so that every band has unit area in Hz (norm="slaney"). Built in float64, then cast,
    as librosa does."""
    if n_mels < 1 or n_fft < 2:
        raise ValueError(f"n_mels must be at least 1 and n_fft at least 2, not {n_mels} and {n_fft}")
    if not 0.0 <= fmin < fmax <= sample_rate / 2:
        raise ValueError(f"need 0 <= fmin < fmax <= sample_rate / 2 = {sample_rate / 2}, not fmin={fmin}, fmax={fmax}")
    mels = torch.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2, dtype=torch.float64)
    edges = _mel_to_hz(mels)
    freqs = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * (sample_rate / n_fft)  # the rfft bins' frequencies
    lo, peak, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising, falling = (freqs - lo) / (peak - lo), (hi - freqs) / (hi - peak)
    triangles = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return (triangles * (2.0 / (hi - lo))).to(torch.float32)


def _slaney_filters(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """AudioLDM's basis on `device`, built once per device: its float32 values, in `dtype`."""
    key = (str(device), dtype)
    if key not in _SLANEY_FILTERS:
        _SLANEY_FILTERS[key] = slaney_mel_filters().to(device=device, dtype=dtype)
    return _SLANEY_FILTERS[key]


def audioldm_frames(num_samples: int) -> int:
    """The frames a clip of `num_samples` samples at 16 kHz gives: num_samples // AUDIOLDM_HOP, one per 10 ms (the
    padding of (AUDIOLDM_N_FFT - AUDIOLDM_HOP) / 2 each side makes it exact), so 10.24 s = 163,840 samples -> 1,024
    frames, AudioLDM's length.
    Clips of 432 samples (27 ms) or fewer are refused: reflecting 432 samples at each end needs more."""
    if num_samples <= _AUDIOLDM_PAD:
        raise ValueError(
            f"AudioLDM's mel features need clips longer than {_AUDIOLDM_PAD} samples "
            f"({_AUDIOLDM_PAD * 1000 // AUDIOLDM_SAMPLE_RATE} ms at {AUDIOLDM_SAMPLE_RATE} Hz), not {num_samples}; "
            "convert longer clips"
        )
    return num_samples // AUDIOLDM_HOP


def audioldm_input(sample_rate: int, channels: int, num_samples: int) -> tuple[tuple[int, int, int], dict]:
    """The autoencoder's input shape (1, frames, AUDIOLDM_N_MELS) for clips of this data, and its description for the
    manifest; a VaeError saying how to convert instead where the clips are not mono at 16 kHz."""
    from common.vae_name import VaeError

    if sample_rate != AUDIOLDM_SAMPLE_RATE or channels != 1:
        raise VaeError(
            f"AudioLDM's mel features take mono clips at {AUDIOLDM_SAMPLE_RATE} Hz; this data has {channels} "
            f"channel(s) at {sample_rate} Hz: convert with --sample-rate {AUDIOLDM_SAMPLE_RATE} --channels 1"
        )
    frames = audioldm_frames(num_samples)
    described = {
        "kind": "log-mel (AudioLDM)",
        "sample_rate": AUDIOLDM_SAMPLE_RATE,
        "clip_seconds": num_samples / AUDIOLDM_SAMPLE_RATE,
        "frames": frames,
        "mels": AUDIOLDM_N_MELS,
        "layout": "(1, frames, mels)",
    }
    return (1, frames, AUDIOLDM_N_MELS), described


def audioldm_mel(wave: torch.Tensor, frames: int | None = None) -> torch.Tensor:
    """(..., T) wave at 16 kHz on any device -> (..., frames, AUDIOLDM_N_MELS) float32 log-mel, AudioLDM's VAE input.

    `frames` defaults to audioldm_frames(T) = T // AUDIOLDM_HOP, what the STFT gives. A larger `frames` appends
    frames of 0.0 (AudioLDM's pad_spec zero-pads the log-mel, so a padded frame reads as magnitude 1, not as silence:
    to get what AudioLDM's loader gives a short clip, zero-pad the wave to frames * AUDIOLDM_HOP samples instead); a
    smaller one keeps the first `frames`. float64 waves are transformed in float64, anything else in float32."""
    if wave.dim() < 1 or wave.shape[-1] <= _AUDIOLDM_PAD:
        raise ValueError(
            f"audioldm_mel takes (..., T) waves with T > {_AUDIOLDM_PAD} samples (reflect padding of "
            f"{_AUDIOLDM_PAD} needs them), not shape {tuple(wave.shape)}"
        )
    if frames is not None and frames < 1:
        raise ValueError(f"frames must be at least 1, or None for T // {AUDIOLDM_HOP}; not {frames}")
    dtype = torch.float64 if wave.dtype == torch.float64 else torch.float32
    batch, length = wave.shape[:-1], wave.shape[-1]
    x = wave.to(dtype).reshape(math.prod(batch), 1, length)
    x = F.pad(x, (_AUDIOLDM_PAD, _AUDIOLDM_PAD), mode="reflect").squeeze(1)  # F.pad's reflect wants a channel dimension
    window = torch.hann_window(
        AUDIOLDM_N_FFT, periodic=True, dtype=dtype, device=wave.device
    )  # scipy's get_window("hann")
    spec = torch.stft(x, AUDIOLDM_N_FFT, AUDIOLDM_HOP, window=window, center=False, onesided=True, return_complex=True)
    mel = torch.matmul(_slaney_filters(wave.device, dtype), spec.abs())  # (B, AUDIOLDM_N_MELS, T // AUDIOLDM_HOP)
    log_mel = torch.log(torch.clamp(mel, min=_AUDIOLDM_FLOOR)).transpose(
        1, 2
    )  # (B, frames, AUDIOLDM_N_MELS): time first
    have = log_mel.shape[1]
    want = have if frames is None else frames
    if want > have:
        log_mel = F.pad(log_mel, (0, 0, 0, want - have), value=0.0)
    elif want < have:
        log_mel = log_mel[:, :want]
    # pad_spec also drops the last band when there is an odd number of them; with 64 it never does
    return log_mel.to(torch.float32).reshape(*batch, want, AUDIOLDM_N_MELS)
