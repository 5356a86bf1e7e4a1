"""mizu's version, which meson.build's project version matches."""

__version__ = "0.1.0"
