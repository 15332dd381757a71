"""Accuracy: outputs against the float reference, and predictions against labels."""
