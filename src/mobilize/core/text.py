"""Small wording helpers for messages.

    >>> a("onnx"), a("torchscript"), a("executorch"), a("")
    ('an onnx', 'a torchscript', 'an executorch', 'a')
"""


def a(word: str) -> str:
    """``word`` with its indefinite article, by its first letter (format names: "an onnx file", "a tflite file")."""
    vowel = bool(word) and word[0].lower() in "aeio"
    return f"{'an' if vowel else 'a'} {word}".rstrip()
