"""Small models with the input signatures users bring (nobody here wrote them for mobilize): two int64
inputs with an embedding and a dict output, a scalar tensor plus a Python ``int`` argument, a BERT encoder from
a tiny transformers config with a real attention mask."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

TOKENS = 12


class TwoInputEncoder(nn.Module):
    """A sentence-encoder shape: token ids and attention mask (int64) in, ``{"embedding": ...}`` out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(100, 16)
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.proj(self.emb(input_ids)))
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return {"embedding": self.out(pooled)}


class ScalarVad(nn.Module):
    """Audio frames, a 0-d gain tensor, and a Python ``int`` sample rate that changes the arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, gain: torch.Tensor, sr: int = 8000) -> torch.Tensor:
        scale = 1.0 if sr == 16000 else 0.5
        return torch.sigmoid(self.fc(x * gain) * scale)


def write_encoder_npz(path, count: int = 16) -> None:
    """Real-looking token ids (50..99, unlike seeded random inputs' 0..9) and masks, stored in the order
    opposite to the forward's so that only matching by name feeds them right."""
    rng = np.random.default_rng(1)
    ids = rng.integers(50, 100, size=(count, TOKENS)).astype(np.int64)
    mask = np.ones((count, TOKENS), dtype=np.int64)
    mask[:, 9:] = 0
    np.savez(path, attention_mask=mask, input_ids=ids)


CHUNK = 64
"""Samples per audio chunk of :class:`StreamingVad`."""
HIDDEN = 16


class StreamingVad(nn.Module):
    """A voice-activity detector shaped like Silero VAD: ``forward(x, state, sr: int) -> (prob, new_state)``.  An
    audio chunk (1, 64), the state carried from the previous call (2, 1, 16: a leaky integrator of the conv front
    end's energy and a GRU cell's hidden state) and a Python ``int`` sample rate; a speech probability (1, 1) and the
    new state out.  ``state_gain`` scales what the carried state contributes (1.0: the model; a planted
    perturbation changes it, which a call from a zero state never sees)."""

    def __init__(self, state_gain: float = 1.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(1, 8, 8, stride=4)
        self.proj = nn.Linear(8, HIDDEN)
        self.cell = nn.GRUCell(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, 1)
        with torch.no_grad():
            self.proj.weight.abs_()  # louder chunks drive the integrator up
        self.state_gain = state_gain
        self.threshold = VAD_THRESHOLD

    def step(self, x: torch.Tensor, state: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        energy = torch.relu(self.conv(x.unsqueeze(1))).mean(-1) * scale
        h0 = 0.7 * self.state_gain * state[0] + 0.3 * torch.tanh(self.proj(energy))
        h1 = self.cell(h0, state[1])
        logit = 12.0 * (h0.mean(-1, keepdim=True) - self.threshold) + 0.1 * self.out(h1)
        return torch.sigmoid(logit), torch.stack([h0, h1])

    def forward(self, x: torch.Tensor, state: torch.Tensor, sr: int) -> tuple[torch.Tensor, torch.Tensor]:
        scale = torch.tensor(1.0 if sr == 16000 else 0.5)
        return self.step(x, state, scale)


VAD_THRESHOLD = 0.22
"""Where the integrated energy of :class:`StreamingVad` says speech."""


class StreamingVadScalarInput(nn.Module):
    """:class:`StreamingVad` with the sample rate as a 0-d int64 tensor, as Silero's ONNX file takes it (an input of
    rank 0 that ``--input sr=16000`` fills)."""

    def __init__(self, state_gain: float = 1.0) -> None:
        super().__init__()
        self.vad = StreamingVad(state_gain)

    def forward(self, x: torch.Tensor, state: torch.Tensor, sr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = torch.where(sr == 16000, 1.0, 0.5).to(torch.float32)
        return self.vad.step(x, state, scale)


def write_vad_npz(path, calls: int = 32) -> None:
    """A speech-like stream: chunks of noise whose loudness follows silence / speech / silence / speech, one array
    per input (x (1, 64) and state (2, 1, 16) per call, each stored as the whole input; the states are zeros, as a
    stream starts)."""
    rng = np.random.default_rng(0)
    loud = (np.arange(calls) // 6) % 2 == 1
    x = rng.standard_normal((calls, 1, CHUNK)).astype(np.float32) * np.where(loud, 1.0, 0.05)[:, None, None]
    np.savez(path, x=x.astype(np.float32), state=np.zeros((calls, 2, 1, HIDDEN), dtype=np.float32))


def vad_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, CHUNK), torch.zeros(2, 1, HIDDEN)


def write_vad_torchscript(path, state_gain: float = 1.0) -> None:
    """The detector scripted (its ``sr: int`` argument stays an argument of the file's forward)."""
    torch.jit.script(StreamingVad(state_gain).eval()).save(str(path))


def write_vad_onnx(path, state_gain: float = 1.0) -> None:
    """The detector as a static-shape ONNX file with inputs x (1, 64), state (2, 1, 16) and sr (a 0-d int64)."""
    x, state = vad_inputs()
    torch.onnx.export(StreamingVadScalarInput(state_gain).eval(), (x, state, torch.tensor(16000)), str(path),
                      input_names=["x", "state", "sr"], output_names=["prob", "new_state"], dynamo=False)


class GainHead(nn.Module):
    """A head whose output scales with a 0-d float ``gain`` input (a temperature, a volume): as an ONNX file, an
    input of rank 0 that ``--input gain=2.0`` sets."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * gain


def write_gain_onnx(path) -> None:
    """:class:`GainHead` as an ONNX file with inputs x (1, 4) and gain (a 0-d float)."""
    torch.onnx.export(GainHead().eval(), (torch.randn(1, 4), torch.tensor(2.0)), str(path),
                      input_names=["x", "gain"], dynamo=False)


BERT_TOKENS, BERT_VOCAB = 16, 200


class TinyBert(nn.Module):
    """transformers' BertModel from a tiny config (hidden 64, 2 layers, 4 heads), token ids and a real attention
    mask in, the last hidden state out.  Weights drawn at 0.15 (transformers' default is 0.02, under which every
    layer is a near-identity beside its residual and int8 error cannot show)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig(vocab_size=BERT_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=64, initializer_range=0.15,
                            attn_implementation="eager")
        self.bert = BertModel(config, add_pooling_layer=False).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def sentences(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids with a padded tail of 0 to 10 tokens per sentence, and their attention mask."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(6, BERT_TOKENS + 1, size=count)
    mask = (np.arange(BERT_TOKENS)[None, :] < lengths[:, None]).astype(np.int64)
    return rng.integers(5, BERT_VOCAB, size=(count, BERT_TOKENS)).astype(np.int64) * mask, mask


CONTEXT = 8
"""Samples of the previous chunk :class:`HeldStateVad` keeps and prepends to the next one."""


class HeldStateVad(nn.Module):
    """:class:`StreamingVad` as Silero's TorchScript file packs it: the state and the last samples of the previous
    chunk are kept in the module (``self._state``, ``self._context``, written by every forward), ``forward(x, sr)``
    returns the probability only, and ``reset_states()`` starts a new stream.  Its results depend on the calls made
    before; a file saved after some calls carries their state."""

    def __init__(self) -> None:
        super().__init__()
        self.vad = StreamingVad()
        self._state = torch.zeros(2, 1, HIDDEN)
        self._context = torch.zeros(1, CONTEXT)
        self.hidden, self.context = HIDDEN, CONTEXT

    @torch.jit.export
    def reset_states(self, batch_size: int = 1) -> None:
        self._state = torch.zeros(2, batch_size, self.hidden)
        self._context = torch.zeros(batch_size, self.context)

    def forward(self, x: torch.Tensor, sr: int = 16000) -> torch.Tensor:
        full = torch.cat([self._context, x], dim=1)
        scale = torch.tensor(1.0 if sr == 16000 else 0.5)
        prob, self._state = self.vad.step(full, self._state, scale)
        self._context = x[:, x.shape[1] - self.context:]
        return prob


def write_held_state_vad(path, mid_stream_calls: int = 0) -> None:
    """:class:`HeldStateVad` scripted and saved; after ``mid_stream_calls`` loud chunks when that is not 0 (a file
    saved mid-stream, its attributes holding those calls' state)."""
    module = torch.jit.script(HeldStateVad().eval())
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(mid_stream_calls):
            module(torch.randn(1, CHUNK, generator=generator), 16000)
    module.save(str(path))
