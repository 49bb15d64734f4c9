"""ptserve: a PyTorch inference server that speaks Triton's protocols."""

__version__ = "0.1.0"
