"""The sans-I/O core: protocol framing and parsing, jobs, the queue, the per-connection
engine and the stats replies. Pure: bytes, commands and a time in; replies out. No I/O,
no clock, no threads (tests/test_layering.py holds it to that)."""
