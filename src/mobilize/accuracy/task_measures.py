"""The measures each task's users read, computed against the float model's outputs on the same samples.

Every function takes ``candidate`` and ``reference``: one list of output tensors per sample (batch of one),
and returns the per-sample figures in percent (100 = the float model's answer) plus other figures; detection
also returns each sample's weight (its boxes: its figure is pooled over all boxes, not averaged over images).

Detection output layouts (documented in the README), read from the float model's first sample and said which
(:func:`detection_layout`): one tensor of rows ``(1, N, 4 + 1 + C)`` - per box ``x1, y1, x2, y2``, a score, then
``C >= 0`` class scores (class = their arg-max; none: one class), as YOLOv5-style heads give it; one tensor of
columns ``(1, 4 + C, N)`` - per box ``cx, cy, w, h`` then ``C >= 1`` class scores (score = their max), as YOLOv8
exports give it; a single tensor is read as columns when its last dimension is the longer one; or separate
outputs ``boxes (1, N, 4)`` xyxy, ``scores (1, N)`` and optionally ``labels (1, N)`` (class ids) or class
scores ``(1, N, C)``.  Anything else is refused in one line naming these.  Scores outside [0, 1] are logits (a
sigmoid is applied).  Boxes with a score below ``SCORE_THRESHOLD`` are dropped; no NMS is applied (the head's
output is compared as it is).  A box narrower than ``MIN_BOX_SIDE`` of the coordinates' scale is widened to it
around its centre before IoU, so a zero-area box matches itself (and its float twin) instead of scoring IoU 0.

The box matching and mAP@0.5 are written here rather than taken from torchmetrics or pycocotools: the
question is "does the variant find the float model's boxes?" (the float model's boxes are the ground truth, a
greedy one-to-one match at IoU >= 0.5 within a class), torchmetrics' detection metrics need torchvision, which
does not import beside this torch, and pycocotools is not installed.  Edit distance is a plain Levenshtein for the same
reason (no maintained package for it is installed here).

    >>> import torch
    >>> box = torch.tensor([[[0., 0., 10., 10., 0.9], [20., 20., 30., 30., 0.8]]])
    >>> moved = torch.tensor([[[1., 1., 10., 10., 0.85], [50., 50., 60., 60., 0.8]]])
    >>> per, extra, weights = detection([[moved]], [[box]])
    >>> per, weights, extra["boxes_matched"], extra["box_recall"], extra["box_map50"]
    ([50.0], [4.0], 1, 50.0, 50.0)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from mobilize.accuracy.metrics import as_float64
from mobilize.core.errors import UnsupportedModelError

SCORE_THRESHOLD = 0.25
"""Detection: boxes scored below this are not detections (YOLO's default confidence threshold)."""
IOU_MATCH = 0.5
"""Detection: a variant's box matches a float box of the same class at IoU >= 0.5 (PASCAL VOC's criterion)."""
MIN_BOX_SIDE = 1e-3
"""Detection: the smallest side a box has in the IoU, as a share of the reference's largest coordinate (0.64 px
on a 640 px image): a zero-area box would otherwise have IoU 0 even with itself."""
DETECTION_LAYOUTS = ("one output (1,N,4+1+C) of rows (x1,y1,x2,y2, score, class scores) or (1,4+C,N) of "
                     "columns (YOLOv8: cx,cy,w,h, class scores), or boxes (1,N,4) beside scores (1,N)")
"""What --task detection reads, as the refusal of any other output says it."""
LAYOUT_TEXT = {"rows": "(1,N,4+1+C) rows: x1,y1,x2,y2, a score, class scores",
               "columns": "(1,4+C,N) columns (YOLOv8): cx,cy,w,h, class scores (score: their max)",
               "split": "boxes (1,N,4) x1,y1,x2,y2 beside scores (1,N)"}
NEIGHBOURS = 5
"""Embedding: each sample's k nearest neighbours (cosine) among the samples, in the variant vs the float model."""
CTC_BLANK = 0
"""Sequence (CTC): the blank symbol's index in the last dimension (the torch.nn.CTCLoss default)."""

Samples = Sequence[Sequence[Any]]


def _stack(samples: Samples, index: int = 0):
    import torch

    return torch.cat([as_float64(s[index]).reshape(1, -1) for s in samples])


def embedding(candidate: Samples, reference: Samples, labels: Sequence[int] | None) -> tuple[list[float], dict]:
    """Per sample: the share of its NEIGHBOURS nearest float neighbours the variant's embeddings also rank among
    the nearest (recall@k).  With labels: leave-one-out 1-nearest-neighbour label accuracy of both."""
    import torch

    c, r = _stack(candidate), _stack(reference)
    n = len(r)
    k = min(NEIGHBOURS, n - 1)
    extra: dict[str, Any] = {"neighbours_k": k}
    if k < 1:
        extra["note"] = f"neighbour agreement needs at least 2 samples, got {n}"
        return [], extra

    def ranks(x):
        x = torch.nn.functional.normalize(x, dim=1)
        sim = x @ x.T
        sim.fill_diagonal_(-math.inf)
        return sim.topk(k, dim=1).indices

    rc, rr = ranks(c), ranks(r)
    per = [100.0 * len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(rc, rr)]
    if labels is not None and len(labels) == n:
        y = torch.as_tensor(list(labels))
        extra["knn1_label_accuracy_reference"] = 100.0 * float((y[rr[:, 0]] == y).double().mean())
        extra["knn1_label_accuracy"] = 100.0 * float((y[rc[:, 0]] == y).double().mean())
    return per, extra


def detection_layout(sample: Sequence[Any]) -> str:
    """``rows``, ``columns`` or ``split``: how one sample's outputs hold boxes (see the module's docstring).  Any
    other output is refused in one line naming the layouts accepted."""
    shapes = [tuple(as_float64(t).shape) for t in sample]
    if len(sample) > 1:
        return "split"
    core = shapes[0][1:] if len(shapes[0]) == 3 and shapes[0][0] == 1 else shapes[0]
    if len(core) == 2:
        n, k = core
        if k >= 5 and (n < 5 or k <= n):
            return "rows"
        if n >= 5:
            return "columns"
    raise UnsupportedModelError(f"--task detection reads {DETECTION_LAYOUTS}; the output is "
                                f"{'x'.join(map(str, shapes[0])) or 'a scalar'}",
                                hint="give --task raw, or the task that fits")


def _detections(sample: Sequence[Any], layout: str):
    """(boxes (M,4) xyxy, scores (M,), classes (M,)) of every box, from the layout the reference was read in."""
    import torch

    outs = [as_float64(t) for t in sample]
    if layout != "split":
        t = outs[0].reshape(outs[0].shape[-2:]) if outs[0].dim() >= 2 else outs[0].reshape(1, -1)
        if layout == "columns":
            t = t.T
            centre, size = t[:, :2], t[:, 2:4]
            boxes = torch.cat([centre - size / 2, centre + size / 2], 1)
            scores, classes = t[:, 4:].max(1)
            return boxes, scores, classes
        boxes, scores = t[:, :4], t[:, 4]
        classes = t[:, 5:].argmax(1) if t.shape[1] > 5 else torch.zeros(len(t), dtype=torch.long)
        return boxes, scores, classes
    box_i = next((i for i, o in enumerate(outs) if o.shape[-1] == 4 and o.dim() >= 2), None)
    if box_i is None:
        raise UnsupportedModelError(f"--task detection reads {DETECTION_LAYOUTS}; no boxes output (…,N,4) among "
                                    f"{[tuple(o.shape) for o in outs]}", hint="see the README's detection layout")
    boxes = outs[box_i].reshape(-1, 4)
    n = len(boxes)
    rest = [o for i, o in enumerate(outs) if i != box_i]
    flat = [o for o in rest if o.numel() == n]
    if not flat:
        raise UnsupportedModelError(f"--task detection reads {DETECTION_LAYOUTS}; no scores output with {n} values "
                                    f"beside the boxes {[tuple(o.shape) for o in outs]}",
                                    hint="see the README's detection layout")
    scores = flat[0].reshape(-1)
    if len(flat) > 1:
        classes = flat[1].reshape(-1).round().long()
    else:
        per_class = next((o for o in rest if o.numel() > n and o.numel() % n == 0), None)
        classes = per_class.reshape(n, -1).argmax(1) if per_class is not None else torch.zeros(n, dtype=torch.long)
    return boxes, scores, classes


def _iou(a, b, min_side: float = 0.0):
    """IoU matrix of xyxy boxes a (M,4) and b (K,4), each side at least ``min_side`` (widened around its centre;
    an inverted side counts as 0 wide)."""
    import torch

    def widened(x):
        lo, hi = x[:, :2], torch.maximum(x[:, 2:], x[:, :2])
        pad = (min_side - (hi - lo)).clamp(min=0) / 2
        return torch.cat([lo - pad, hi + pad], 1)

    a, b = widened(a), widened(b)
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).clamp(min=0).prod(-1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1e-300), torch.zeros_like(inter))
    same = (a[:, None, :] == b[None, :, :]).all(-1)  # a box is itself, whatever its area (min_side 0 included)
    return torch.where(same, torch.ones_like(iou), iou)


