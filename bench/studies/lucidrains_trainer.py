"""lucidrains' denoising-diffusion-pytorch `Trainer` as the published profiling studies ran it on CIFAR-10 (32 px,
`Unet(dim=64, dim_mults=(1, 2, 4, 8))`, batch 128, amp, its own folder Dataset with `num_workers=cpu_count()`), or
fed by a gpufeed backend (`--gpufeed DIR`). The program `bench watch` measures for finding 5; nothing in it knows it is
watched. FID is off: it downloads Inception weights.

    bench watch --compare -- python -m bench.studies.lucidrains_trainer --folder cifar10-jpg/train --steps 300
    bench watch --compare -- python -m bench.studies.lucidrains_trainer --folder cifar10-jpg/train --steps 300 \\
        --gpufeed data/cifar10 --backend ffcv --workers 4
"""

from __future__ import annotations

import argparse
import tempfile


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True, help="the Trainer's image folder (searched recursively)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dim-mults", default="1,2,4,8")
    p.add_argument("--timesteps", type=int, default=1000)
    p.add_argument("--no-amp", action="store_true")
    p.add_argument("--gpufeed", default=None, help="a `dataprep convert` directory: train from gpufeed instead")
    p.add_argument("--backend", default="ffcv")
    p.add_argument("--workers", type=int, default=4)
    a = p.parse_args(argv)

    from denoising_diffusion_pytorch import GaussianDiffusion, Trainer, Unet

    model = Unet(dim=a.dim, dim_mults=tuple(int(m) for m in a.dim_mults.split(",")), flash_attn=False)
    diffusion = GaussianDiffusion(model, image_size=a.image_size, timesteps=a.timesteps, sampling_timesteps=10)
    with tempfile.TemporaryDirectory() as results:
        trainer = Trainer(
            diffusion,
            a.folder,
            train_batch_size=a.batch_size,
            train_num_steps=a.steps,
            amp=not a.no_amp,
            calculate_fid=False,
            save_and_sample_every=10**9,
            results_folder=results,
            num_samples=4,
        )
        loader = None
        if a.gpufeed:
            from loaders.integrations.lucidrains import use_gpufeed

            loader = use_gpufeed(trainer, a.gpufeed, backend=a.backend, workers=a.workers)
        trainer.train()
        if loader is not None:
            loader.close()


if __name__ == "__main__":
    main()
