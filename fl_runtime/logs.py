"""The 'torch_fl' logger, set up from the config's logging section.

Messages go to stderr at the configured level (default: warning), and also to
the configured file, if any.  Debug level shows every probe step: which plugin
sources were found, what each plugin reports, and why a device is left out.
"""
from __future__ import annotations

import logging
import os
import sys

from fl_runtime.config import LoggingConfig

logger = logging.getLogger("torch_fl")
logger.propagate = False          # the application's root handlers do not print us twice
_FORMAT = "%(asctime)s %(levelname)s torch_fl: %(message)s"


def configure_logging(settings: LoggingConfig) -> None:
    """Apply level and file from the config; TORCH_FL_LOG_LEVEL overrides the level."""
    level = getattr(logging, os.environ.get("TORCH_FL_LOG_LEVEL", settings.level).upper(), logging.WARNING)
    logger.setLevel(level)
    if not any(getattr(h, "_torch_fl_stderr", False) for h in logger.handlers):
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setFormatter(logging.Formatter("torch_fl %(levelname)s: %(message)s"))
        stderr._torch_fl_stderr = True
        logger.addHandler(stderr)
    if settings.path and not any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        os.makedirs(os.path.dirname(settings.path) or ".", exist_ok=True)
        handler = logging.FileHandler(settings.path)
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)
