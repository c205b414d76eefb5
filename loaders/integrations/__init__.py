"""gpufeed's loaders inside the training code people already have: `lucidrains.use_gpufeed(trainer, ...)` for
denoising-diffusion-pytorch's `Trainer`; diffusers' unconditional example as a program is
`python -m training.diffusers_unconditional`. The libraries come with the `integrations` extra."""