def detection(candidate: Samples, reference: Samples, labels=None) -> tuple[list[float], dict, list[float]]:
    """F1 of the variant's boxes against the float model's over ALL boxes (a greedy one-to-one match at IoU >= 0.5
    within a class): 2 x matched / (float boxes + variant boxes), so an image where neither finds a box counts
    nothing and one with no float box counts by the variant's false positives only.  Returns each image's F1
    (100 when both are empty), details (recall, precision, mAP@0.5, matched IoU, score differences) and each
    image's weight in the pooled figure (its boxes)."""
    import torch

    layout = detection_layout(reference[0]) if reference else "rows"
    read = [_detections(s, layout) for s in reference]
    logits = any(bool(((scores < 0) | (scores > 1)).any()) for _, scores, _ in read)
    min_side = MIN_BOX_SIDE * (max((float(b.abs().max()) for b, _, _ in read if b.numel()), default=0.0) or 1.0)
    per, weights, kept_c, kept_r, ious, score_diffs = [], [], [], [], [], []
    for c_s, (rb, rs, rc) in zip(candidate, read):
        cb, cs, cc = _detections(c_s, layout)
        if logits:
            cs, rs = torch.sigmoid(cs), torch.sigmoid(rs)
        ck, rk = cs >= SCORE_THRESHOLD, rs >= SCORE_THRESHOLD
        cb, cs, cc, rb, rs, rc = cb[ck], cs[ck], cc[ck], rb[rk], rs[rk], rc[rk]
        kept_c.append((cb, cs, cc))
        kept_r.append((rb, rc))
        pairs = _matched_pairs(_class_iou(rb, rc, cb, cc, min_side))
        ious += [value for value, _, _ in pairs]
        score_diffs += [abs(float(cs[j] - rs[i])) for _, i, j in pairs]
        total = len(cb) + len(rb)
        per.append(100.0 if total == 0 else 100.0 * 2 * len(pairs) / total)
        weights.append(float(total))
    matched, ref_total, cand_total = len(ious), sum(len(b) for b, _ in kept_r), sum(len(b) for b, _, _ in kept_c)
    extra = {"boxes_reference": ref_total, "boxes_candidate": cand_total, "boxes_matched": matched,
             "box_recall": 100.0 * matched / ref_total if ref_total else None,
             "box_precision": 100.0 * matched / cand_total if cand_total else None,
             "box_map50": average_precision(kept_c, kept_r, min_side) if ref_total else None,
             "matched_iou_mean": math.fsum(ious) / len(ious) if ious else None,
             "matched_score_abs_diff_mean": math.fsum(score_diffs) / len(score_diffs) if score_diffs else None,
             "score_threshold": SCORE_THRESHOLD, "iou_threshold": IOU_MATCH, "scores_were_logits": logits,
             "layout": f"read as {LAYOUT_TEXT[layout]}",
             "pooled": "over all boxes: 2 x matched / (float boxes + variant boxes); images weigh their boxes"}
    if ref_total == 0:
        extra["note"] = (f"the float model scores no box at or above {SCORE_THRESHOLD:g} on these samples: "
                         f"the box agreement says nothing")
    return per, extra, weights


