"""The search tool: BM25 over a local corpus with the ``bm25s`` library (``pip install 'rlvr[agents]'``).

The corpus is a JSONL file (rows with "text" and optionally "id" and "title") or a list of strings; its index is
built once per process and corpus, and kept. A search is inline: its cost is bounded by the corpus size, and the
query and every result are capped in length."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rlvr.envs.tools import Tool

MAX_QUERY_CHARS = 500


def require_bm25s():
    try:
        import bm25s
    except ImportError:
        raise ImportError("the search tool needs the bm25s package: pip install 'rlvr[agents]'") from None
    return bm25s


def load_corpus(corpus: str | list[str]) -> list[dict[str, Any]]:
    if isinstance(corpus, list):
        return [{"id": str(i), "text": str(text)} for i, text in enumerate(corpus)]
    from rlvr.tasks.jsonl import iter_objects

    path = Path(corpus)
    docs = []
    for lineno, row in iter_objects(path):  # a line that is not a JSON object is a DataError naming it
        if not isinstance(row.get("text"), str):
            raise ValueError(f"{path}:{lineno}: expected an object with a \"text\" string")
        docs.append({"id": str(row.get("id", lineno)), "title": row.get("title"), "text": row["text"]})
    if not docs:
        raise ValueError(f"{path}: the corpus is empty")
    return docs


class Index:
    def __init__(self, docs: list[dict[str, Any]]):
        bm25s = require_bm25s()
        self.bm25s, self.docs = bm25s, docs
        self.retriever = bm25s.BM25()
        texts = [f"{d.get('title') or ''} {d['text']}" for d in docs]
        self.retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[dict[str, Any], float]]:
        tokens = self.bm25s.tokenize([query[:MAX_QUERY_CHARS]], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        found, scores = self.retriever.retrieve(tokens, k=min(k, len(self.docs)), show_progress=False)
        return [(self.docs[int(i)], float(s)) for i, s in zip(found[0], scores[0]) if s > 0]


@functools.lru_cache(maxsize=8)
def _file_index(path: str, mtime: float) -> Index:
    return Index(load_corpus(path))


def index_of(corpus: str | list[str]) -> Index:
    if isinstance(corpus, list):
        return Index(load_corpus(corpus))
    path = Path(corpus).resolve()
    if not path.is_file():
        raise ValueError(f"tool search: corpus file not found: {corpus}")
    return _file_index(str(path), path.stat().st_mtime)


def search_tool(name: str = "search", *, corpus: str | list[str], k: int = 3, max_doc_chars: int = 400) -> Tool:
    index = index_of(corpus)

    def search(query: str) -> str:
        hits = index.search(query, k)
        if not hits:
            return "no results"
        return "\n".join(f"[{d['id']}] {(d.get('title') + ': ') if d.get('title') else ''}{d['text'][:max_doc_chars]}"
                         for d, _ in hits)

    return Tool(name, "Search the document collection; returns the best-matching passages.",
                {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
                search, isolation="inline")
