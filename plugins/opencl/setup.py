"""Builds the plugin's shared library with the Torch-FL SDK before packaging it
(fl_sdk/packaging.py in torch-fl, a build requirement in pyproject.toml)."""
from fl_sdk.packaging import setup_plugin

setup_plugin(__file__)
