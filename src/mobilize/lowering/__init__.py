"""Lowering shared by several engines: torch.export capture with one-line stage errors, torch -> ONNX, PT2E
helpers.  A backend may use it; it imports no backend."""
