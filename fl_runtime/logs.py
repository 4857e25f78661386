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
from fl_runtime.errors import ConfigError

logger = logging.getLogger("torch_fl")
logger.propagate = False          # the application's root handlers do not print us twice
_FORMAT = "%(asctime)s %(levelname)s torch_fl: %(message)s"


def configure_logging(settings: LoggingConfig, config_file: str | None = None) -> None:
    """Apply level and file from the config (read from `config_file`, named in errors);
    TORCH_FL_LOG_LEVEL overrides the level."""
    level = getattr(logging, os.environ.get("TORCH_FL_LOG_LEVEL", settings.level).upper(), logging.WARNING)
    logger.setLevel(level)
    if not any(getattr(h, "_torch_fl_stderr", False) for h in logger.handlers):
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setFormatter(logging.Formatter("torch_fl %(levelname)s: %(message)s"))
        stderr._torch_fl_stderr = True
        logger.addHandler(stderr)
    if settings.path and not any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        handler = _file_handler(settings.path, config_file)
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)


def _file_handler(path: str, config_file: str | None) -> logging.FileHandler:
    """A handler appending to `path` (its folder made if missing); a path that is a directory,
    under a file, or not writable is a ConfigError naming logging.path."""
    if os.path.isdir(path):
        raise ConfigError("logging.path", f"{path} is a directory; name a log file, e.g. "
                          f"{os.path.join(path, 'torch_fl.log')}", config_file)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return logging.FileHandler(path)
    except OSError as exc:       # FileExistsError (a parent is a file), PermissionError, ...
        raise ConfigError("logging.path", f"cannot open {path} for writing: "
                          f"{exc.strerror or exc} ({type(exc).__name__}); choose a writable file",
                          config_file) from exc
