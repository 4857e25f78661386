"""The vendor plugin template `fl-sdk new` renders with copier (see copier.yml).

Shipped inside the torch-fl package; fl_sdk.scaffold publishes it into a git
repository tagged with VERSION so copier can three-way merge on `fl-sdk update`.
"""
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
