"""Deletes applied inside the scan: position deletes (position_deletes.py: bitmaps or a join,
bitmaps.py), position delete files and deletion vectors read on the driver (delete_files.py,
dv.py), and the keys of equality delete files the anti-joins match (eq_deletes.py). Built on
physical/scan/ and physical/spark/."""
