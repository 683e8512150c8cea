"""Parsing outside data (web pages, PDFs, images, documents) in a bounded child process.

A parser fed hostile bytes may run for hours or allocate gigabytes, and C code cannot be
interrupted from Python. `run_bounded` runs one parse in a fresh child process with an address
space and CPU limit and a wall-clock budget, off the event loop, and turns every way it can end
badly into `ParseFailed` with a reason fit for the user.

Modules: `budget` (Budget, ParseFailed), `bounded` (run_bounded, parent side), `child` (the
child process), and one module per format. Nothing is imported here, so the child starts fast.
"""
