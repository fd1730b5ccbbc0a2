"""Physical layer: logical plan -> PySpark DataFrame. The only layer that imports pyspark."""

from physical.compile import Compiler, to_dataframe
from physical.session import FIELD_ID_CONF, local_session, prepare_session

__all__ = ["Compiler", "to_dataframe", "local_session", "prepare_session", "FIELD_ID_CONF"]
