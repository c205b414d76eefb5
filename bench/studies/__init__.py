"""The project's own studies, kept apart from the product: what the model eats with no input (train_speed), what each
loader delivers against reference pipelines (loader_speed), the two storage choices dataprep makes
(format_choices), and the GPU grids behind docs/BENCHMARKS.md (plan_gpu.sh). Users run `bench loaders` instead."""
