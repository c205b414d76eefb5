"""AudioLDM's log-mel features (dataprep/features.py): the Slaney filterbank checked against an independent
definition of the mel scale, and the spectrogram's framing, floor, padding and shapes checked on real signals."""

from __future__ import annotations

import math

import pytest
import torch

from dataprep.features import (
    AUDIOLDM_HOP,
    AUDIOLDM_N_FFT,
    AUDIOLDM_N_MELS,
    AUDIOLDM_SAMPLE_RATE,
    audioldm_frames,
    audioldm_mel,
    slaney_mel_filters,
)

BIN_HZ = AUDIOLDM_SAMPLE_RATE / AUDIOLDM_N_FFT  # 15.625 Hz between rfft bins
FREQS = [k * BIN_HZ for k in range(AUDIOLDM_N_FFT // 2 + 1)]


def slaney_edges(n_mels: int = AUDIOLDM_N_MELS, fmin: float = 0.0, fmax: float = 8000.0) -> list[float]:
    """n_mels + 2 band edges in Hz, equally spaced on Slaney's mel scale (Auditory Toolbox, librosa's default)."""
    step = math.log(6.4) / 27  # 27 mels per factor 6.4 above 1 kHz; 200/3 Hz per mel below

    def to_mel(f: float) -> float:
        return f / (200 / 3) if f < 1000 else 15 + math.log(f / 1000) / step

    def to_hz(m: float) -> float:
        return m * 200 / 3 if m < 15 else 1000 * math.exp((m - 15) * step)

    lo, hi = to_mel(fmin), to_mel(fmax)
    return [to_hz(lo + (hi - lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]


def sine(freq: float, seconds: float = 1.0, amplitude: float = 0.5) -> torch.Tensor:
    t = torch.arange(int(seconds * AUDIOLDM_SAMPLE_RATE), dtype=torch.float64) / AUDIOLDM_SAMPLE_RATE
    return (amplitude * torch.sin(2 * math.pi * freq * t)).float()


def noise(*shape: int, seed: int = 0) -> torch.Tensor:
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) - 0.5).float()


def test_filterbank_shape():
    """64 non-negative float32 bands over the 513 bins of a 1024-point FFT, none of them empty."""
    fb = slaney_mel_filters()
    assert fb.shape == (64, 513) and fb.dtype == torch.float32
    assert (fb >= 0).all() and (fb.amax(dim=1) > 0).all()


def test_each_band_peaks_at_its_slaney_centre():
    """Band m is nonzero only strictly between edges m and m+2, and peaks within one FFT bin of edge m+1."""
    fb, edges = slaney_mel_filters(), slaney_edges()
    for m in range(AUDIOLDM_N_MELS):
        row = fb[m]
        peak = FREQS[int(row.argmax())]
        assert abs(peak - edges[m + 1]) < BIN_HZ, (m, peak, edges[m + 1])
        support = [f for f, w in zip(FREQS, row.tolist()) if w > 0]
        assert edges[m] < min(support) and max(support) < edges[m + 2], m


def test_slaney_area_normalisation():
    """Each band is its triangle times 2 / (f[m+2] - f[m]): so scaled back, neighbouring triangles sum to exactly 1
    between the first and the last centre, and the wide bands integrate to 1 over Hz."""
    fb, edges = slaney_mel_filters().double(), slaney_edges()
    widths = torch.tensor([edges[m + 2] - edges[m] for m in range(AUDIOLDM_N_MELS)], dtype=torch.float64)
    triangles = fb * (widths / 2)[:, None]
    assert triangles.max() <= 1 + 1e-6
    inside = [k for k, f in enumerate(FREQS) if edges[1] <= f <= edges[-2]]
    assert torch.allclose(triangles[:, inside].sum(dim=0), torch.ones(len(inside), dtype=torch.float64), atol=1e-6)
    for m in range(AUDIOLDM_N_MELS):
        if widths[m] > 40 * BIN_HZ:  # sampled finely enough for a Riemann sum to be the integral within 0.1%
            assert float(fb[m].sum() * BIN_HZ) == pytest.approx(1.0, rel=1e-3), m


def test_filterbank_takes_other_settings():
    """Other rates and sizes give the matching shapes and centres; an fmax above Nyquist is refused."""
    fb = slaney_mel_filters(sample_rate=22050, n_fft=2048, n_mels=80, fmin=50.0, fmax=11025.0)
    edges, bin_hz = slaney_edges(80, 50.0, 11025.0), 22050 / 2048
    assert fb.shape == (80, 1025)
    assert all(abs(int(fb[m].argmax()) * bin_hz - edges[m + 1]) < bin_hz for m in range(80))
    with pytest.raises(ValueError, match="fmax"):
        slaney_mel_filters(fmax=9000.0)


@pytest.mark.parametrize("band", [3, 12, 25, 40, 55, 62])
@pytest.mark.parametrize("offset", [-0.25, 0.0, 0.25])
def test_sine_lands_in_the_nearest_band(band, offset):
    """A sine near band m's centre (within a quarter of the way to a neighbour's) is loudest in band m, every frame."""
    edges = slaney_edges()
    neighbour = edges[band + 2] if offset > 0 else edges[band]
    freq = edges[band + 1] + abs(offset) * (neighbour - edges[band + 1])
    mel = audioldm_mel(sine(freq))
    assert (mel.argmax(dim=-1) == band).all()


def test_ten_seconds_gives_1024_frames():
    """10.24 s at 16 kHz (163,840 samples) gives exactly 1,024 frames of 64 bands, AudioLDM's input size."""
    assert audioldm_frames(163_840) == 1024 and audioldm_frames(16_000) == 100 and audioldm_frames(16_159) == 100
    mel = audioldm_mel(noise(163_840))
    assert mel.shape == (1024, 64) and mel.dtype == torch.float32 and torch.isfinite(mel).all()


def test_frames_are_centred_half_a_hop_late():
    """Frame i is centred on sample 160 i + 80 (reflect padding of 432, not 512): a click there peaks in frame i,
    with frames i - 1 and i + 1 equally loud."""
    wave = torch.zeros(16_000)
    wave[160 * 50 + 80] = 1.0
    loudness = audioldm_mel(wave).exp().sum(dim=-1)
    assert int(loudness.argmax()) == 50
    assert float(loudness[49]) == pytest.approx(float(loudness[51]), rel=1e-4)
    assert float(loudness[49]) < 0.9 * float(loudness[50])


def test_silence_is_the_log_floor():
    """Silence is log(1e-5) in every frame and band: the magnitudes are clamped at 1e-5 before the log."""
    mel = audioldm_mel(torch.zeros(32_000))
    assert mel.shape == (200, 64)
    assert torch.equal(mel, torch.full_like(mel, math.log(1e-5)))


def test_short_clip_is_padded_with_zeros():
    """Asked for more frames than the clip has, the computed frames are kept and the rest are 0.0, as AudioLDM's
    pad_spec (ZeroPad2d) leaves them; the clip's own frames are untouched."""
    wave = noise(50_000, seed=1)
    own = audioldm_mel(wave)
    padded = audioldm_mel(wave, frames=400)
    assert own.shape == (312, 64) and padded.shape == (400, 64)
    assert torch.equal(padded[:312], own)
    assert torch.equal(padded[312:], torch.zeros(88, 64))


def test_long_clip_is_cropped():
    """Asked for fewer frames than the clip has, the first ones are kept, unchanged."""
    wave = noise(32_000, seed=2)
    assert torch.equal(audioldm_mel(wave, frames=100), audioldm_mel(wave)[:100])


def test_batch_dimensions_are_kept():
    """(2, 3, T) gives (2, 3, frames, 64), each clip's features the same as computed alone."""
    waves = noise(2, 3, 8_000, seed=3)
    mel = audioldm_mel(waves, frames=60)
    assert mel.shape == (2, 3, 60, 64)
    for i in range(2):
        for j in range(3):
            assert torch.allclose(mel[i, j], audioldm_mel(waves[i, j], frames=60), atol=1e-5)


def test_float64_and_float32_agree():
    """A float64 wave gives float32 features equal to the float32 wave's within float32 rounding."""
    wave = noise(2, 24_000, seed=4).double() + 0.2 * sine(440.0, 1.5).double()
    mel64, mel32 = audioldm_mel(wave), audioldm_mel(wave.float())
    assert mel64.dtype == mel32.dtype == torch.float32
    assert torch.allclose(mel64, mel32, atol=1e-4, rtol=0)


def test_louder_is_a_constant_shift():
    """Doubling the wave adds log(2) to every band above the floor: the features are the log of magnitudes."""
    wave = noise(16_000, seed=5)
    assert torch.allclose(audioldm_mel(2 * wave) - audioldm_mel(wave), torch.full((100, 64), math.log(2)), atol=1e-4)


def test_bad_input_is_refused():
    """Clips too short for the reflect padding, and a frame count below 1, raise ValueError saying so."""
    with pytest.raises(ValueError, match="432 samples"):
        audioldm_mel(torch.zeros(432))
    with pytest.raises(ValueError, match="432 samples"):
        audioldm_frames(400)
    with pytest.raises(ValueError, match="frames must be at least 1"):
        audioldm_mel(torch.zeros(16_000), frames=0)
    assert audioldm_mel(torch.zeros(433)).shape == (433 // AUDIOLDM_HOP, 64)