def _class_iou(rb, rc, cb, cc, min_side: float):
    """IoU of each float box (rows) with each variant box (columns); 0 across classes."""
    import torch

    if not len(rb) or not len(cb):
        return torch.zeros(len(rb), len(cb), dtype=torch.float64)
    return _iou(rb, cb, min_side) * (rc[:, None] == cc[None, :])


def _matched_pairs(iou) -> list[tuple[float, int, int]]:
    """The greedy one-to-one match at IoU >= IOU_MATCH, highest IoU first: (iou, float box, variant box)."""
    pairs = sorted(((float(iou[i, j]), i, j) for i, j in (iou >= IOU_MATCH).nonzero().tolist()), reverse=True)
    used_r, used_c, out = set(), set(), []
    for value, i, j in pairs:
        if i not in used_r and j not in used_c:
            used_r.add(i)
            used_c.add(j)
            out.append((value, i, j))
    return out


def average_precision(candidate, reference, min_side: float = 0.0) -> float:
    """mAP at IoU 0.5 in percent (PASCAL VOC's all-point interpolated AP, averaged over the classes the float
    model finds): the variant's boxes ``[(boxes, scores, classes)]`` per image ranked by score across images, the
    float model's ``[(boxes, classes)]`` as ground truth.  A variant box matches the free float box of its class it
    overlaps most; the rest are false positives.

    >>> import torch
    >>> truth = [(torch.tensor([[0., 0., 10., 10.]]), torch.tensor([0]))]
    >>> found = [(torch.tensor([[50., 50., 60., 60.], [0., 0., 10., 9.]]), torch.tensor([0.9, 0.8]), torch.tensor([0, 0]))]
    >>> average_precision(found, truth)  # the right box ranked second: precision 1/2 at full recall
    50.0
    """
    import torch

    aps = []
    for cls in sorted({int(k) for _, classes in reference for k in classes.tolist()}):
        truths = [boxes[classes == cls] for boxes, classes in reference]
        ranked = sorted(((float(s), img, b) for img, (boxes, scores, classes) in enumerate(candidate)
                         for s, b in zip(scores[classes == cls].tolist(), boxes[classes == cls])),
                        key=lambda item: -item[0])
        used = [set() for _ in truths]
        hits = []
        for _, img, box in ranked:
            iou = _iou(box[None], truths[img], min_side)[0] if len(truths[img]) else torch.zeros(0)
            free = [(float(v), k) for k, v in enumerate(iou.tolist()) if k not in used[img] and v >= IOU_MATCH]
            if free:
                used[img].add(max(free)[1])
            hits.append(bool(free))
        aps.append(_interpolated_ap(hits, sum(len(t) for t in truths)))
    return 100.0 * math.fsum(aps) / len(aps) if aps else 0.0


