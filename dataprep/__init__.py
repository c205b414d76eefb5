"""dataprep: turn CIFAR-10 and audio clips into the formats gpufeed's loaders read (see docs/DESIGN.md)."""

__version__ = "0.1.0"
