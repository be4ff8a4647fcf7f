"""``tiktoken.Encoding`` behind the whole `Tokenizer` contract: the one module that reads tiktoken's private tables.

tiktoken keeps an encoding's split regex, ranks and special tokens in ``_pat_str``, ``_mergeable_ranks`` and
``_special_tokens``. tokembed needs them (the manifest's hash, where a document may be cut, the fast backend),
so `TiktokenTokenizer`, a subclass of ``tiktoken.Encoding``, reads them here and offers them as public
members; no other module touches them. Every named tiktoken tokenizer is built as one (``get_tokenizer("gpt2")``
is still a ``tiktoken.Encoding``, with the same ids and hash), and `TiktokenTokenizer.adapt` turns a plain
``tiktoken.Encoding`` a user hands over into one without rebuilding it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from typing import Any

import tiktoken

from tokembed.tokenizer.base import TokenizerIdentity, vocabulary_hash
from tokembed.tokenizer.cuts import cut_for_pattern

__all__ = ["TiktokenTokenizer"]

_ADAPTED: weakref.WeakKeyDictionary[tiktoken.Encoding, TiktokenTokenizer] = weakref.WeakKeyDictionary()


class TiktokenTokenizer(tiktoken.Encoding):
    """A ``tiktoken.Encoding`` that also offers ``special_tokens``, ``identity()``, ``document_cut`` and its BPE
    tables (``split_pattern``, ``mergeable_ranks``): the `tokembed.tokenizer.Tokenizer` protocol in full.

    Args:
        name, pat_str, mergeable_ranks, special_tokens, explicit_n_vocab: as for ``tiktoken.Encoding``.
        source: what ``get_tokenizer`` rebuilds it from (its name, or a file's absolute path); default ``name``.
        files: ``{file name: sha256}`` of the files it was built from (recorded in manifests).
        options: the keyword arguments ``get_tokenizer`` needs besides ``source`` (a file's ``pattern``).
    """

    def __init__(
        self,
        name: str,
        *,
        pat_str: str,
        mergeable_ranks: dict[bytes, int],
        special_tokens: dict[str, int],
        explicit_n_vocab: int | None = None,
        source: str | None = None,
        files: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ):
        super().__init__(
            name,
            pat_str=pat_str,
            mergeable_ranks=mergeable_ranks,
            special_tokens=special_tokens,
            explicit_n_vocab=explicit_n_vocab,
        )
        self._record(source, files, options)

    def _record(self, source: str | None, files: Mapping[str, str] | None, options: Mapping[str, str] | None) -> None:
        self._source = source or self.name
        self._files = tuple(sorted((files or {}).items()))
        self._options = tuple(sorted((options or {}).items()))

    @classmethod
    def adapt(cls, enc: tiktoken.Encoding) -> TiktokenTokenizer:
        """``enc`` itself if it is one; else a `TiktokenTokenizer` sharing ``enc``'s tables (nothing is rebuilt;
        the same one for the same ``enc``). Its source is ``enc.name``."""
        if isinstance(enc, TiktokenTokenizer):
            return enc
        view = _ADAPTED.get(enc)
        if view is None:
            view = cls.__new__(cls)
            view.__dict__.update(enc.__dict__)  # the same compiled BPE and tables: an Encoding is its __dict__
            view._record(None, None, None)
            _ADAPTED[enc] = view
        return view

    def __repr__(self) -> str:
        return f"<TiktokenTokenizer {self.name!r}>"

    def __getstate__(self) -> object:
        return {**self._tables(), "source": self._source, "files": dict(self._files), "options": dict(self._options)}

    def __setstate__(self, value: object) -> None:
        self.__init__(**value)  # type: ignore[misc, arg-type]  # what __getstate__ wrote

    def _tables(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pat_str": self._pat_str,
            "mergeable_ranks": self._mergeable_ranks,
            "special_tokens": self._special_tokens,
        }

    @property
    def special_tokens(self) -> dict[str, int]:
        """The special tokens and their ids (``{"<|endoftext|>": 50256}`` for GPT-2)."""
        return dict(self._special_tokens)

    @property
    def split_pattern(self) -> str:
        """The pre-tokenizer regex: text is cut into pieces by it, then each piece is merged by rank."""
        return self._pat_str

    @property
    def mergeable_ranks(self) -> dict[bytes, int]:
        """Token bytes -> rank (= id) of the BPE vocabulary, without the special tokens. Do not modify."""
        return self._mergeable_ranks

    @property
    def document_cut(self) -> str | None:
        """Where ``prepare`` may cut a large document (`tokembed.tokenizer.cuts`), known for tiktoken's patterns."""
        return cut_for_pattern(self._pat_str)

    def identity(self) -> TokenizerIdentity:
        """Name, size, end-of-text id, hash over pattern + ranks + specials, and where it was built from."""
        return TokenizerIdentity(
            name=self.name,
            n_vocab=self.n_vocab,
            eot_token=self.eot_token,
            hash=_hash(self),
            source=self._source,
            files=self._files,
            options=self._options,
        )


@functools.lru_cache(maxsize=16)
def _hash(enc: TiktokenTokenizer) -> str:
    # The byte layout of `vocabulary_hash` is what manifests of earlier versions carry: it never changes.
    return vocabulary_hash(enc.name, enc._pat_str, enc._mergeable_ranks.items(), enc._special_tokens.items())
