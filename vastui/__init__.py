"""vastui: a console and engine for a Filecoin proving fleet on Vast.ai GPUs."""

__version__ = "0.1.0"
