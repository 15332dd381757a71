"""`mobilize compare`: every variant of a plan, isolated in its own process, measured side by side."""
