"""Reports: the terminal table, report.json (with a JSON Schema) and a self-contained report.html."""
