"""The Spark side of a session: the one mor starts (session.py, with Hadoop's s3a connector:
s3a.py, and its log configuration), the settings physical/ reads (spark_settings.py), Spark's
errors in the user's terms (spark_errors.py), small Arrow tables as DataFrames (arrow.py)."""
