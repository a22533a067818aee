"""Semantic search with the torch-free runtime:  python examples/embed_app.py BUNDLE_DIR ["query" ...]"""
import sys

from edgebert.runtime import EdgeSession

session = EdgeSession(sys.argv[1], provider="auto", precision="int8")  # hash-checked; best provider here
docs = ["The cat sits on the mat.", "Stocks fell sharply on Monday.", "A kitten is asleep on a rug.",
        "The central bank raised interest rates.", "Heavy rain is expected tomorrow."]
doc_vectors = session.embed(docs)                                       # (5, hidden), unit length
for query in sys.argv[2:] or ["a small cat resting", "money and markets"]:
    scores = doc_vectors @ session.embed(query)[0]                      # cosine similarities
    print(f"{query!r} -> {docs[int(scores.argmax())]!r} (cosine {scores.max():.3f})")
print("ran on", session.provider, "|", "; ".join(session.provider_notes))
