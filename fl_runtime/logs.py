"""The 'torch_fl' logger, set up from the config's logging section."""
from __future__ import annotations

import logging
import os

from .config import LoggingConfig

logger = logging.getLogger("torch_fl")
_FORMAT = "%(asctime)s %(levelname)s torch_fl: %(message)s"


def configure_logging(settings: LoggingConfig) -> None:
    """Apply level and file from the config; TORCH_FL_LOG_LEVEL overrides the level."""
    level = os.environ.get("TORCH_FL_LOG_LEVEL", settings.level).upper()
    logger.setLevel(getattr(logging, level, logging.WARNING))
    if settings.path and not any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        os.makedirs(os.path.dirname(settings.path) or ".", exist_ok=True)
        handler = logging.FileHandler(settings.path)
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)
