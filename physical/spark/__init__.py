"""The Spark side of a session, what the rest of physical/ builds on: the session mor starts
(session.py, with Hadoop's s3a connector: s3a.py, and its log configuration), what later
queries of a session reuse (reuse.py), the settings physical/ reads (spark_settings.py),
Spark's errors in the user's terms (spark_errors.py), small Arrow tables as DataFrames
(arrow.py), whether a recorded process still runs (processes.py). Imports nothing else of
physical/."""
