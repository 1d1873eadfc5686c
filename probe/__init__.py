"""probe: test whether disentanglement methods succeed for the right reason."""

__version__ = "0.1.0"
