"""The notebooks' control panels (ipywidgets)."""