def _interpolated_ap(hits: list[bool], truths: int) -> float:
    """Area under the precision-recall curve of ranked hits, precision made monotone (all-point interpolation)."""
    precision, recall, tp = [], [], 0
    for rank, hit in enumerate(hits, 1):
        tp += hit
        precision.append(tp / rank)
        recall.append(tp / truths)
    for k in range(len(precision) - 2, -1, -1):
        precision[k] = max(precision[k], precision[k + 1])
    area, previous = 0.0, 0.0
    for p, r in zip(precision, recall):
        area, previous = area + (r - previous) * p, r
    return area


def _mask(t):
    t = as_float64(t)
    if t.dim() < 3:
        raise UnsupportedModelError(f"a segmentation output needs (1,C,H,W) class scores, got {tuple(t.shape)}",
                                    hint="give --task raw, or the task that fits")
    t = t.reshape(-1, *t.shape[-2:]) if t.dim() == 3 else t.reshape(t.shape[-3], *t.shape[-2:])
    if t.shape[0] > 1:
        return t.argmax(0)
    cut = 0.0 if bool(((t < 0) | (t > 1)).any()) else 0.5  # one channel: logits at 0, probabilities at 0.5
    return (t[0] > cut).long()


def segmentation(candidate: Samples, reference: Samples, labels=None) -> tuple[list[float], dict]:
    """Per sample: mean IoU over the classes in either mask, of the variant's arg-max mask against the float
    model's; beside it the share of pixels whose class agrees."""
    per, pixels = [], []
    for c_s, r_s in zip(candidate, reference):
        cm, rm = _mask(c_s[0]), _mask(r_s[0])
        ious = []
        for cls in set(cm.unique().tolist()) | set(rm.unique().tolist()):
            a, b = cm == cls, rm == cls
            ious.append(float((a & b).sum()) / float((a | b).sum()))
        per.append(100.0 * math.fsum(ious) / len(ious))
        pixels.append(100.0 * float((cm == rm).double().mean()))
    return per, {"pixel_agreement": math.fsum(pixels) / len(pixels) if pixels else None}


def greedy_decode(t) -> list[int]:
    """CTC greedy decoding of one sample's (1,T,C) or (T,1,C) scores: arg-max per step, repeats collapsed,
    blanks removed."""
    t = as_float64(t)
    t = t.reshape(-1, t.shape[-1])
    out, previous = [], None
    for s in t.argmax(1).tolist():
        if s != previous and s != CTC_BLANK:
            out.append(s)
        previous = s
    return out


def edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diag, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (x != y))
    return row[-1]


def sequence(candidate: Samples, reference: Samples, labels=None) -> tuple[list[float], dict]:
    """Per sample: 100 when the variant's greedy CTC decoding equals the float model's, else 0; beside it the
    edit-distance agreement 1 - distance / length of the float sequence (at least 0)."""
    per, edit = [], []
    for c_s, r_s in zip(candidate, reference):
        cs, rs = greedy_decode(c_s[0]), greedy_decode(r_s[0])
        per.append(100.0 if cs == rs else 0.0)
        edit.append(100.0 * max(0.0, 1.0 - edit_distance(cs, rs) / max(len(rs), 1)))
    lengths = [len(greedy_decode(s[0])) for s in reference]
    return per, {"edit_agreement": math.fsum(edit) / len(edit) if edit else None,
                 "sequence_length_mean": math.fsum(lengths) / len(lengths) if lengths else None,
                 "ctc_blank": CTC_BLANK}
