"""gpufeed's loaders inside the training code people already have: `lucidrains.use_gpufeed(trainer, ...)` for
denoising-diffusion-pytorch's `Trainer`; diffusers' unconditional example as a program is
`python examples/diffusers_unconditional.py` (in the repository, not the wheel). The libraries come with the
`integrations` extra."""
