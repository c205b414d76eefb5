"""DDPM training in the style of diffusers' unconditional example (examples/unconditional_image_generation), reading
either its own way (a folder of images through torchvision transforms and a DataLoader) or any gpufeed backend.

The model is `UNet2DModel` built from the configuration of the DDPM CIFAR-10 checkpoint (35.7M parameters, no
download), the noise schedule `DDPMScheduler(1000)`, the loop the example's: accelerate, AdamW, cosine schedule with
warm-up, gradient clipping at 1, MSE on the noise, and the loss logged with `.item()` every `--log-every` steps
(every step in the example). `--tiny` shrinks the UNet for CPU tests. `--data` needs gpufeed importable
(`pip install -e .[integrations]`, or PYTHONPATH at the repository's root).

    python examples/diffusers_unconditional.py --folder cifar10-jpg/train --steps 300 --workers 0
    python examples/diffusers_unconditional.py --data data/cifar10 --loader ffcv --workers 4 --steps 300
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch.nn.functional as F

DDPM_CIFAR10 = dict(  # google/ddpm-cifar10-32's UNet2DModel configuration
    sample_size=32,
    in_channels=3,
    out_channels=3,
    layers_per_block=2,
    block_out_channels=(128, 256, 256, 256),
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    act_fn="silu",
    downsample_padding=0,
    flip_sin_to_cos=False,
    freq_shift=1,
    mid_block_scale_factor=1,
    norm_eps=1e-6,
    norm_num_groups=32,
    time_embedding_type="positional",
    attention_head_dim=None,
    center_input_sample=False,
)
TINY = DDPM_CIFAR10 | dict(
    layers_per_block=1,
    block_out_channels=(32, 32),
    norm_num_groups=8,
    down_block_types=("DownBlock2D", "AttnDownBlock2D"),
    up_block_types=("AttnUpBlock2D", "UpBlock2D"),
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--folder", help="images (any layout, searched recursively), read as the example reads them")
    src.add_argument("--data", help="a `dataprep convert` directory, read by --loader")
    p.add_argument("--loader", default="hdf5", help="gpufeed backend for --data")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers, or the backend's (example: 0)")
    p.add_argument("--resolution", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--mixed-precision", choices=["no", "fp16", "bf16"], default="bf16")
    p.add_argument("--log-every", type=int, default=1, help="read the loss with .item() every N steps")
    p.add_argument("--tiny", action="store_true", help="a small UNet for CPU tests")
    return p.parse_args(argv)


def folder_epochs(a: argparse.Namespace, accelerator):
    """The example's data path: RGB, Resize + CenterCrop (+ flip), ToTensor, Normalize to [-1, 1]."""
    from PIL import Image
    from torchvision import transforms

    paths = sorted(p for p in Path(a.folder).rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp"))
    if not paths:
        raise SystemExit(f"{a.folder}: no .png/.jpg/.jpeg/.webp images in it")
    augment = transforms.Compose(
        [
            transforms.Resize(a.resolution, interpolation=transforms.InterpolationMode.BILINEAR),
            transforms.CenterCrop(a.resolution),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.5], [0.5]),
        ]
    )

    class Images(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> dict:
            return {"input": augment(Image.open(paths[i]).convert("RGB"))}

    dl = torch.utils.data.DataLoader(Images(), batch_size=a.batch_size, shuffle=True, num_workers=a.workers)
    dl = accelerator.prepare(dl)
    return (lambda epoch: dl), (lambda: None)


def gpufeed_epochs(a: argparse.Namespace, accelerator):
    """A gpufeed backend, this process's shard, batches already on the device in [-1, 1]."""
    from loaders import build_loader

    loader = build_loader(
        a.loader,
        a.data,
        batch_size=a.batch_size,
        workers=a.workers,
        device=str(accelerator.device),
        rank=accelerator.process_index,
        world_size=accelerator.num_processes,
    )

    def epoch_of(epoch: int):
        loader.set_epoch(epoch)
        return ({"input": b.x} for b in loader)

    return epoch_of, loader.close


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    from accelerate import Accelerator
    from diffusers import DDPMScheduler, UNet2DModel
    from diffusers.optimization import get_cosine_schedule_with_warmup

    accelerator = Accelerator(mixed_precision=a.mixed_precision)
    model = UNet2DModel(**((TINY if a.tiny else DDPM_CIFAR10) | {"sample_size": a.resolution}))
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-6)
    lr_schedule = get_cosine_schedule_with_warmup(optimizer, min(500, a.steps // 10), a.steps)
    model, optimizer, lr_schedule = accelerator.prepare(model, optimizer, lr_schedule)
    epoch_of, close = (folder_epochs if a.folder else gpufeed_epochs)(a, accelerator)
    step, epoch = 0, 0
    while step < a.steps:
        for batch in epoch_of(epoch):
            clean = batch["input"]
            noise = torch.randn_like(clean)
            t = torch.randint(0, scheduler.config.num_train_timesteps, (clean.shape[0],), device=clean.device)
            with accelerator.accumulate(model):
                pred = model(scheduler.add_noise(clean, noise, t), t).sample
                loss = F.mse_loss(pred.float(), noise.float())
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_schedule.step()
                optimizer.zero_grad()
            step += 1
            if step % a.log_every == 0 and accelerator.is_main_process:
                value = loss.detach().item()
                if not math.isfinite(value):
                    raise SystemExit(f"step {step}: the loss is {value}")
            if step >= a.steps:
                break
        epoch += 1
    close()
    accelerator.end_training()


if __name__ == "__main__":
    main()
