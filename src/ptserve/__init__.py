"""ptserve: a PyTorch inference server that speaks Triton's protocols."""

from ptserve.common.version import __version__

__all__ = ["__version__"]
