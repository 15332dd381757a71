"""File-format facts that exporters and runtimes both need: headers, tables, readers.

Runtimes read files through this package and never import exporters; exporters write files
and may use these readers to describe what they wrote.
"""
