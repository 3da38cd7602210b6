"""recur from Python: recurrent language models with step(), exact chunked prefill and states
that can be forked, saved and continued (docs/python.md).

The native module (_recur) does the work, with the GIL released while it computes; this file
adds only Python's side: os.PathLike paths, JSON for the chat template, stop strings and the
generation iterator.
"""
import json as _json
import os as _os

from . import _recur
from ._recur import DecodeStream, State, Tokenizer, available_isas, isa

__all__ = ["Model", "State", "Tokenizer", "DecodeStream", "Generation", "quantize", "isa",
           "available_isas"]


class Model(_recur.Model):
    """A model loaded once and shared by every state made from it (and by threads): every
    layout recur reads (a folder with config.json, a BlinkDL .pth, a quantized folder), with the
    tokenizer beside it (or bytes when it ships none).

    ``threads``: worker threads of every state made from it (0: every core).
    ``tokenizer``: a tokenizer.json or RWKV vocabulary to use instead of the one beside it.
    Properties (native): ``weights_format`` ("f32", "bf16", "q8", "q4 (head q8)", ...),
    ``vocab_size``, ``parameters``, ``fingerprint`` (what saved states carry), ``eos_token_ids``,
    ``tokenizer`` (None when the model takes ids only: ``no_text`` says why), ``source``.
    """

    def __init__(self, path, threads=0, tokenizer=None):
        super().__init__(_os.fspath(path), threads,
                         None if tokenizer is None else _os.fspath(tokenizer))

    @classmethod
    def random(cls, seed=1, threads=0):
        """The random-weight test model (a byte vocabulary): its text is noise."""
        self = cls.__new__(cls)
        _recur.Model.__init__(self, seed, threads, True)
        return self

    @property
    def config(self):
        """The configuration, as a dict of config.json's fields."""
        return _json.loads(self._config_json)

    def encode(self, text, add_special_tokens=True):
        self._require_text("Model.encode")
        return self.tokenizer.encode(text, add_special_tokens)

    def _ids(self, text_or_ids, call, add_special_tokens):
        if isinstance(text_or_ids, str):
            self._require_text(call)
            return self.tokenizer.encode(text_or_ids, add_special_tokens)
        return text_or_ids

    def score(self, text_or_ids, chunk=64, add_special_tokens=True):
        """Negative log-likelihood (nats, float64) of each token after the first given those
        before it: the numbers ``recur score`` sums, in that order, into its mean_nll."""
        return self._score(self._ids(text_or_ids, "Model.score", add_special_tokens), chunk)

    def generate(self, prompt=None, max_tokens=200, temperature=0.8, top_k=40, top_p=0.95,
                 repetition_penalty=1.0, seed=0, stop=None, state=None, ignore_eos=False,
                 add_special_tokens=None):
        """Samples up to ``max_tokens`` tokens after ``prompt`` (text or ids) with the sampler of
        ``recur generate`` and ``recur serve``, and returns a Generation: an iterator of text
        pieces, whose ``ids`` are the tokens generated. ``state`` continues a state (the prompt
        is run after what it has seen); without one a new state is made. ``stop``: a string or
        strings that end the text (not included)."""
        if state is None:
            state = self.new_state()
        elif state.model is not self:
            raise ValueError("[Model.generate] state belongs to another model")
        if add_special_tokens is None:
            add_special_tokens = state.tokens == 0  # a continuation gets no second BOS
        if prompt is None:
            prompt = []
        ids = self._ids(prompt, "Model.generate", add_special_tokens)
        if isinstance(stop, str):
            stop = [stop]
        stop = [s for s in (stop or []) if s]
        return Generation(_recur._Generator(state, ids, max_tokens, temperature, top_k, top_p,
                                            repetition_penalty, seed, not ignore_eos), stop)

    def render_chat(self, messages, tools=None, add_generation_prompt=True, **kwargs):
        """The prompt text of a conversation (OpenAI-style messages) through the model's chat
        template, as transformers' apply_chat_template renders it; keyword arguments are the
        template's variables (enable_thinking=False, ...)."""
        return self._render_chat(_json.dumps(messages), "" if tools is None else _json.dumps(tools),
                                    add_generation_prompt, _json.dumps(kwargs) if kwargs else "")



class Generation:
    """An iterator of generated text pieces. ``ids``: the tokens generated so far; ``state``: the
    state, which continues after them; ``finish_reason``: "length", "eos" or "stop" when done."""

    __slots__ = ("_g", "_stop", "_held", "_done", "ids", "finish_reason")

    def __init__(self, generator, stop):
        self._g = generator
        self._stop = stop
        self._held = ""  # text that may be the start of a stop string
        self._done = False
        self.ids = []
        self.finish_reason = None

    @property
    def state(self):
        return self._g.state

    def __iter__(self):
        return self

    def __next__(self):
        while not self._done:
            try:
                token, piece = next(self._g)
            except StopIteration:
                self._done = True
                self.finish_reason = self._g.finish_reason
                break
            if token is not None:
                self.ids.append(token)
            if not self._stop:
                if piece:
                    return piece
                continue
            self._held += piece
            cut = min((i for i in (self._held.find(s) for s in self._stop) if i >= 0), default=-1)
            if cut >= 0:
                out, self._held = self._held[:cut], ""
                self._done = True
                self.finish_reason = "stop"
                if out:
                    return out
                break
            # Hold back the longest tail that could begin a stop string.
            keep = max((k for s in self._stop for k in range(min(len(s) - 1, len(self._held)), 0, -1)
                        if self._held.endswith(s[:k])), default=0)
            out = self._held[:len(self._held) - keep]
            self._held = self._held[len(self._held) - keep:]
            if out:
                return out
        if self._held:
            out, self._held = self._held, ""
            return out
        raise StopIteration

    def text(self):
        """Runs the generation to its end and returns the whole text."""
        return "".join(self)


def quantize(src, dst, type="q8", head=None):
    """Writes ``dst``, a model with the matrices of ``src`` quantized to ``type`` ("q8" or "q4";
    the head to ``head``), as ``recur quantize`` does; returns its weights format."""
    return _recur._quantize(_os.fspath(src), _os.fspath(dst), type, head)
