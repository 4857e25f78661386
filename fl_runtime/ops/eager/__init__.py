"""Eager launch: a torch op's call to a vendor kernel on the current stream (launcher.py), its per-signature programs (fast_path.py), marshaling (marshal.py) and output layouts (meta_cache.py)."""
