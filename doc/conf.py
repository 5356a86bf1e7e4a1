"""Sphinx configuration. The API pages are drawn from the installed package, so install it first."""

import os

import mizu

project = "pymizu"
copyright = "2026, The pymizu developers"
author = "The pymizu developers"
version = release = mizu.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
]

# Links to the Python and numpy docs need those projects' inventories, which
# come from the web. The published build sets PYMIZU_DOCS_INTERSPHINX=1; any
# other build (CI, offline) renders the same names, and the parameters'
# types, as text without links, and so builds warning-free without the
# network.
if os.environ.get("PYMIZU_DOCS_INTERSPHINX") == "1":
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
    }
    numpydoc_xref_param_type = True

templates_path = ["_templates"]
exclude_patterns = ["_build"]
autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False

html_theme = "pydata_sphinx_theme"
html_title = "pymizu"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
