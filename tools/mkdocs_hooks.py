"""MkDocs hooks of the docs site (mkdocs.yml ``hooks:``).

kafka-python 3.0 reads its protocol schemas with ``importlib.resources.read_text``, deprecated since Python
3.11: importing the package to document it (mkdocstrings) printed that DeprecationWarning with its stack four
times per build. It is kafka-python's to change, and says nothing about these docs.
"""

from __future__ import annotations

import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"importlib\.resources\._legacy")
warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*(read_text|open_text) is deprecated")
