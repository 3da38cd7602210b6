# Type stubs of `import recur` (docs/python.md), for editors and type checkers.
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

_Path = Union[str, "os.PathLike[str]"]
# Token ids: a sequence of ints, or a 1-D C-contiguous numpy array of an integer dtype.
_Ids = Union[Sequence[int], npt.NDArray[np.integer[Any]]]

def isa() -> str:
    """The instruction set recur's kernels run on ("avx512", "avx2", "neon", "scalar", ...)."""
def available_isas() -> List[str]:
    """The instruction sets this build has and this CPU runs, best first."""

class DecodeStream:
    """Text as ids arrive; holds back what is not final yet (an incomplete UTF-8 sequence)."""
    def put(self, id: int) -> str: ...
    def finish(self) -> str: ...

class Tokenizer:
    """A model's tokenizer.json or RWKV world vocabulary, or bytes (ids 0-255)."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def bytes(self) -> bool:
        """Whether text is bytes (the model ships no tokenizer)."""
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...
    def decode(self, ids: _Ids, skip_special_tokens: bool = False) -> str: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> str: ...
    def is_special(self, id: int) -> bool: ...
    def decoder(self, skip_special_tokens: bool = False) -> DecodeStream: ...

class State:
    """One sequence through a model: every layer's state, fixed in size (but a full-attention
    layer's KV cache), and the logits of the last token."""
    def step(self, token: int, copy: bool = False) -> npt.NDArray[np.float32]:
        """Runs one token; returns its logits: a read-only view of the state's buffer, valid
        until the next call on the state (``copy=True``: an array of your own)."""
    def prefill(self, ids: _Ids, chunk: Optional[int] = None, all_logits: bool = False,
                copy: bool = False) -> npt.NDArray[np.float32]:
        """Runs ``ids`` in chunks; returns the last logits (as step() does), or with
        ``all_logits`` every token's, shape (len(ids), vocab_size). The bytes of stepping every
        token. ``chunk`` sets the state's chunk size from then on."""
    def clone(self) -> "State":
        """A deep copy that continues independently."""
    def reset(self) -> None: ...
    def save(self, path: _Path) -> None:
        """Writes the state as `recur generate --save-state` does."""
    @staticmethod
    def load(model: "Model", path: _Path, chunk: int = 64) -> "State":
        """A state saved by save() or the CLI, for this model."""
    @property
    def logits(self) -> npt.NDArray[np.float32]: ...
    @property
    def model(self) -> "Model": ...
    @property
    def tokens(self) -> int:
        """Tokens seen."""
    @property
    def nbytes(self) -> int:
        """Bytes of the state (what save() writes, roughly)."""
    @property
    def chunk(self) -> int: ...
    @property
    def failure(self) -> str:
        """Why the state refuses work ("" when it is usable)."""

class Generation(Iterator[str]):
    """An iterator of generated text pieces."""
    ids: List[int]
    finish_reason: Optional[str]
    @property
    def state(self) -> State: ...
    def __next__(self) -> str: ...
    def text(self) -> str: ...

class Model:
    def __init__(self, path: _Path, threads: int = 0, tokenizer: Optional[_Path] = None) -> None: ...
    @classmethod
    def random(cls, seed: int = 1, threads: int = 0) -> "Model": ...
    @property
    def config(self) -> Dict[str, Any]: ...
    @property
    def weights_format(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def parameters(self) -> int: ...
    @property
    def fingerprint(self) -> int: ...
    @property
    def eos_token_ids(self) -> List[int]: ...
    @property
    def threads(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def tokenizer(self) -> Optional[Tokenizer]: ...
    @property
    def no_text(self) -> str: ...
    def describe(self) -> str: ...
    def new_state(self, chunk: int = 64) -> State: ...
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...
    def score(self, text_or_ids: Union[str, _Ids], chunk: int = 64,
              add_special_tokens: bool = True) -> npt.NDArray[np.float64]: ...
    def generate(self, prompt: Union[str, _Ids, None] = None, max_tokens: int = 200,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 repetition_penalty: float = 1.0, seed: int = 0,
                 stop: Union[str, Sequence[str], None] = None, state: Optional[State] = None,
                 ignore_eos: bool = False,
                 add_special_tokens: Optional[bool] = None) -> Generation: ...
    def render_chat(self, messages: Sequence[Dict[str, Any]],
                    tools: Optional[Sequence[Dict[str, Any]]] = None,
                    add_generation_prompt: bool = True, **kwargs: Any) -> str: ...

def quantize(src: _Path, dst: _Path, type: str = "q8", head: Optional[str] = None) -> str: ...
