"""The notebooks' experiments: trials, their data and figures, and ``reproduce``."""
