"""The model configuration: ``config.pbtxt`` parsed into Triton's ``ModelConfig`` message."""

from ptserve.config.autocomplete import auto_complete
from ptserve.config.parse import ModelConfig, load_config, parse_config
from ptserve.config.render import config_to_dict
from ptserve.config.validate import validate_config

__all__ = [
    "ModelConfig",
    "auto_complete",
    "config_to_dict",
    "load_config",
    "parse_config",
    "validate_config",
]
