"""Torch-FL SDK: the ABI header and the tools a chip vendor uses."""
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
ABI_HEADER = INCLUDE_DIR / "fl_abi.h"
