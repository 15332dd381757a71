"""The benchmark harness: one method for every runtime."""
