"""ONNX Runtime's error text as a sentence that says what failed and what to do.

ONNX Runtime raises (and logs) C++ status text such as ``[ONNXRuntimeError] : 1 : FAIL : Non-zero status code
returned while running Softmax node. Name:'n65' Status Message: Axis 1 is out-of-range``.  :func:`explain` turns
the failures mobilize meets (a node's kernel failing, an input of the wrong shape, type or name, a missing kernel,
an unreadable file) into one sentence; the raw text stays in the variant's log (ONNX Runtime logs its errors to
stderr, which a worker writes to ``logs/``) and in the exception's cause (``--debug``).

    >>> explain("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Softmax node. "
    ...         "Name:'n65' Status Message: Axis 1 is out-of-range")[:73]
    "ONNX Runtime's Softmax kernel failed at node 'n65': axis 1 is past the ra"
"""

from __future__ import annotations

import re
from typing import Callable

_PREFIX = re.compile(r"^\s*(?:\w+: )?\[ONNXRuntimeError\] : \d+ : \w+ : ")
_CPP_LOCATION = re.compile(r"^\S+\.(?:cc|h|cpp):\d+ [^)]*\)\s+")
_SHAPES = "give --input_dims with the shape the file was exported for"

_NODE = re.compile(r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: (.*)",
                   re.S)
"""A node's kernel failed at run time; its own message follows."""

_IN_NODE: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"[Aa]xis (-?\d+) is out[- ]of[- ]range"), lambda m: (
        f"axis {m[1]} is past the rank of the tensor it gets, so the file was made for inputs of another rank or an "
        f"opset conversion changed how the op reads its axis; {_SHAPES}, or re-export the model at the opset it "
        f"targets")),
    (re.compile(r"cannot be reshaped to the requested shape|[Rr]eshape.*(?:mismatch|not match)"), lambda m: (
        f"a shape written into the file does not fit this input size; {_SHAPES}, or re-export with dynamic axes")),
    (re.compile(r"not broadcastable|Incompatible dimensions|[Dd]imension mismatch|Invalid input shape"), lambda m: (
        f"two tensors of shapes that do not fit together meet here; {_SHAPES}")),
    (re.compile(r"bad allocation|Failed to allocate|std::bad_alloc"), lambda m: (
        "it ran out of memory; use a smaller batch or input size, or a machine with more memory")),
]
"""What a node's own message means, and what to do."""

_WHOLE: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"Axis (-?\d+) is out-of-range for weight '([^']+)' with rank (\d+)"), lambda m: (
        f"per-channel int8 asked for axis {m[1]} of '{m[2]}', a rank-{m[3]} weight (a normalization's scale, which "
        f"has one axis): ONNX Runtime's quantizer gave it one scale instead; mobilize keeps LayerNormalization in "
        f"float, so this is another op reading a rank-{m[3]} weight - exclude_op_types keeps it in float too")),
    (re.compile(r"Got invalid dimensions for input: (\S+) for the following indices\s*index: (\d+) Got: (\d+) "
                r"Expected: (\d+)"), lambda m: (
        f"input '{m[1]}' has {m[3]} in dimension {m[2]} where the file expects {m[4]}; {_SHAPES}")),
    (re.compile(r"Invalid rank for input: (\S+) Got: (\d+) Expected: (\d+)"), lambda m: (
        f"input '{m[1]}' has {m[2]} dimensions where the file expects {m[3]}; {_SHAPES}")),
    (re.compile(r"Unexpected input data type\. Actual: \((?:tensor\()?([\w]+)\)?\) , expected: \((?:tensor\()?(\w+)"),
     lambda m: f"an input is {m[1]} where the file expects {m[2]}; feed {m[2]} data (the file's own input type)"),
    (re.compile(r"Required inputs \((\[.*?\])\) are missing from input feed"), lambda m: (
        f"the file needs inputs that were not fed: {_clip(m[1])}; if these are weights (an ONNX file of IR "
        f"version < 4 lists its weights as graph inputs), re-save it without them, as onnxruntime's "
        f"remove_initializer_from_input.py does")),
    (re.compile(r"Invalid (?:Feed )?Input Name:\s*(\S+)"), lambda m: (
        f"'{m[1]}' is not one of the file's inputs; name the file's own inputs")),
    (re.compile(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'"), lambda m: (
        f"ONNX Runtime has no CPU kernel for {m[1]} (opset {m[2]}) at node '{m[3]}' with these input types; "
        f"re-export the model at another opset or with other dtypes")),
    (re.compile(r"Protobuf parsing failed|INVALID_PROTOBUF"), lambda m: (
        "the file is not a readable ONNX model (protobuf parsing failed): it is truncated or not ONNX; export it "
        "again")),
    (re.compile(r"\[(?:Shape|Type)InferenceError\]\s*(.*)", re.S), lambda m: (
        f"ONNX Runtime's shape inference rejects the graph ({_clip(_first(m[1]))}): the file is inconsistent; "
        f"export it again, or check it with onnx.checker")),
]
"""Failures of the whole run or load, not of one node."""


def explain(text: str) -> str | None:
    """One sentence for ONNX Runtime's error ``text`` (an exception's message or a log line), else None."""
    text = _CPP_LOCATION.sub("", _PREFIX.sub("", text.strip()))
    node = _NODE.search(text)
    if node:
        op, name, detail = node[1], node[2], _first(node[3])
        for pattern, say in _IN_NODE:
            found = pattern.search(detail)
            if found:
                return f"ONNX Runtime's {op} kernel failed at node '{name}': {say(found)}"
        return (f"ONNX Runtime's {op} kernel failed at node '{name}' ({_clip(detail)}); check the inputs fed are "
                f"the shape and type the file was exported for ({_SHAPES})")
    for pattern, say in _WHOLE:
        found = pattern.search(text)
        if found:
            return say(found)
    return None


def _first(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _clip(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
